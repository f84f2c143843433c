"""The shared transformer: causality, scan over layers == a loop, hooks, errors, steps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.lm import train as lm_train
from icml26_jax.lm.transformer import Transformer, TransformerConfig

CFG = TransformerConfig(vocab_size=20, d_model=32, num_layers=3, num_heads=4, mlp_ratio=2)


def _tokens(seed=0, B=2, T=12):
    return jax.random.randint(jax.random.key(seed), (B, T), 0, 20)


def test_shapes_and_stacked_params():
    m = Transformer(CFG, rngs=nnx.Rngs(0))
    logits, inter = m(_tokens(), return_intermediates=True)
    assert logits.shape == (2, 12, 20) and logits.dtype == jnp.float32
    assert inter["hidden"].shape == (3, 2, 12, 32)
    assert inter["attention"].shape == (3, 2, 4, 12, 12)
    np.testing.assert_allclose(inter["attention"].sum(-1), 1.0, rtol=1e-5)
    assert m.blocks.layers.attn.q.kernel[...].shape == (3, 32, 32)  # leading depth axis


def test_causal():
    m = Transformer(CFG, rngs=nnx.Rngs(0))
    t = _tokens()
    t2 = t.at[:, 8:].set((t[:, 8:] + 1) % 20)
    a, b = m(t), m(t2)
    np.testing.assert_allclose(a[:, :8], b[:, :8], atol=1e-6)
    assert not np.allclose(a[:, 8:], b[:, 8:])
    bidir = Transformer(TransformerConfig(20, 32, 2, 4, causal=False), rngs=nnx.Rngs(0))
    assert not np.allclose(bidir(t)[:, :8], bidir(t2)[:, :8])


def test_scan_equals_loop():
    m = Transformer(CFG, rngs=nnx.Rngs(1))
    t = _tokens(1)
    ref = m(t)
    g, st = nnx.split(m.blocks.layers)
    x = m.embed(t) * np.sqrt(CFG.d_model)
    pos = jnp.broadcast_to(jnp.arange(12), (2, 12))
    for i in range(CFG.num_layers):
        x, _ = nnx.merge(g, jax.tree.map(lambda v, i=i: v[i], st))(x, pos, None)
    got = m.embed.attend(m.norm(x))
    np.testing.assert_allclose(got, ref, atol=1e-5)


def test_position_shift_invariance_of_default_rope():
    m = Transformer(CFG, rngs=nnx.Rngs(2))
    t = _tokens(2)
    pos = jnp.broadcast_to(jnp.arange(12), (2, 12))
    np.testing.assert_allclose(m(t, positions=pos), m(t, positions=pos + 29), atol=2e-5)


def test_conditioning_and_errors():
    cfg = TransformerConfig(20, 32, 2, 4, cond_dim=16, causal=False)
    m = Transformer(cfg, rngs=nnx.Rngs(0))
    t = _tokens()
    a = m(t, cond=jnp.array([0.1, 0.1]))
    b = m(t, cond=jnp.array([0.9, 0.9]))
    assert not np.allclose(a, b)
    with pytest.raises(ValueError, match="cond_dim"):
        m(t)
    with pytest.raises(ValueError, match="cond_dim is None"):
        Transformer(CFG, rngs=nnx.Rngs(0))(t, cond=jnp.zeros(2))
    with pytest.raises(ValueError, match="num_heads"):
        TransformerConfig(20, 30, 2, 4)
    with pytest.raises(ValueError, match="positions"):
        Transformer(CFG, rngs=nnx.Rngs(0))(t, positions=jnp.zeros((2, 5), jnp.int32))


def test_attention_mask_blocks_keys():
    m = Transformer(TransformerConfig(20, 32, 2, 4, causal=False), rngs=nnx.Rngs(0))
    t = _tokens()
    mask = jnp.ones((2, 12, 12), bool).at[:, :, 6:].set(False)
    t2 = t.at[:, 6:].set((t[:, 6:] + 3) % 20)
    np.testing.assert_allclose(m(t, attention_mask=mask)[:, :6],
                               m(t2, attention_mask=mask)[:, :6], atol=1e-6)


def test_train_and_eval_steps():
    import optax

    m = Transformer(CFG, rngs=nnx.Rngs(0))
    g, p, r = nnx.split(m, nnx.Param, ...)
    rows = np.tile(np.arange(13) % 5, (4, 1)).astype(np.int32)  # a periodic sequence
    batch = lm_train.next_token_batch(rows)
    np.testing.assert_array_equal(batch["targets"], rows[:, 1:])
    step = jax.jit(lm_train.make_train_step(g, optax.adam(1e-2)))
    opt = optax.adam(1e-2)
    o = opt.init(p)
    losses = []
    for _ in range(30):
        p, o, met = step(p, r, o, batch)
        losses.append(float(met["loss"]))
    assert losses[-1] < 0.3 * losses[0]
    ev = lm_train.eval_step(g, p, r, batch)
    assert float(ev["count"]) == 4 * 12
    np.testing.assert_allclose(float(ev["nll"]) / 48, losses[-1], rtol=0.5)
    np.testing.assert_allclose(ev["count_by_pos"], 4.0)


def _perturb(model, scale=0.3, seed=1):
    """Random non-zero values for every parameter (zero-initialised adaLN maps included)."""
    graphdef, params = nnx.split(model, nnx.Param)
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    leaves = [x + scale * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)]
    return nnx.merge(graphdef, jax.tree.unflatten(treedef, leaves))


@pytest.mark.parametrize("cond_mode", [None, "add", "adaln"])
def test_kv_cache_decode_equals_full_causal_forward(cond_mode):
    cfg = TransformerConfig(20, 32, 2, 4, mlp_ratio=2, tie_embeddings=False,
                            cond_dim=None if cond_mode is None else 8,
                            cond_mode=cond_mode or "add")
    m = _perturb(Transformer(cfg, rngs=nnx.Rngs(0)))
    B, T = 2, 10
    tokens = _tokens(B=B, T=T)
    # Arbitrary RoPE positions (tokens may arrive in any order, as in Eso-LM sampling).
    positions = jnp.stack([jax.random.permutation(jax.random.key(b), T) for b in range(B)])
    cond = None if cond_mode is None else jnp.array([0.3, 1.2])
    full = m(tokens, positions=positions, cond=cond)
    cache = m.init_cache(B, T)
    steps = []
    for t in range(T):  # one token per call
        logits, cache = m.decode_step(cache, tokens[:, t], positions[:, t], cond)
        steps.append(logits)
    np.testing.assert_allclose(jnp.stack(steps, 1), full, atol=2e-4)
    # Chunks of 3, 3, 4 with a query-only tail: keep=2 leaves the third token out of the
    # cache, and the next chunk starts from it again.
    cache = m.init_cache(B, T)
    out1, cache = m.decode_step(cache, tokens[:, :3], positions[:, :3], cond, keep=2)
    assert int(cache["index"]) == 2
    np.testing.assert_allclose(out1, full[:, :3], atol=2e-4)
    out2, cache = m.decode_step(cache, tokens[:, 2:6], positions[:, 2:6], cond)
    np.testing.assert_allclose(out2, full[:, 2:6], atol=2e-4)


def test_adaln_starts_unconditioned_and_unrolled_equals_scanned():
    ada = TransformerConfig(20, 32, 3, 4, mlp_ratio=2, tie_embeddings=False, cond_dim=8,
                            cond_mode="adaln")
    m = Transformer(ada, rngs=nnx.Rngs(0))
    t = _tokens()
    a, b = m(t, cond=jnp.array([0.0, 0.0])), m(t, cond=jnp.array([2.0, 2.0]))
    np.testing.assert_allclose(a, b, atol=1e-6)  # zero-initialised modulation
    m = _perturb(m)
    a, b = m(t, cond=jnp.array([0.0, 0.0])), m(t, cond=jnp.array([2.0, 2.0]))
    assert float(jnp.abs(a - b).max()) > 1e-2  # the conditioning acts once trained
    unrolled = TransformerConfig(20, 32, 3, 4, mlp_ratio=2, tie_embeddings=False, cond_dim=8,
                                 cond_mode="adaln", unroll_layers=True)
    g, p = nnx.split(m, nnx.Param)
    mu = _perturb(Transformer(unrolled, rngs=nnx.Rngs(0)))
    gu, _ = nnx.split(mu, nnx.Param)
    np.testing.assert_allclose(nnx.merge(gu, p)(t, cond=jnp.array([0.0, 2.0])),
                               nnx.merge(g, p)(t, cond=jnp.array([0.0, 2.0])), atol=1e-5)
    with pytest.raises(ValueError, match="cond_mode"):
        TransformerConfig(20, 32, 3, 4, cond_dim=8, cond_mode="film")
