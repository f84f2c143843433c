"""TFDS builders for the datasets our papers share, one package per builder.

Importing a builder's package registers it with TFDS (``tfds.builder("digits_users/...")``);
this package itself imports nothing so that ``import icml26_jax.datasets`` stays cheap.
"""
