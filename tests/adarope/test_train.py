"""Training program: vmapped arms == one by one, T3 batches drawn in the program == the
stream's batches, extension init == YaRN, tying, determinism, config errors, the entry script,
and the smoke-scale claims."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26_jax.adarope import configs, optim, train
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core import results, testing
from icml26_jax.lm import hmm as hmm_lib
from icml26_jax.lm import train as lm_train


def _tiny(**kw):
    c = configs.get_config("smoke")
    c.model.d_model = 32
    c.model.num_heads = 4
    c.batch_size = 4
    c.steps = 4
    c.chunk = 2
    c.extension.update(steps=4, chunk=2, batch_size=2, num_train=8)
    c.update(kw)
    return c


def _one_chunk(c, arms, seeds, prog=None):
    cfgs = [train.rope_config(c, a) for a in arms]
    g, p, r = train.build(c, cfgs, seeds)
    opt = optim.make_optimizer(train.dict_config(c.opt, steps=c.steps))
    o = jax.vmap(opt.init)(p)
    index = np.arange(len(arms)) * 0
    batches = train._pretrain_batches(c, [seeds[0]], index)(0, c.chunk)
    # One jitted program for every call (compiled once per number of models): the arms share
    # one graph definition and optimiser.
    prog = prog or train._train_program(g, opt, tie_layers=False)
    p, o, loss, _ = prog(p, r, o, batches)
    return p, np.asarray(loss), prog


def test_vmapped_arms_equal_one_by_one():
    c = _tiny()
    arms = ["rope", "adarope", "nope"]
    p_all, loss_all, prog = _one_chunk(c, arms, [0] * 3)
    for i, arm in enumerate(arms[:2]):
        p_one, loss_one, _ = _one_chunk(c, [arm], [0], prog)
        testing.tree_allclose(jax.tree.map(lambda x: x[i:i + 1], p_all), p_one, atol=1e-6,
                              rtol=1e-5)
        np.testing.assert_allclose(loss_all[i], loss_one[0], rtol=1e-6)
    # Same seed -> same numbers; the arms differ only in their encodings.
    p2, loss2, _ = _one_chunk(c, arms, [0] * 3, prog)
    testing.tree_allclose(p_all, p2, atol=0, rtol=0)
    assert not np.allclose(loss_all[0], loss_all[2])


def test_models_sharded_over_every_device_equal_unsharded(tmp_path):
    """3 models on 8 devices (padded to 8 by repeating the last one): training, evaluation
    and the learned frequencies equal the single-device program, padding dropped."""
    assert jax.device_count() % 3
    c = _tiny()
    arms = ["rope", "adarope", "nope"]
    p_ref, loss_ref, _ = _one_chunk(c, arms, [0] * 3)  # one device, no mesh
    g, p, r = train.build(c, [train.rope_config(c, a) for a in arms], [0] * 3)
    logf0 = train.learned_log_freqs(g, p, r)
    opt = optim.make_optimizer(train.dict_config(c.opt, steps=c.steps))
    params, losses = train._train(c, g, p, r, opt,
                                  train._pretrain_batches(c, [0], np.zeros(3, int)),
                                  steps=c.chunk, chunk=c.chunk, ckpt_dir=str(tmp_path / "ck"),
                                  fingerprint=3, name="t")
    assert losses.shape == (c.chunk, 3)
    np.testing.assert_allclose(losses.T, loss_ref, rtol=1e-5)
    testing.tree_allclose(params, jax.tree.map(np.asarray, p_ref), atol=1e-6, rtol=1e-5)

    def logf(pp, rr):
        gl, st = nnx.split(nnx.merge(g, pp, rr).blocks.layers)
        return jax.vmap(lambda x: train._logf(nnx.merge(gl, x).attn.pos))(st)

    np.testing.assert_array_equal(logf0, np.asarray(jax.jit(jax.vmap(logf))(p, r)))
    sets = {"a": train._mqar(c, np.random.default_rng(0), 4, c.train_len)}
    ev = train.evaluate(_tiny(eval_batch=2), g, params, r, sets)["a"]
    for i in range(3):
        one = lm_train.eval_step(g, jax.tree.map(lambda x, i=i: x[i], params),
                                 jax.tree.map(lambda x, i=i: x[i], r), sets["a"])
        np.testing.assert_allclose(ev["nll"][i], one["nll"] / one["count"], rtol=1e-5)


def test_lm_batches_drawn_in_the_program_equal_the_stream():
    """T3: the program, its 3 models sharded over 3 devices, draws exactly the batches of the
    stream's host view (the preloaded program fed them gives the same numbers); models of
    one seed share them whatever their arm; a pure function of (seed, step)."""
    c = _tiny()
    arms, seeds = ["rope", "adarope", "rope"], [0, 0, 1]
    stream = train._lm_batches(train.lm_language(c), [0, 1], np.array([0, 0, 1]),
                               c.train_len, c.batch_size, salt=train.LM_PRETRAIN_SALT)
    b = stream(2, 2)
    assert b["tokens"].shape == (2, 3, c.batch_size, c.train_len)
    np.testing.assert_array_equal(b["tokens"][:, 0], b["tokens"][:, 1])
    assert not np.array_equal(b["tokens"][:, 0], b["tokens"][:, 2])
    np.testing.assert_array_equal(stream(0, 4)["tokens"][2:], b["tokens"])
    np.testing.assert_array_equal(b["targets"][..., :-1], b["tokens"][..., 1:])
    g, p, r = train.build(c, [train.rope_config(c, a) for a in arms], seeds,
                          vocab_size=c.lm.vocab_size)
    opt = optim.make_optimizer(train.dict_config(c.opt, steps=c.steps))
    copy = lambda t: jax.tree.map(np.array, t)  # noqa: E731  (the programs donate)
    want = train._train_program(g, opt, False)(copy(p), r, jax.vmap(opt.init)(p), b)
    mesh = train.models_mesh(3)
    shard = lambda t: mesh_lib.shard_replicas(t, mesh, 3)  # noqa: E731
    with jax.set_mesh(mesh):
        hmm = jax.tree.map(lambda x: mesh_lib.replicate(np.asarray(x), mesh),
                           hmm_lib.device_hmm(stream.hmm))
        prog = train._train_program(g, opt, False, (stream.salt, c.batch_size, c.train_len))
        got = mesh_lib.to_host(prog(shard(copy(p)), shard(r), shard(jax.vmap(opt.init)(p)),
                                    shard(stream.seeds), hmm,
                                    mesh_lib.replicate(train.step_indices(2, 2), mesh)), 3)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-6)  # losses [N, n]
    testing.tree_allclose(got[0], jax.tree.map(np.asarray, want[0]), atol=1e-7, rtol=1e-6)


def test_extension_models_at_init_equal_yarn():
    c = _tiny()
    cfgs = [train.rope_config(c, "rope", a) for a in ("yarn", "yarn-learned-uniform",
                                                      "adarope-ext")]
    g, p, r = train.build(c, cfgs, [0, 0, 0])
    b = train._mqar(c, np.random.default_rng(0), 2, 256)
    logits = jax.vmap(lambda pp, rr: lm_train.forward(g, pp, rr, b))(p, r)
    scale = float(jnp.abs(logits[0]).max())
    np.testing.assert_allclose(logits[1], logits[0], atol=1e-6 * scale, rtol=0)
    np.testing.assert_allclose(logits[2], logits[0], atol=1e-6 * scale, rtol=0)


def test_learned_uniform_is_tied_across_layers_and_heads(tmp_path):
    c = _tiny()
    cfgs = [train.rope_config(c, "rope", a) for a in ("yarn-learned-uniform", "adarope-ext")]
    g, p, r = train.build(c, cfgs, [0, 0])
    opt = optim.make_optimizer(train.dict_config(c.opt, steps=4), train="pe")
    p, _ = train._train(c, g, p, r, opt, train._extension_batches(c, [0], np.array([0, 0])),
                        steps=4, chunk=2, ckpt_dir=str(tmp_path / "ck"), fingerprint=1,
                        name="ext", tie_layers=True)
    pos = p["blocks"]["layers"]["attn"]["pos"]
    for name in ("log_interp", "log_temp", "len_slope"):
        v = np.asarray(pos[name][...])  # [models, L, H, ...]
        np.testing.assert_allclose(v[0], np.broadcast_to(v[0, :1, :1], v[0].shape), rtol=1e-6)
        assert not np.allclose(v[1], np.broadcast_to(v[1, :1, :1], v[1].shape))
    # The backbone stays frozen during extension.
    g2, p0, _ = train.build(c, cfgs, [0, 0])
    np.testing.assert_array_equal(p["embed"]["embedding"][...], p0["embed"]["embedding"][...])


class _Killed(Exception):
    pass


@pytest.mark.slow
def test_train_resumes(tmp_path):
    """A run killed after its first chunk resumes from the checkpoint to the same numbers."""
    c = _tiny()
    cfgs = [train.rope_config(c, "adarope")]
    opt = optim.make_optimizer(train.dict_config(c.opt, steps=4))
    kw = dict(steps=4, chunk=2, fingerprint=7, name="t")
    bf = train._pretrain_batches(c, [0], np.array([0]))
    g, p, r = train.build(c, cfgs, [0])
    full, loss_full = train._train(c, g, p, r, opt, bf, ckpt_dir=str(tmp_path / "a"), **kw)

    calls = []

    def dying(start, n):
        calls.append(start)
        if len(calls) == 2:
            raise _Killed
        return bf(start, n)

    g, p, r = train.build(c, cfgs, [0])
    with pytest.raises(_Killed):
        train._train(c, g, p, r, opt, dying, ckpt_dir=str(tmp_path / "b"), **kw)
    g, p, r = train.build(c, cfgs, [0])
    with pytest.raises(ValueError, match="different config"):
        train._train(c, g, p, r, opt, bf, ckpt_dir=str(tmp_path / "b"),
                     **dict(kw, fingerprint=8))
    g, p, r = train.build(c, cfgs, [0])
    calls.clear()
    resumed, loss_res = train._train(c, g, p, r, opt, dying, ckpt_dir=str(tmp_path / "b"),
                                     **kw)
    assert calls == [2]  # only the second chunk ran again
    testing.tree_allclose(full, resumed, atol=1e-6, rtol=1e-6)
    np.testing.assert_allclose(loss_full, loss_res, rtol=1e-6)


@pytest.mark.parametrize("field,value,match", [
    ("arms", ("rope", "alibi"), "config.arms"),
    ("tasks", ("t9",), "config.tasks"),
    ("steps", 7, "multiple of config.chunk"),
    ("base", 1.0, "config.base"),
    ("eval_lens", (128, 256), "must include config.train_len"),
])
def test_config_errors(field, value, match):
    c = configs.get_config("smoke")
    c[field] = value
    with pytest.raises(ValueError, match=match):
        train.validate_config(c)
    c = configs.get_config("smoke")
    c.extension.arms = ("yarn", "longrope")
    with pytest.raises(ValueError, match="config.extension.arms"):
        train.validate_config(c)
    with pytest.raises(ValueError, match="unknown config variant"):
        configs.get_config("huge")


def test_entry_rejects_bad_flags(tmp_path):
    out = testing.run_entry("adarope", "--config.arms=rope,alibi", f"--workdir={tmp_path}",
                            variant="smoke", timeout=120, check=False)
    assert out.returncode == 2
    assert "config.arms" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_smoke_claims(tmp_path):
    """rope vs adarope 250 steps: loss falls >= 30%, acc at L0 above chance, dphi > 0; the
    results file follows the schema and lists the smoke variant's claims."""
    c = configs.get_config("smoke")
    out = train.run(c, str(tmp_path))
    d = results.load_results(tmp_path)
    results.validate_results(d)
    names = [cl["name"] for cl in d["claims"]]
    assert names == ["task_learned_at_train_length", "pe_params_move", "ext_beats_yarn"]
    claims = {cl["name"]: cl for cl in out["claims"]}
    assert claims["task_learned_at_train_length"]["holds"], claims
    assert claims["pe_params_move"]["holds"], claims
    m = d["metrics"]
    assert min(np.mean(m["accuracy"][a][str(c.train_len)]) for a in ("rope", "adarope")) > 1 / 16
    for f in ("acc_vs_length.png", "learned_freqs.png", "head_roles.png", "extension.png"):
        assert os.path.getsize(tmp_path / f) > 1000
    # The weak extension claim is computed from the measured NLLs (reported either way).
    nll = m["extension_nll"]
    Te = str(c.extension.length)
    d_nll = np.mean(nll["adarope-ext"][Te]) - np.mean(nll["yarn"][Te])
    np.testing.assert_allclose(claims["ext_beats_yarn"]["measured"], d_nll, rtol=1e-6)
    json.dumps(d)


