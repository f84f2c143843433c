"""``ifdl_folder``: image-forgery benchmark folders (images, masks, descriptions) as a TFDS
builder."""

from icml26_jax.datasets.ifdl_folder.ifdl_folder import (
    IMAGE_EXTENSIONS,
    KEYS,
    NAME,
    FolderConfig,
    IfdlFolder,
    config_name,
    load_ifdl_folder,
    pair_files,
    read_descriptions,
    read_pair,
)

__all__ = ["IMAGE_EXTENSIONS", "KEYS", "NAME", "FolderConfig", "IfdlFolder", "config_name",
           "load_ifdl_folder", "pair_files", "read_descriptions", "read_pair"]
