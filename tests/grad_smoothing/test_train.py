"""The replica program: vmapped == one by one, base arm == optax AdamW, batches drawn in the
program == the batches of ``train.batches``, determinism, resume, config errors."""

import jax
import numpy as np
import optax
import pytest

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core import testing
from icml26_jax.core.optim import promotion_safe
from icml26_jax.grad_smoothing import configs, train
from icml26_jax.lm import hmm as hmm_lib
from icml26_jax.lm import train as lm_train
from tests.compile_passes import module_fixture


# Tiny models run for a few steps: compiled with few XLA passes (tests/compile_passes.py).
_few_passes = module_fixture()


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
        q, s = p, promotion_safe(tx).init(p)
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
    # A pure function of (seed, step): the chunking does not matter, steps differ.
    longer = train.batches(c, lang, [1], 1, 4)
    np.testing.assert_array_equal(longer["tokens"][2:, 0], a["tokens"][:, 2])
    assert not np.array_equal(longer["tokens"][0], longer["tokens"][1])
    np.testing.assert_array_equal(a["targets"][..., :-1], a["tokens"][..., 1:])
    assert a["tokens"].min() >= 0 and a["tokens"].max() < c.hmm.vocab_size


def test_program_draws_the_batches_it_would_be_given():
    """The training program, its replicas sharded over 3 devices, draws inside exactly the
    batches of ``train.batches`` (the preloaded program fed them gives the same numbers)."""
    c = _tiny()
    lang = train.language(c)
    seeds, arms = [0, 0, 1], ["base", "smoothed", "base"]
    g, p, r = train.build(c, seeds)
    mats = np.stack([train.arm_matrix(c, a) for a in arms]).astype(np.float32)
    lr = np.full(3, 2e-3, np.float32)
    chunk = train.batches(c, lang, seeds, 2, 2)
    init = jax.vmap(promotion_safe(train.make_tx(c, 1.0, np.eye(c.depth, dtype=np.float32),
                                                 c.steps)).init)
    copy = lambda t: jax.tree.map(np.array, t)  # noqa: E731  (the programs donate)
    want = train._program(c, g, c.steps, preloaded=True)(copy(p), r, init(p), lr, mats, chunk)
    mesh = mesh_lib.runs_mesh(3)
    shard = lambda t: mesh_lib.shard_replicas(t, mesh, 3)  # noqa: E731
    with jax.set_mesh(mesh):
        hmm = jax.tree.map(lambda x: mesh_lib.replicate(np.asarray(x), mesh),
                           hmm_lib.device_hmm(lang))
        got = train._program(c, g, c.steps)(
            shard(copy(p)), shard(r), shard(init(p)), shard(lr), shard(mats),
            shard(np.asarray(seeds, np.int32)), hmm,
            mesh_lib.replicate(train.step_indices(2, 2), mesh))
        got = mesh_lib.to_host(got, 3)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-6)  # losses [R, n]
    testing.tree_allclose(got[0], jax.tree.map(np.asarray, want[0]), atol=1e-7, rtol=1e-6)


class _Killed(Exception):
    pass


@pytest.mark.slow
def test_train_resumes(tmp_path, monkeypatch):
    c = _tiny()
    lang = train.language(c)
    kw = dict(ckpt_dir=str(tmp_path / "r"), name="r")
    full = train.train_replicas(c, lang, [0], [2e-3], ["smoothed"],
                                ckpt_dir=str(tmp_path / "f"), name="f")
    real = train.step_indices
    calls = []

    def dying(start, n):
        calls.append(start)
        if len(calls) == 2:
            raise _Killed
        return real(start, n)

    monkeypatch.setattr(train, "step_indices", dying)
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
    c.steps, c.log_every, c.timing_steps = 40, 20, 3  # 20 steps leave the loss > log 64
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


@pytest.mark.parametrize("field,value,match", [
    ("alphas", (0.0,), "full.alphas"), ("modes", ("wiggle",), "full.modes"),
    ("compare_depth", 16, "compare_depth"), ("muon_lrs", (), "muon_lrs")])
def test_full_config_errors(field, value, match):
    c = configs.get_config("full")
    c.full[field] = value
    with pytest.raises(ValueError, match=match):
        train.validate_config(c)
    c = configs.get_config("full")
    c.full.vit.folds = 1
    with pytest.raises(ValueError, match="full.vit.folds"):
        train.validate_config(c)
    c.full.vit.folds, c.full.vit.epochs = 5, 0
    with pytest.raises(ValueError, match="full.vit.epochs"):
        train.validate_config(c)


