"""The experiment pipeline: claims at smoke scale, resume after a kill, config validation."""

import json

import numpy as np
import pytest

from icml26_jax.core import results
from icml26_jax.dsgd_hp import configs, problems, report, train
from tests.dsgd_hp.helpers import tiny_config


def test_smoke_claims_speedup_and_exp_matches_centralized():
    c = configs.get_config("smoke")
    done = {"speedup": train.sweep_speedup(c), "transient": train.sweep_transient(c)}
    _, claims = report.evaluate(c, done)
    by_name = {cl.name: cl for cl in claims}
    assert by_name["speedup_slope_q90"].holds, by_name["speedup_slope_q90"]
    assert by_name["exp_matches_centralized"].holds, by_name["exp_matches_centralized"]


def test_run_writes_results_and_figures(tmp_path, capsys):
    c = tiny_config(("speedup", "tails", "nonconvex", "rate_hetero"))
    out = train.run(c, str(tmp_path))
    d = results.load_results(tmp_path)
    results.validate_results(d)
    assert d["paper"] == "dsgd_hp" and d["variant"] == "smoke"
    names = [cl["name"] for cl in d["claims"]]
    assert names == ["speedup_slope_q90", "speedup_slope_worst_user_q90", "rate_slope_q90",
                     "light_tail_r2", "light_tail_quantile_ratio",
                     "heavy_tail_control_separates", "nonconvex_speedup_slope"]
    # Every claim is a function of the stored metrics.
    sp = d["metrics"]["speedup"]
    assert d["claims"][0]["measured"] == pytest.approx(sp["slope_q90"]["slope"])
    lo, hi = sp["slope_q90"]["ci95"]
    assert lo <= sp["slope_q90"]["slope"] <= hi
    assert sp["n"] == [1, 2, 4, 8, 16] and len(sp["gap_q90"]) == 5
    rh = d["metrics"]["rate_hetero"]  # the full variant's extra sweep: reported, no claim
    assert rh["t"] == [50, 100, 200] and set(rh) == {"t", "exp", "complete", "centralized"}
    for png in ("speedup.png", "rate.png", "tails.png", "nonconvex.png"):
        assert (tmp_path / png).stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "(2) speed-up" in printed and "(3) claims" in printed
    assert out["metrics"]["speedup"]["gap_q90"] == d["metrics"]["speedup"]["gap_q90"]


def test_killed_run_resumes_with_same_metrics(tmp_path, monkeypatch):
    c = tiny_config(("speedup", "tails"))
    fresh = train.run(c, str(tmp_path / "fresh"))

    def killed(_):
        raise KeyboardInterrupt("killed during the tails sweep")

    monkeypatch.setitem(train.SWEEP_FNS, "tails", killed)
    with pytest.raises(KeyboardInterrupt):
        train.run(c, str(tmp_path / "resumed"))
    assert not (tmp_path / "resumed" / "results.json").exists()
    monkeypatch.undo()

    def must_not_rerun(_):
        raise AssertionError("the finished speedup sweep was recomputed")

    monkeypatch.setitem(train.SWEEP_FNS, "speedup", must_not_rerun)
    resumed = train.run(c, str(tmp_path / "resumed"))
    assert json.dumps(resumed["metrics"]["speedup"]) == json.dumps(fresh["metrics"]["speedup"])
    assert resumed["metrics"]["tails"] == fresh["metrics"]["tails"]
    assert resumed["claims"] == fresh["claims"]


def test_resume_refuses_a_different_config(tmp_path):
    c = tiny_config(("tails",))
    train.run(c, str(tmp_path))
    c.tails.T = 100
    with pytest.raises(ValueError, match="different config"):
        train.run(c, str(tmp_path))


def test_seed_changes_the_noise():
    c = tiny_config()
    a = train.sweep_tails(c)
    c.seed = 1
    b = train.sweep_tails(c)
    assert not np.allclose(a["gap_final"], b["gap_final"])


