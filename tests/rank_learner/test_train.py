"""Stage-2 training (stacked == per seed, determinism, the population minimiser), config
errors, the smoke run's claims and the optional econml / causalml anchors."""

import os

import jax
import numpy as np
import pytest

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core import results, testing
from icml26_jax.rank_learner import configs, data, fitting, metrics, nuisance, ranking, train

FAST = ranking.RankerConfig(fit=fitting.FitConfig(lr=2e-3, epochs=3, patience=2))


def _stage2(n=120, v=40, R=2, seed=0):
    rng = np.random.default_rng(seed)
    d = data.synthetic(rng, n=n + v)
    x = np.broadcast_to(d.x, (R, *d.x.shape))
    noisy = d.tau + rng.normal(size=(R, n + v)).astype(np.float32)  # a noisy "phi"
    tau_hat = np.broadcast_to(d.tau * 0.8, (R, n + v))
    return d, x[:, :n], tau_hat[:, :n], noisy[:, :n], x[:, n:], noisy[:, n:]


def _ranking_params(p, r):
    """Replica ``r``'s params without the output bias: a pairwise loss only sees
    g(x_i) - g(x_j), so that bias has a zero gradient up to rounding, which Adam normalises
    into a random walk of size ~lr per step (as in the official PyTorch code); it never
    changes a ranking, and its rounding noise differs between programs."""
    flat = jax.tree_util.tree_flatten_with_path(p)[0]
    return {jax.tree_util.keystr(k): np.asarray(v)[r] for k, v in flat
            if not ("out" in jax.tree_util.keystr(k) and "bias" in jax.tree_util.keystr(k))}


def test_train_rankers_stacked_equals_per_seed_and_is_deterministic():
    d, x, th, ph, xv, pv = _stage2()
    orth = np.array([False, True])
    _, p, h = mesh_lib.to_host(ranking.train_rankers([3, 4], x, th, ph, xv, pv, orth, FAST))
    for r in range(2):
        sl = slice(r, r + 1)
        _, p1, h1 = mesh_lib.to_host(ranking.train_rankers(
            [3 + r], x[sl], th[sl], ph[sl], xv[sl], pv[sl], orth[sl], FAST))
        testing.tree_allclose(_ranking_params(p, r), _ranking_params(p1, 0), rtol=1e-5,
                              atol=1e-6)
        np.testing.assert_allclose(np.asarray(h.val)[r], np.asarray(h1.val)[0], rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(h.epochs)[r], np.asarray(h1.epochs)[0])
    # Same program, same seed: bit-identical (output bias included).
    _, p2, _ = mesh_lib.to_host(ranking.train_rankers([3, 4], x, th, ph, xv, pv, orth, FAST))
    testing.tree_allclose(p, p2, rtol=0, atol=0)
    # The clipped-label statistic is only non-zero for the orthogonal replica.
    stat = np.asarray(h.stat)
    assert np.nanmax(stat[0]) > 0 and np.isfinite(stat[1, 0])


def test_population_minimiser_recovers_the_ranking():
    # Oracle labels sigmoid((tau_i - tau_j)/kappa): the minimiser is g = tau/kappa + c.
    rng = np.random.default_rng(1)
    d = data.synthetic(rng, n=900)
    x, tau = d.x[None], d.tau[None]
    cfg = ranking.RankerConfig(fit=fitting.FitConfig(lr=2e-3, epochs=10, patience=10))
    g, p, _ = ranking.train_rankers([0], x[:, :400], tau[:, :400], tau[:, :400],
                                    x[:, 400:500], tau[:, 400:500], [False], cfg)
    score = nuisance.predict_stack(g, p, x[:, 500:])[0]
    rho = float(metrics.spearman(jax.numpy.asarray(score), jax.numpy.asarray(d.tau[500:])))
    assert rho > 0.99, rho


def test_ranker_config_errors():
    with pytest.raises(ValueError, match="pair_frac"):
        ranking.RankerConfig(pair_frac=0.0).validate()
    d, x, th, ph, xv, pv = _stage2(n=1, R=1)
    with pytest.raises(ValueError, match="n >= 2"):
        ranking.train_rankers([0], x, th, ph, xv, pv, [True], FAST)


