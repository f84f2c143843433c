"""The clients' CNN (spec §Module API ``model.py``): (conv 3x3 -> GroupNorm -> ReLU -> 2x2 max-pool)
x 2 -> dense 128 -> dense p (features h) -> ReLU -> dense C. 79.8k parameters at 16x16x3 inputs.

Convolutions are im2col (the 9 shifted slices of the zero-padded input concatenated on the
channel axis) plus one einsum, and pooling is the max of four strided sub-grids (a reshape-max
in the spec; equal, and cheaper to differentiate): under ``jax.vmap`` over clients
with per-client weights, ``lax.conv_general_dilated`` lowers to a grouped convolution that
XLA:CPU runs ~20x slower per client-step (spec §Pitfalls; ``benchmarks/fml.py`` (a)). GroupNorm,
not BatchNorm: normalisation statistics are per sample, so FedAvg averages no batch statistics
across domains (FedBN is a different method). [R] The paper uses ResNet-10.

The module is plain NNX (tree mode). At the jit boundary: ``graphdef, params =
nnx.split(model, nnx.Param)``; ``features(graphdef, params, x)`` and ``logits`` below are the
pure functions the federated loops vmap over clients.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx


def conv3x3(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    """'SAME' 3x3 convolution by im2col: ``x [B, H, W, Ci]``, ``kernel [3, 3, Ci, Co]`` (HWIO)
    -> ``[B, H, W, Co]``."""
    b, h, w, ci = x.shape
    xp = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    patches = jnp.concatenate([xp[:, dy:dy + h, dx:dx + w, :] for dy in range(3)
                               for dx in range(3)], axis=-1)  # [B, H, W, 9 Ci], (dy, dx, ci)
    return jnp.einsum("bhwk,ko->bhwo", patches, kernel.reshape(9 * ci, -1)) + bias


def max_pool2(x: jax.Array) -> jax.Array:
    """2x2 max-pool, stride 2: ``[B, H, W, C] -> [B, H/2, W/2, C]``, the elementwise max of the
    four strided sub-grids (equal to a reshape-max; its gradient is three selects, ~10 % faster
    per training step on XLA:CPU than the reshape-max's)."""
    return jnp.maximum(jnp.maximum(x[:, 0::2, 0::2], x[:, 1::2, 0::2]),
                       jnp.maximum(x[:, 0::2, 1::2], x[:, 1::2, 1::2]))


def group_norm(x: jax.Array, groups: int, scale: jax.Array, bias: jax.Array,
               eps: float = 1e-5) -> jax.Array:
    """GroupNorm over (H, W, C / groups) of each sample: ``[B, H, W, C]``.

    One pass: per-channel moments over (H, W), averaged within each group, and one fused
    ``x * a + d`` with per-(sample, channel) ``a``, ``d``. Reducing over the 5-D
    ``[B, H, W, G, C/G]`` view instead made GroupNorm ~40 % of a training step on XLA:CPU.
    """
    b, h, w, c = x.shape
    per = c // groups
    m1 = x.mean(axis=(1, 2)).reshape(b, groups, per).mean(-1)  # [B, G]
    m2 = (x * x).mean(axis=(1, 2)).reshape(b, groups, per).mean(-1)
    inv = jax.lax.rsqrt(jnp.maximum(m2 - m1 * m1, 0.0) + eps)
    a = jnp.repeat(inv, per, axis=-1) * scale  # [B, C]
    d = bias - jnp.repeat(m1 * inv, per, axis=-1) * scale
    return x * a[:, None, None, :] + d[:, None, None, :]


class CNN(nnx.Module):
    """The federated clients' network.

    Args:
      channels: output channels of the two conv blocks.
      hidden: width of the first dense layer.
      feat_dim: ``p``, the feature dimension (manifolds and prototypes live here).
      n_classes: ``C``.
      groups: GroupNorm groups (must divide every entry of ``channels``).
      in_channels: input channels (3).
      image_size: input height = width (16; 32 for the real-data path); the dense layer adapts.
      rngs: NNX rngs.
    """

    def __init__(self, channels: Sequence[int] = (16, 32), hidden: int = 128, feat_dim: int = 64,
                 n_classes: int = 10, groups: int = 8, *, in_channels: int = 3,
                 image_size: int = 16, rngs: nnx.Rngs):
        channels = tuple(int(ch) for ch in channels)
        if len(channels) != 2 or any(ch % groups for ch in channels):
            raise ValueError(f"channels must be two widths divisible by groups={groups}, got "
                             f"{channels}")
        if image_size % 4:
            raise ValueError(f"image_size must be divisible by 4 (two 2x2 pools), got "
                             f"{image_size}")
        init = nnx.initializers.he_normal()
        self.groups = groups
        self.kernels = nnx.List([nnx.Param(init(rngs.params(), (3, 3, a, b)))
                                 for a, b in zip((in_channels,) + channels[:1], channels)])
        self.conv_bias = nnx.List([nnx.Param(jnp.zeros((ch,))) for ch in channels])
        self.gn_scale = nnx.List([nnx.Param(jnp.ones((ch,))) for ch in channels])
        self.gn_bias = nnx.List([nnx.Param(jnp.zeros((ch,))) for ch in channels])
        flat = (image_size // 4) ** 2 * channels[-1]
        self.fc1 = nnx.Linear(flat, hidden, rngs=rngs)
        self.fc2 = nnx.Linear(hidden, feat_dim, rngs=rngs)
        self.head = nnx.Linear(feat_dim, n_classes, rngs=rngs)

    def features(self, x: jax.Array) -> jax.Array:
        """``x [B, H, W, 3] -> h [B, p]``."""
        for k, b, s, t in zip(self.kernels, self.conv_bias, self.gn_scale, self.gn_bias):
            x = conv3x3(x, k[...], b[...])
            x = jax.nn.relu(group_norm(x, self.groups, s[...], t[...]))
            x = max_pool2(x)
        x = jax.nn.relu(self.fc1(x.reshape(x.shape[0], -1)))
        return self.fc2(x)

    def classify(self, h: jax.Array) -> jax.Array:
        """``h [B, p] -> logits [B, C]``."""
        return self.head(jax.nn.relu(h))

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.classify(self.features(x))


def features(graphdef, params, x: jax.Array) -> jax.Array:
    return nnx.merge(graphdef, params).features(x)


def forward(graphdef, params, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(h [B, p], logits [B, C])``."""
    net = nnx.merge(graphdef, params)
    h = net.features(x)
    return h, net.classify(h)