@pytest.mark.slow
def test_lm_stage_tiny(tmp_path):
    """T3 end to end at toy size: NLLs finite and above the HMM's entropy-rate floor minus
    noise, per-position buckets reported, and claims 12-14 computed from the measured NLLs."""
    from icml26_jax.adarope import report

    c = _tiny()
    c.tasks = ("t1", "t3")
    c.lm.update(arms=("rope", "nope", "adarope"), steps=4, eval_lens=(32, 128), eval_size=8,
                continue_steps=2)
    c.extension.update(steps=2, chunk=2, num_train=8)
    train.validate_config(c)
    out = train.lm_stage(c, [0], str(tmp_path / "ck"), 1)
    m, claims = report._lm_claims(c, out)
    names = [cl.name for cl in claims]
    assert names == ["lm_extrapolation_nll", "ext_lm_nll_beats_yarn",
                     "continued_pretrain_beats_yarn"]
    for arm in ("rope", "nope", "adarope"):
        v = np.asarray(m["nll"][arm]["128"])
        assert np.isfinite(v).all() and (v > 0.5 * m["entropy_rate"]).all()
    assert set(m["nll_by_position_bucket"]["rope"]) == {"0-32", "32-128"}
    d = np.mean(m["ext"]["adarope-ext"]["128"]) - np.mean(m["ext"]["yarn"]["128"])
    np.testing.assert_allclose(claims[1].measured, d, rtol=1e-6)
