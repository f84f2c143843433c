"""``offline_episodes``: offline-RL transitions stored one episode a record (TFDS builder)."""

from icml26_jax.datasets.offline_episodes.offline_episodes import (
    ID_KEYS,
    KEYS,
    NAME,
    SPLITS,
    STEP_KEYS,
    EpisodesConfig,
    OfflineEpisodes,
    SourceInfo,
    config_name,
    load_offline_episodes,
    offline_episodes_source,
    save_source,
    source_info,
)

__all__ = [
    "ID_KEYS",
    "KEYS",
    "NAME",
    "SPLITS",
    "STEP_KEYS",
    "EpisodesConfig",
    "OfflineEpisodes",
    "SourceInfo",
    "config_name",
    "load_offline_episodes",
    "offline_episodes_source",
    "save_source",
    "source_info",
]
