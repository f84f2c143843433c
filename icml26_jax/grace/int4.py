"""Real INT4 export of LSQ-quantised kernels (spec §Method "INT4 export").

A kernel w [in, out] with scales s [out, in // G] becomes a :class:`Packed`:

- ``scales`` float16 [out, in // G]: s rounded to float16 ("baked", :func:`bake_log_scale`);
- ``qweight`` uint8 [out, in / 2]: codes u = q + 8 in [0, 15] with q = clamp(round(w/s), -8, 7),
  two per byte, the LOW nibble holding the even input column 2k, the high nibble column 2k + 1.

Dequantisation is w_hat[i, o] = scales[o, i // G] (u[o, i] - 8), done on the fly before a
``jnp.dot`` (XLA CPU has no int4 GEMM). Memory is out in / 2 + 2 out in / G bytes against
4 out in (fp32) or 2 out in (bf16): 3.76x below bf16 at G = 64.

AWQ mapping (one to one): AWQ GEMM stores W = scales (u - zeros) with unsigned u in [0, 15]
and per-group ``scales``/``zeros`` of shape [in // G, out]. Our symmetric codes are exactly
that with ``zeros = 8`` everywhere, ``scales = Packed.scales.T`` and the same u = q + 8; only
the container differs (AWQ packs eight nibbles per int32 in its own interleaved order, we pack
two per uint8 in column order), so re-packing is a bit permutation with no numerical change.
This is the conversion of the official ``qat_to_awq.py``.

Packing is an export step and uses numpy; :func:`unpack_int4` and :func:`int4_dense` are jnp
and jit-able (``Packed`` is a NamedTuple of two arrays, so it is a pytree; ``group`` and the
feature sizes are derived from the static shapes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26_jax.grace import lsq

# float16 range used when baking: scales are clamped into [2^-24, 65504] (the smallest
# float16 subnormal and the largest finite float16) so that no scale bakes to 0 or inf.
F16_MIN = float(2.0 ** -24)
F16_MAX = 65504.0
ZERO_POINT = 8


class Packed(NamedTuple):
    """A packed INT4 kernel: ``qweight`` uint8 [out, in / 2] (low nibble = even input column,
    codes q + 8), ``scales`` float16 [out, in // G]."""

    qweight: np.ndarray
    scales: np.ndarray

    @property
    def out_features(self) -> int:
        return self.qweight.shape[0]

    @property
    def in_features(self) -> int:
        return 2 * self.qweight.shape[1]

    @property
    def group(self) -> int:
        return self.in_features // self.scales.shape[1]


def baked_scale(log_scale):
    """float16 scales [out, in // G]: exp(clamp(log_scale)) rounded to float16, clamped into the
    finite positive float16 range."""
    s = lsq.scale_from_log(jnp.asarray(log_scale, jnp.float32))
    return jnp.clip(s, F16_MIN, F16_MAX).astype(jnp.float16)


def bake_log_scale(log_scale):
    """log of the float16-rounded ("baked") scale, float32 [out, in // G].

    Fake-quant with these log-scales uses the scales the packed model uses (up to the float32
    round-off of exp(log s), ~1e-7 relative): compare packed with fake-quant only after baking
    (spec §Pitfalls; unbaked, the logits differ by about 1e-3).
    """
    return jnp.log(baked_scale(log_scale).astype(jnp.float32))


def pack_int4(w, log_scale, group: int) -> Packed:
    """Packs a kernel w [in, out] with its log_scale [out, in // G] into INT4 (numpy arrays).

    The codes are q = clamp(round(w / s), -8, 7) with s = exp(bake_log_scale(log_scale)), the
    very float32 scale :func:`~icml26_jax.grace.lsq.fake_quant` uses on baked log-scales, so
    the codes equal fake-quant's bit for bit and the two dequantised weights differ only by
    float16 s versus its float32 exp(log s) (~1e-7 relative). A kernel from the official
    PyTorch trainer (``weight`` [out, in], flat ``log_scale``) is passed as
    ``pack_int4(weight.T, log_scale.reshape(out, in // G), G)``.

    Args:
      w: kernel [in, out]; ``in`` must be even.
      log_scale: [out, in // group].
      group: G, which must divide ``in``.
    """
    w = jnp.asarray(w, jnp.float32)
    log_scale = jnp.asarray(log_scale, jnp.float32)
    lsq.check_shapes(w, log_scale, group)
    n_in, n_out = w.shape
    if n_in % 2:
        raise ValueError(f"w must have an even input dim to hold two codes per byte, "
                         f"got in_features={n_in}")
    q_min, q_max = lsq.qrange(4)
    s = lsq.scale_from_log(bake_log_scale(log_scale))  # [out, in // G], as in fake_quant
    q = jnp.clip(jnp.round(lsq.to_groups(w, group) / s[..., None]), q_min, q_max)
    u = (np.asarray(q).reshape(n_out, n_in) + ZERO_POINT).astype(np.uint8)  # [out, in]
    qweight = (u[:, 0::2] | (u[:, 1::2] << 4)).astype(np.uint8)
    return Packed(qweight, np.asarray(baked_scale(log_scale)))


def unpack_int4(p: Packed):
    """w_hat [in, out] float32 = scales[o, i // G] (u[o, i] - 8) (jnp, jit-able)."""
    qw = jnp.asarray(p.qweight)
    lo, hi = qw & 0xF, qw >> 4
    u = jnp.stack([lo, hi], axis=-1).reshape(p.out_features, p.in_features)  # [out, in]
    q = u.astype(jnp.float32) - float(ZERO_POINT)
    s = jnp.asarray(p.scales).astype(jnp.float32)  # [out, in // G]
    wg = q.reshape(p.out_features, p.scales.shape[1], p.group) * s[..., None]
    return lsq.from_groups(wg)


def int4_dense(x, p: Packed, bias=None):
    """y = x w_hat (+ bias): dequantise on the fly, then ``jnp.dot`` in ``x.dtype``."""
    y = jnp.dot(x, unpack_int4(p).astype(x.dtype))
    if bias is not None:
        y = y + jnp.asarray(bias).astype(y.dtype)
    return y


def _leaf_value(x):
    return x[...] if isinstance(x, nnx.Variable) else x


def export_packed(params):
    """Replaces every QDense's (kernel, log_scale) pair in a params tree by a :class:`Packed`.

    Walks nested mappings (``nnx.State`` or dicts) and lists/tuples. A mapping holding both
    ``'kernel'`` and ``'log_scale'`` becomes ``Packed`` if those are its only keys; otherwise
    (e.g. a ``'bias'``) it becomes a dict of its other entries plus ``'packed'``. Everything
    else is kept. The result is a plain nested dict with raw arrays (``nnx.Variable`` leaves
    unwrapped), ready for orbax. The group size is read off the shapes: G = in // log_scale
    columns.
    """
    if isinstance(params, Mapping):
        if "kernel" in params and "log_scale" in params:
            kernel = np.asarray(_leaf_value(params["kernel"]))
            log_scale = np.asarray(_leaf_value(params["log_scale"]))
            if log_scale.ndim != 2 or log_scale.shape[1] == 0:
                raise ValueError(f"log_scale must be [out, in // G], got {log_scale.shape}")
            packed = pack_int4(kernel, log_scale, kernel.shape[0] // log_scale.shape[1])
            rest = {k: export_packed(v) for k, v in params.items()
                    if k not in ("kernel", "log_scale")}
            return packed if not rest else {**rest, "packed": packed}
        return {k: export_packed(v) for k, v in params.items()}
    if isinstance(params, Packed):
        return params
    if isinstance(params, (list, tuple)):
        return type(params)(export_packed(v) for v in params)
    return _leaf_value(params)


def _is_packed(x) -> bool:
    return isinstance(x, Packed)


def packed_nbytes(tree) -> int:
    """Real bytes of the :class:`Packed` leaves of ``tree`` (qweight + scales), nothing else."""
    leaves = jax.tree_util.tree_leaves(tree, is_leaf=_is_packed)
    return int(sum(p.qweight.nbytes + p.scales.nbytes for p in leaves if _is_packed(p)))


def tree_nbytes(tree) -> int:
    """Real bytes of every array in ``tree`` (Packed fields included; ``nnx.Variable``s are
    pytrees, so an ``nnx.State`` works as is)."""
    return int(sum(x.nbytes for x in jax.tree_util.tree_leaves(tree) if hasattr(x, "nbytes")))
