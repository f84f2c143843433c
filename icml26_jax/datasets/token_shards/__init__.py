"""``token_shards``: a directory of ``.npy`` token arrays cut into LM windows (TFDS builder)."""

from icml26_jax.datasets.token_shards.token_shards import (
    NAME,
    SPLITS,
    TokenShards,
    TokenShardsConfig,
    config_name,
    load_token_shards,
    shard_files,
    split_sizes,
    token_shards_source,
)

__all__ = [
    "NAME",
    "SPLITS",
    "TokenShards",
    "TokenShardsConfig",
    "config_name",
    "load_token_shards",
    "shard_files",
    "split_sizes",
    "token_shards_source",
]
