"""``digits_users``: sklearn's 8x8 digits partitioned over simulated users (TFDS builder)."""

from icml26_jax.datasets.digits_users.digits_users import (
    BUILDER_CONFIGS,
    DigitsUsers,
    DigitsUsersConfig,
    config_name,
    load_digits_users,
)
from icml26_jax.datasets.digits_users.partition import SPLITS, partition

__all__ = [
    "BUILDER_CONFIGS",
    "DigitsUsers",
    "DigitsUsersConfig",
    "SPLITS",
    "config_name",
    "load_digits_users",
    "partition",
]
