"""The INT4 export of a quantised student (spec §Method, INT4 export; Claims 8-9): pack every
LSQ linear (baked f16 scales, two codes per byte), save and restore with orbax, and run the
packed model (dequantise on the fly, then dot) against fake-quant with the same baked scales.
"""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from icml26_jax.core import checkpoint
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.grace import int4


def path_keys(path) -> tuple:
    """A pytree path of an ``nnx.State`` as plain keys (``('lm', 'blocks', 0, 'q', 'kernel')``)."""
    out = []
    for k in path:
        for attr in ("key", "idx", "name"):
            if hasattr(k, attr):
                out.append(getattr(k, attr))
                break
    return tuple(x for x in out if x != "value")


def pack_state(trainable, group: int) -> dict:
    """``{'lm/blocks/0/q': Packed, ...}``: every quantised linear of a trainable state packed
    to INT4 (baked f16 scales, two codes per byte)."""
    flat = {path_keys(p): x for p, x in jax.tree_util.tree_flatten_with_path(trainable)[0]}
    return {"/".join(map(str, k[:-1])): int4.pack_int4(np.asarray(flat[k[:-1] + ("kernel",)]),
                                                       np.asarray(v), group)
            for k, v in flat.items() if k[-1] == "log_scale"}


def fp_from_quantised(fp_template, trainable):
    """The FP-architecture trainable state holding ``trainable``'s values (its ``log_scale``
    leaves dropped): where the packed kernels are later substituted."""
    flat = {path_keys(p): x for p, x in jax.tree_util.tree_flatten_with_path(trainable)[0]}
    return jax.tree_util.tree_map_with_path(lambda p, _: flat[path_keys(p)], fp_template)


def packed_forward(graphdef, frozen, fp_trainable, packed: dict, images, tokens):
    """Logits of the FP-architecture student whose decoder linears are the packed INT4
    weights, dequantised on the fly (``int4.unpack_int4``) inside the (jitted) forward."""
    def sub(p, x):
        k = path_keys(p)
        name = "/".join(map(str, k[:-1]))
        return int4.unpack_int4(packed[name]) if k[-1] == "kernel" and name in packed else x
    tr = jax.tree_util.tree_map_with_path(sub, fp_trainable)
    return nnx.merge(graphdef, frozen, tr)(images, tokens).logits


def on_mesh(mesh, tree):
    """``tree`` replicated on every device of ``mesh`` (unchanged when ``mesh`` is None)."""
    return tree if mesh is None else jax.tree.map(
        lambda x: mesh_lib.replicate(np.asarray(x), mesh), tree)


def export_and_check(c, qg, qfz, q_tr, sg, sfz, fp_template, test_d, eb, ckpt_dir) -> dict:
    """Packs the quantised linears, saves and restores them with orbax, runs the packed model
    and compares it with fake-quant under the same baked scales: max |logit difference| and
    prediction agreement on the answer positions of a test batch; byte counts of the LLM
    linears (fp32, bf16, packed: real ``.nbytes``) and of the whole student."""
    group = int(c.group)
    packed = pack_state(q_tr, group)
    names = sorted(packed)
    # Saved in the sorted order of the layer names (which the architecture determines).
    checkpoint.save(ckpt_dir, 0, {"qweight": [packed[n].qweight for n in names],
                                  "scales": [packed[n].scales for n in names]})
    saved = checkpoint.restore_latest(ckpt_dir)[1]
    packed_rt = {n: int4.Packed(np.asarray(q), np.asarray(s)) for n, q, s in
                 zip(names, saved["qweight"], saved["scales"])}
    roundtrip = all(np.array_equal(packed[n].qweight, packed_rt[n].qweight)
                    and np.array_equal(packed[n].scales, packed_rt[n].scales) for n in names)
    baked = jax.tree_util.tree_map_with_path(
        lambda p, x: int4.bake_log_scale(x) if path_keys(p)[-1] == "log_scale" else x, q_tr)
    nb = min(eb, len(test_d.tokens))
    b = slice(0, nb)
    fp_tr = fp_from_quantised(fp_template, q_tr)
    # One test batch through both models, sharded over every device like the evaluations (the
    # same per-device program on any process count, so the rounding-level difference too).
    mesh = mesh_lib.data_mesh()
    qfz_m, baked_m, sfz_m, fp_m, pk_m = on_mesh(mesh, (qfz, baked, sfz, fp_tr, packed_rt))
    fake = jax.jit(lambda fz, tr, im, tok: nnx.merge(qg, fz, tr)(im, tok).logits)
    packed_fn = jax.jit(lambda fz, tr, pk, im, tok: packed_forward(sg, fz, tr, pk, im, tok))
    z_fake = mesh_lib.batched(lambda im, tok: fake(qfz_m, baked_m, im, tok), nb, nb,
                              test_d.images[b], test_d.tokens[b], mesh=mesh)
    z_packed = mesh_lib.batched(lambda im, tok: packed_fn(sfz_m, fp_m, pk_m, im, tok), nb, nb,
                                test_d.images[b], test_d.tokens[b], mesh=mesh)
    mask = test_d.loss_mask[b]
    agree = 100.0 * float(np.mean(z_fake[mask].argmax(-1) == z_packed[mask].argmax(-1)))
    n_lin = sum(p.out_features * p.in_features for p in packed.values())
    n_all = sum(int(np.size(x)) for x in jax.tree.leaves(fp_tr))
    n_vision = sum(int(np.size(x)) for x in jax.tree.leaves(sfz))
    packed_lin = int4.packed_nbytes(packed)
    return {"max_abs_logit_diff": float(np.max(np.abs(z_fake - z_packed))),
            "prediction_agreement": agree, "roundtrip_bit_exact": bool(roundtrip),
            "n_linears": len(names),
            "bytes": {"linears_fp32": 4 * n_lin, "linears_bf16": 2 * n_lin,
                      "linears_packed": int(packed_lin),
                      "whole_fp32": 4 * (n_all + n_vision),
                      "whole_packed": 4 * (n_all + n_vision - n_lin) + int(packed_lin)},
            "ratio_bf16_over_packed": 2 * n_lin / packed_lin,
            "ratio_fp32_over_packed": 4 * n_lin / packed_lin}