@pytest.mark.parametrize("field,value,match", [
    ("kappa", 0.0, "kappa"), ("kappa", -1.0, "kappa"), ("prop_clip", 0.5, "clip"),
    ("prop_clip", 0.0, "clip"), ("dgp", "cps", "dgp"), ("nuisance", "oracle", "nuisance"),
    ("perturb", ("pi",), "perturb"), ("semisynthetic", ("mimic",), "semisynthetic"),
    ("n_stage2", 1, "n < 2"), ("n_stage2", 4, "no validation"), ("crossfit", 0, "crossfit"), ("lr", 0.0, "lr"),
    ("num_seeds", 0, "num_seeds")])
def test_validate_config_errors(field, value, match):
    c = configs.get_config("smoke")
    c[field] = value
    with pytest.raises(ValueError, match=match):
        train.validate_config(c)


def test_unknown_variant():
    with pytest.raises(ValueError, match="allowed: default, smoke"):
        configs.get_config("large")


def test_claims_from_synthetic_outcomes():
    S = 4
    ones = np.ones(S)
    ev = lambda a, pv=0.5: {"autoc": a * ones, "pv": pv * ones}  # noqa: E731
    out = {"e1": {"synthetic": {"methods": {"oracle": ev(1.0), "rank": ev(0.98, 0.6),
                                            "plugin": ev(0.9), "dr": ev(0.97),
                                            "t": ev(0.8)}}},
           "e2": {"oracle": {"autoc": ones},
                  "mu": {"deltas": np.array([0.0, 0.5, 1.0]),
                         "rank": {"autoc": np.stack([0.99 * ones, 0.97 * ones, 0.95 * ones])},
                         "plugin": {"autoc": np.stack([ones, 0.9 * ones, 0.8 * ones])}}}}
    v = train.claim_values(out)
    assert v["autoc_gain_vs_plugin"] == pytest.approx(0.08)
    assert v["autoc_oracle_ratio"] == pytest.approx(0.98)
    assert v["policy_value_margin"] == pytest.approx(0.1)
    assert v["orth_delta1_gain"] == pytest.approx(0.15)
    assert v["degradation_ratio"] == pytest.approx(max(0.03 / 0.1, 0.05 / 0.2))
    assert np.isnan(v["both_delta1_win_frac_vs_dr"]) and np.isnan(v["semisynth_gain_vs_plugin"])
    names = [c.name for c in train.claims(out, "smoke")]
    assert names == list(train.SMOKE_CLAIMS)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("rank_learner_smoke")
    return train.run(configs.get_config("smoke"), str(workdir)), workdir


@pytest.mark.slow
def test_smoke_claims_hold_and_outputs(smoke_run):
    res, workdir = smoke_run
    saved = results.load_results(workdir)
    assert saved["paper"] == "rank_learner" and saved["variant"] == "smoke"
    held = {c["name"]: c["holds"] for c in saved["claims"]}
    assert set(held) == set(train.SMOKE_CLAIMS)
    assert all(held.values()), saved["claims"]
    e1 = saved["metrics"]["e1_synthetic"]
    # Guard against a vacuous comparison: the two label types differ.
    assert e1["train"]["mean_abs_label_gap"] > 0.05
    assert e1["oracle"]["ratio"] == pytest.approx(1.0)
    for name in ("toc_curves.png", "e2_degradation.png", "paired_diffs.png"):
        assert os.path.getsize(workdir / name) > 0


@pytest.mark.slow
def test_smoke_resume_restores_stages(smoke_run):
    res, workdir = smoke_run
    again = train.run(configs.get_config("smoke"), str(workdir))
    # Restored stages, not recomputed ones: identical numbers (NaN for the claims smoke skips).
    np.testing.assert_equal(again["metrics"]["claim_values"], res["metrics"]["claim_values"])
    c = configs.get_config("smoke")
    c.kappa = 0.5
    with pytest.raises(ValueError, match="another config"):
        train.run(c, str(workdir))


def test_econml_anchor_runs():
    pytest.importorskip("econml")
    from icml26_jax.rank_learner import baselines

    d = data.synthetic(np.random.default_rng(0), n=800)
    est = baselines.econml_dr(d.x[:600], d.t[:600], d.y[:600], d.x[600:])
    assert est.shape == (200,) and np.corrcoef(est, d.tau[600:])[0, 1] > 0.5


def test_causalml_anchor_runs():
    pytest.importorskip("causalml")
    from icml26_jax.rank_learner import baselines

    d = data.synthetic(np.random.default_rng(0), n=800)
    est = baselines.causalml_dr(d.x[:600], d.t[:600], d.y[:600], d.x[600:])
    assert est.shape == (200,) and np.corrcoef(est, d.tau[600:])[0, 1] > 0.5