@pytest.mark.slow
def test_protocol_selects_alpha_and_mode(tmp_path):
    # Two lrs: stage 1 and the plain alpha sweep (2 alphas x 2 seeds) are both 4 replicas,
    # one compiled program.
    c = _tiny(lrs=(2e-3, 4e-3), eval_seeds=(0,), selection_seeds=(100, 101))
    lang = train.language(c)
    out = train.protocol(c, lang, str(tmp_path), alpha_modes=[(0.2, "plain"), (1.0, "plain"),
                                                              (0.2, "norm")])
    sweep = out["alpha_sweep"]
    assert set(sweep) == {"0.2/plain", "1/plain", "0.2/norm"}
    best = min(sweep, key=sweep.get)
    assert best == f"{out['config'].alpha:g}/{out['config'].mode}"
    assert out["s2"]["val_loss"].shape == (c.steps // c.log_every, 3)  # 3 arms x 1 seed
    assert c.alpha == 0.2 and c.mode == "plain"  # the caller's config is not modified


def _fake_protocol(c, finals):
    """A ``train.protocol`` output whose stage-2 final val losses are ``finals[arm]``."""
    S = len(c.eval_seeds)
    last = np.concatenate([np.asarray(finals[a], np.float32) for a in train.ARMS])
    val = np.stack([last + 0.5, last])  # two logged points
    return {"config": c, "s2": {"val_loss": val, "steps": np.array([1, 2])},
            "s1": {"val_loss": np.zeros((2, 2))}, "sel_arms": ["base", "smoothed"],
            "sel_lrs": [1e-3, 1e-3], "best": {"base": 1e-3, "smoothed": 1e-3},
            "alpha_sweep": None, "S": S}


def test_full_claims_from_measured_numbers():
    from icml26_jax.grad_smoothing import report

    c = configs.get_config("full")
    base = np.array([3.0, 3.1, 3.2, 3.3, 3.4])
    main = _fake_protocol(c, {"base": base, "smoothed": base - 0.02, "permuted": base})
    muon = _fake_protocol(c, {"base": base, "smoothed": base + [-.02, -.02, -.02, -.02, .01],
                              "permuted": base})
    shallow = _fake_protocol(c, {"base": base, "smoothed": base - 0.03, "permuted": base})
    acc_b = np.full(10, 0.90)
    acc_s = acc_b + np.r_[np.full(7, 0.01), np.full(3, -0.001)]
    v = {"test_acc": {"base": acc_b.tolist(), "smoothed": acc_s.tolist()},
         "train_loss": {"base": [0.1] * 10, "smoothed": [0.1] * 10}, "source": "digits",
         "pairs": [[s, f] for s in (0, 1) for f in range(5)], "selected_lr": {},
         "test_acc_curves": {}, "epochs_logged": [1]}
    m, claims = report.evaluate_full(c, main, muon, shallow, v)
    got = {cl.name: cl for cl in claims}
    assert set(got) == {"smoothing_lowers_val_loss_muon", "vit_generalisation_gain",
                        "gain_grows_with_depth"}
    # Muon: mean -0.014, better on 4 of 5 seeds -> holds.
    assert got["smoothing_lowers_val_loss_muon"].holds
    np.testing.assert_allclose(got["smoothing_lowers_val_loss_muon"].measured, -0.014,
                               atol=1e-6)
    # ViT: +0.67 points, favourable on 7 of 10 -> holds.
    np.testing.assert_allclose(got["vit_generalisation_gain"].measured, 0.67, atol=1e-4)
    assert got["vit_generalisation_gain"].holds
    # Depth: gain 0.02 at depth 16 < 0.03 at depth 8 -> fails.
    np.testing.assert_allclose(got["gain_grows_with_depth"].measured, -0.01, atol=1e-6)
    assert not got["gain_grows_with_depth"].holds
    assert m["depth_comparison"]["depths"] == [16, 16]  # the fake shallow config is the same
    # 6 of 10 favourable pairs fails the ViT claim although the mean is positive.
    v["test_acc"]["smoothed"] = (acc_b + np.r_[np.full(6, 0.02), np.full(4, -0.001)]).tolist()
    _, claims = report.evaluate_full(c, main, muon, shallow, v)
    assert not {cl.name: cl for cl in claims}["vit_generalisation_gain"].holds


@pytest.mark.slow
def test_full_run_tiny_writes_all_claims(tmp_path):
    """The ``full`` pipeline end to end at toy size: 8 claims and the full figures."""
    import os

    from icml26_jax.core import results

    c = configs.get_config("full")
    c.depth, c.model.d_model, c.model.num_heads = 5, 8, 2
    c.steps, c.log_every, c.seq_len, c.batch_size = 4, 2, 16, 4
    # Every LM stage has 6 replicas (2 arms x 3 lrs, 3 alphas x 2 selection seeds, 3 arms x
    # 2 eval seeds), so each (optimiser, depth) compiles one program, not one per stage.
    c.eval_seeds, c.lrs, c.val_size, c.probe_size = (0, 1), (1e-3, 2e-3, 4e-3), 8, 4
    c.timing_steps = 2
    c.hmm.update(num_states=16, vocab_size=12, num_successors=3, num_emissions=4)
    c.full.update(alphas=(0.1, 0.2, 0.4), modes=("plain",), muon_lrs=(0.01, 0.02, 0.04),
                  compare_depth=4)
    c.full.vit.update(dict(depth=4, d_model=8, num_heads=2, epochs=1, log_every_epochs=1,
                           folds=2, seeds=(0,), lrs=(3e-3,), batch_size=64))
    train.run(c, str(tmp_path))
    d = results.load_results(tmp_path)
    results.validate_results(d)
    assert [cl["name"] for cl in d["claims"]][5:] == [
        "smoothing_lowers_val_loss_muon", "vit_generalisation_gain", "gain_grows_with_depth"]
    v = d["metrics"]["vit"]
    np.testing.assert_allclose(d["claims"][6]["measured"],
                               100 * np.mean(np.subtract(v["test_acc"]["smoothed"],
                                                         v["test_acc"]["base"])), rtol=1e-5)
    for f in ("val_loss_muon.png", "vit_accuracy.png"):
        assert os.path.getsize(tmp_path / f) > 1000
