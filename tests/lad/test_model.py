"""The retrieval transformer (spec Tests #8, #9): padding, attention rows from the same pass,
sharded scoring == unsharded, determinism."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.lad import adapter, data, model


def _episodes(n_cand=4, n=6, seed=0):
    pool = data.load_pool(0)
    return data.make_episodes(pool, "test", n_cand, n, "random", np.full(n_cand, 1 / n_cand),
                              np.random.default_rng(seed))


def _batch(n_cand=4, n=6, seed=0, t_max=data.T_MAX):
    return data.tokenize(_episodes(n_cand, n, seed), t_max)


def test_padding_attention_rows_and_recomputed_attention():
    m = model.RetrievalLM(d=32, layers=3, heads=2, mlp=64, rngs=nnx.Rngs(0))
    padded = _batch()
    tight = _batch(t_max=data.seq_len(4))
    args = lambda b: [jnp.asarray(x) for x in (b.tokens, b.patches, b.is_patch, b.last_idx)]  # noqa: E731
    lp, ap = m(*args(padded))
    lt, at = m(*args(tight))
    np.testing.assert_allclose(np.asarray(lp), np.asarray(lt), atol=1e-5)
    np.testing.assert_allclose(np.asarray(ap)[..., :at.shape[-1]], np.asarray(at), atol=1e-6)
    ap = np.asarray(ap)
    np.testing.assert_allclose(ap.sum(-1), 1.0, atol=1e-5)
    last = padded.last_idx[0]
    assert np.all(ap[..., last + 1:] == 0.0)  # causal: nothing after the answering token
    for layer in range(3):
        full = np.asarray(m.layer_attention(*args(padded)[:3], layer))  # [B, H, T, T]
        rows = full[np.arange(len(padded.last_idx)), :, padded.last_idx]
        np.testing.assert_allclose(rows, ap[:, layer], atol=1e-6)


def test_sharded_scoring_equals_unsharded_and_is_deterministic():
    assert jax.device_count() == 8
    g, p = nnx.split(model.RetrievalLM(d=32, layers=3, heads=2, mlp=64, rngs=nnx.Rngs(1)),
                     nnx.Param)
    b = _episodes(n=13)  # not a multiple of 8: the sharded path pads
    one = adapter.FlaxRetrievalScorer(g, p)
    mesh = mesh_lib.data_mesh()
    many = adapter.FlaxRetrievalScorer(g, p, mesh=mesh)
    # Chunks of 5 (padded to 8 rows each), the last one wrapping around: same numbers.
    chunked = adapter.FlaxRetrievalScorer(g, p, mesh=mesh, chunk=5)
    lp1, sc1 = one.score(b, (1, 2))
    lp8, sc8 = many.score(b, (1, 2))
    lp5, sc5 = chunked.score(b, (1, 2))
    assert lp8.shape == lp5.shape == (13, 4) and sc8.shape == sc5.shape == (13, 2, 4)
    np.testing.assert_allclose(lp1, lp8, atol=1e-5)
    np.testing.assert_allclose(sc1, sc8, atol=1e-6)
    np.testing.assert_array_equal(lp5, lp8)
    np.testing.assert_array_equal(sc5, sc8)
    assert one.n_forward == many.n_forward == chunked.n_forward == 13
    g2, p2 = nnx.split(model.RetrievalLM(d=32, layers=3, heads=2, mlp=64, rngs=nnx.Rngs(1)),
                       nnx.Param)
    lp2, _ = adapter.FlaxRetrievalScorer(g2, p2).score(b, (1, 2))
    np.testing.assert_array_equal(lp1, lp2)
    np.testing.assert_array_equal(_batch(seed=3).tokens, _batch(seed=3).tokens)
