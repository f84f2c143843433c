"""The replica program: vmapped == one by one, base arm == optax AdamW, determinism,
resume, config errors."""

import jax
import numpy as np
import optax
import pytest

from icml26_jax.grad_smoothing import configs, train
from icml26_jax.lm import train as lm_train


def _tiny(**kw):
    c = configs.get_config("smoke")
    c.model.d_model = 8
    c.model.num_heads = 2
    c.depth = 4
    c.seq_len = 16
    c.batch_size = 4
    c.steps = 4
    c.log_every = 2
    c.val_size = 8
    c.probe_size = 4
    c.hmm.update(num_states=16, vocab_size=12, num_successors=3, num_emissions=4)
    c.update(kw)
    return c


def test_replicas_vmapped_equal_one_by_one(tmp_path):
    c = _tiny()
    lang = train.language(c)
    seeds, arms, lrs = [0, 0, 1], ["base", "smoothed", "permuted"], [2e-3, 2e-3, 4e-3]
    all_ = train.train_replicas(c, lang, seeds, lrs, arms, ckpt_dir=str(tmp_path / "a"),
                                name="all")
    for i in range(3):
        one = train.train_replicas(c, lang, seeds[i:i + 1], lrs[i:i + 1], arms[i:i + 1],
                                   ckpt_dir=str(tmp_path / f"o{i}"), name="one")
        np.testing.assert_allclose(all_["train_loss"][:, i], one["train_loss"][:, 0],
                                   rtol=1e-5)
        np.testing.assert_allclose(all_["val_loss"][:, i], one["val_loss"][:, 0], rtol=1e-5)
    # Same seed, same data and init: arms differ only through the optimiser.
    np.testing.assert_allclose(all_["train_loss"][0, 0], all_["train_loss"][0, 1], rtol=1e-6)
    assert not np.allclose(all_["train_loss"][-1, 0], all_["train_loss"][-1, 1])
    assert all_["cka"].shape == (2, 3, 3) and np.all((all_["cka"] > 0) & (all_["cka"] <= 1))


def test_base_arm_is_optax_adamw():
    c = _tiny()
    lang = train.language(c)
    g, p, r = train.build(c, [0])
    p, r = jax.tree.map(lambda x: x[0], p), jax.tree.map(lambda x: x[0], r)
    o = c.opt
    ref = optax.chain(optax.clip_by_global_norm(o.clip), optax.adamw(
        train.schedule(c, 2e-3, c.steps), b1=o.b1, b2=o.b2, eps=o.eps,
        weight_decay=o.weight_decay, mask=lambda t: jax.tree_util.tree_map_with_path(
            lambda path, _: any(getattr(e, "key", None) in ("kernel", "embedding")
                                for e in path), t)))
    ours = train.make_tx(c, np.float32(2e-3), np.eye(c.depth, dtype=np.float32), c.steps)
    b = train.batches(c, lang, [0], 0, c.steps)
    out = []
    for tx in (ours, ref):
        step = jax.jit(lm_train.make_train_step(g, tx))
        q, s = p, lm_train.promotion_safe(tx).init(p)
        for t in range(c.steps):
            q, s, _ = step(q, r, s, {k: v[t, 0] for k, v in b.items()})
        out.append(q)
    for a, bb in zip(jax.tree.leaves(out[0]), jax.tree.leaves(out[1])):
        np.testing.assert_allclose(a, bb, atol=1e-7)


def test_batches_paired_and_deterministic():
    c = _tiny()
    lang = train.language(c)
    a = train.batches(c, lang, [0, 0, 1], 3, 2)
    b = train.batches(c, lang, [0], 3, 2)
    np.testing.assert_array_equal(a["tokens"][:, 0], a["tokens"][:, 1])
    np.testing.assert_array_equal(a["tokens"][:, 0], b["tokens"][:, 0])
    assert not np.array_equal(a["tokens"][:, 0], a["tokens"][:, 2])
    assert a["tokens"].shape == (2, 3, c.batch_size, c.seq_len)


class _Killed(Exception):
    pass


@pytest.mark.slow
def test_train_resumes(tmp_path, monkeypatch):
    c = _tiny()
    lang = train.language(c)
    kw = dict(ckpt_dir=str(tmp_path / "r"), name="r")
    full = train.train_replicas(c, lang, [0], [2e-3], ["smoothed"],
                                ckpt_dir=str(tmp_path / "f"), name="f")
    real = train.batches
    calls = []

    def dying(c_, lang_, seeds, start, n):
        calls.append(start)
        if len(calls) == 2:
            raise _Killed
        return real(c_, lang_, seeds, start, n)

    monkeypatch.setattr(train, "batches", dying)
    with pytest.raises(_Killed):
        train.train_replicas(c, lang, [0], [2e-3], ["smoothed"], **kw)
    calls.clear()
    res = train.train_replicas(c, lang, [0], [2e-3], ["smoothed"], **kw)
    assert calls == [2]
    np.testing.assert_allclose(res["val_loss"], full["val_loss"], rtol=1e-6)
    with pytest.raises(ValueError, match="different config"):
        train.train_replicas(c, lang, [0], [4e-3], ["smoothed"], **kw)


@pytest.mark.parametrize("field,value,match", [
    ("base", "lion", "config.base"), ("mode", "wiggle", "config.mode"),
    ("alpha", 1.5, "config.alpha"), ("depth", 3, "config.depth"),
    ("steps", 7, "multiple of"), ("lrs", (), "config.lrs")])
def test_config_errors(field, value, match):
    c = configs.get_config("smoke")
    c[field] = value
    with pytest.raises(ValueError, match=match):
        train.validate_config(c)


@pytest.mark.slow
def test_smoke_run_writes_claims(tmp_path):
    """The smoke variant end to end: results.json follows the schema, lists the default
    claims with measured values computed from the logged losses, and writes the figures."""
    import os

    from icml26_jax.core import results

    c = configs.get_config("smoke")
    c.steps, c.log_every, c.timing_steps = 40, 20, 3
    out = train.run(c, str(tmp_path))
    d = results.load_results(tmp_path)
    results.validate_results(d)
    names = [cl["name"] for cl in d["claims"]]
    assert names == ["smoothing_lowers_val_loss", "smoothing_reaches_target_sooner",
                     "depth_neighbours_matter", "smoothing_structures_depth",
                     "smoothing_overhead_small"]
    m = d["metrics"]
    delta = np.mean(np.asarray(m["final_val_loss"]["smoothed"])
                    - np.asarray(m["final_val_loss"]["base"]))
    np.testing.assert_allclose(out["claims"][0]["measured"], delta, rtol=1e-5)
    assert all(np.isfinite(m["final_val_loss"][a]).all() for a in train.ARMS)
    # Training lowers the loss from the uniform-token start (log 64 = 4.16).
    assert max(max(m["final_val_loss"][a]) for a in train.ARMS) < np.log(64)
    for f in ("val_loss.png", "depth_cka.png", "update_norms.png", "lr_sweep.png"):
        assert os.path.getsize(tmp_path / f) > 1000
