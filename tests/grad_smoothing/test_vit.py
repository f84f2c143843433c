"""ViT of the ``full`` variant: patches, stacked blocks, data and folds, the paired replicas."""

import jax
import numpy as np
import pytest
from flax import nnx

from icml26_jax.grad_smoothing import configs, model, transform, vit


def test_patchify_matches_manual_patches():
    x = np.arange(2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4)
    p = model.patchify(x, 2)
    assert p.shape == (2, 4, 4)
    np.testing.assert_array_equal(p[1, 0], x[1, :2, :2].ravel())
    np.testing.assert_array_equal(p[1, 1], x[1, :2, 2:].ravel())  # row-major patch grid
    np.testing.assert_array_equal(p[0, 2], x[0, 2:, :2].ravel())
    with pytest.raises(ValueError, match="multiple of patch"):
        model.patchify(np.zeros((1, 5, 5)), 2)


def test_vit_blocks_stacked_along_depth_and_smoothable():
    m = model.ViT(4, 16, 2, 2, 8, 10, rngs=nnx.Rngs(0))
    params = nnx.state(m, nnx.Param)
    flat = jax.tree_util.tree_leaves_with_path(params)
    blocks = [(p, x) for p, x in flat if transform.default_block_filter(p, x, 4)]
    assert blocks and all(x.shape[0] == 4 for _, x in blocks)
    names = {str(p) for p, x in flat if not transform.default_block_filter(p, x, 4)}
    assert any("patch_embed" in n for n in names) and any("head" in n for n in names)
    logits = m(np.random.default_rng(0).standard_normal((3, 8, 8)))
    assert logits.shape == (3, 10) and bool(np.all(np.isfinite(logits)))
    with pytest.raises(ValueError, match=r"images must be \[B, 8, 8\]"):
        m(np.zeros((3, 6, 6)))
    with pytest.raises(ValueError, match="multiple of patch"):
        model.ViT(4, 16, 2, 3, 8, 10, rngs=nnx.Rngs(0))


def test_vit_is_permutation_equivariant_before_pooling_without_positions():
    # Bidirectional attention, no RoPE: with the learned positions zeroed, permuting the
    # patch tokens leaves the mean-pooled logits unchanged (and they change with positions).
    m = model.ViT(4, 16, 2, 2, 8, 10, rngs=nnx.Rngs(1))
    tok = np.random.default_rng(1).standard_normal((2, 16, 4)).astype(np.float32)
    perm = np.random.default_rng(2).permutation(16)
    with_pos = m.forward_patches(tok), m.forward_patches(tok[:, perm])
    assert float(np.abs(with_pos[0] - with_pos[1]).max()) > 1e-4
    m.pos[...] = np.zeros_like(m.pos[...])
    np.testing.assert_allclose(m.forward_patches(tok), m.forward_patches(tok[:, perm]),
                               atol=1e-5)


def test_procedural_images_seeded_and_all_classes():
    x1, y1 = vit.procedural_images(300, seed=3)
    x2, y2 = vit.procedural_images(300, seed=3)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    assert x1.shape == (300, 16, 16) and set(np.unique(y1)) == set(range(10))
    # Shapes differ: class-mean images are distinct.
    means = np.stack([x1[y1 == k].mean(0) for k in range(10)])
    d = np.linalg.norm(means[:, None] - means[None], axis=(-1, -2))
    assert d[~np.eye(10, dtype=bool)].min() > 0.5


def test_folds_partition_and_selection_split():
    fs = vit.folds(103, 5)
    tests = np.concatenate([te for _, te in fs])
    np.testing.assert_array_equal(np.sort(tests), np.arange(103))
    for tr, te in fs:
        assert not set(tr) & set(te) and len(tr) + len(te) == 103
    fit, held = vit.selection_split(fs[0][0])
    assert not set(fit) & set(held) and len(fit) + len(held) == len(fs[0][0])
    with pytest.raises(ValueError, match="folds"):
        vit.folds(10, 1)


def _tiny_vit(**kw):
    c = configs.get_config("full")
    c.full.vit.update(dict(depth=4, d_model=16, num_heads=2, patch=4, epochs=2, batch_size=16,
                           log_every_epochs=1, folds=2, seeds=(0,), lrs=(3e-3,)))
    c.full.vit.update(kw)
    return c


def test_vit_replicas_paired_and_alpha_zero_is_base(tmp_path):
    x, y = vit.procedural_images(96, seed=0)
    fs = vit.folds(len(x), 2)
    c = _tiny_vit(alpha=0.0)
    logs = vit.train_vit_replicas(c, x, y, [fs[0]] * 3, [0, 0, 1], ["base", "smoothed", "base"],
                                  [3e-3] * 3, ckpt_dir=str(tmp_path / "a"), name="t")
    assert logs["test_acc"].shape == (2, 3)
    # alpha = 0: the smoothed arm is exactly the base arm (same init, same batches).
    np.testing.assert_allclose(logs["test_loss"][:, 0], logs["test_loss"][:, 1], rtol=1e-6)
    assert abs(float(logs["test_loss"][-1, 0] - logs["test_loss"][-1, 2])) > 1e-6  # seed 1
    # Same replica layout as above, so the compiled program is reused (alpha is data).
    c = _tiny_vit(alpha=0.4)
    sm = vit.train_vit_replicas(c, x, y, [fs[0]] * 3, [0, 0, 1], ["base", "smoothed", "base"],
                                [3e-3] * 3, ckpt_dir=str(tmp_path / "b"), name="t")
    np.testing.assert_allclose(sm["test_loss"][:, 0], logs["test_loss"][:, 0], rtol=1e-6)
    assert abs(float(sm["test_loss"][-1, 1] - sm["test_loss"][-1, 0])) > 1e-6