@pytest.mark.parametrize("field,value,match", [
    ("users", 48, "--users must be a power of two >= 32"),
    ("users", 8, "--users must be a power of two >= 32"),
    ("sigma", -1.0, "config.sigma must be > 0"),
    ("order", "gossip", "config.order='gossip'; allowed: atc, cta"),
    ("sweeps", ("speedup", "wavelets"), "unknown sweep"),
    ("speedup.T", 0, "config.speedup.T must be a positive integer"),
    ("network.graphs", ("ring", "star"), "unknown graph 'star' in config.network"),
    ("transient.log_every", 300, "config.transient.T=8000 must be a multiple"),
    ("problem", "npz", "--data_path"),
])
def test_config_validation(field, value, match):
    c = configs.get_config("default")
    *path, last = field.split(".")
    node = c
    for p in path:
        node = node[p]
    node[last] = value
    with pytest.raises(ValueError, match=match):
        train.validate_config(c)


def test_unknown_variant():
    with pytest.raises(ValueError, match="unknown config variant 'huge'; allowed: default"):
        configs.get_config("huge")


def test_npz_path_runs_the_logistic_code(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 5))
    y = X[:, 0] + 0.5 * rng.standard_normal(400) > 0
    np.savez(tmp_path / "data.npz", X=X, y=y)
    c = tiny_config(("logreg",))
    c.problem, c.data_path = "npz", str(tmp_path / "data.npz")
    out = train.sweep_logreg(c)
    assert out["gap_mean"].shape == (2, 2, 8) and np.isfinite(out["gap_mean"]).all()
    assert (out["gap_mean"] >= -1e-6).all()  # a gap to the Newton optimum of that data


def test_tfds_records_give_the_same_problem(tmp_path):
    # The digits_users TFDS builder is the real data path: read back through
    # tfds.data_source, each user's samples must be exactly the in-memory partition's.
    c = tiny_config(("logreg",))
    c.tfds_data_dir = str(tmp_path / "tfds")
    for split in ("iid", "label_skew"):
        a = train._logistic(c, 4, split, "l2")
        b = problems.digits(4, split, "l2")
        np.testing.assert_allclose(a.A[a.shards], b.A[b.shards], atol=1e-7)
        np.testing.assert_array_equal(a.y[a.shards], b.y[b.shards])
        np.testing.assert_allclose(a.f_star, b.f_star, rtol=1e-6)


def test_claims_from_synthetic_sweeps():
    # Gaps that scale exactly like 1/n (and 1/t) must give slopes -1 and claims that hold;
    # gaps flat in n must fail the speed-up claims. The q0.99 claim exists only in `full`.
    rng = np.random.default_rng(0)
    ns, ts = np.array([1, 2, 4, 8, 16]), np.array([250, 500, 750, 1000])
    base = rng.exponential(size=(1, 1, 4096))
    good = base / ns[:, None, None] / ts[None, :, None]
    done = {"speedup": {"ns": ns, "ts": ts, "gap_mean": good, "gap_worst": good,
                        "central": good}}
    c = configs.get_config("full")
    c.n_boot = 50
    c.speedup.T = 1000
    _, claims = report.evaluate(c, done)
    by = {cl.name: cl for cl in claims}
    assert set(by) == {"speedup_slope_q99", "speedup_slope_q90",
                       "speedup_slope_worst_user_q90", "rate_slope_q90"}
    assert all(cl.holds for cl in claims)
    assert by["speedup_slope_q90"].measured == pytest.approx(-1.0, abs=1e-9)
    flat = {"speedup": dict(done["speedup"], gap_mean=base.repeat(5, 0).repeat(4, 1))}
    _, claims = report.evaluate(configs.get_config("default"), flat)
    assert not {cl.name: cl for cl in claims}["speedup_slope_q90"].holds
    assert "speedup_slope_q99" not in {cl.name for cl in claims}
