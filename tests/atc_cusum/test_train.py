"""The experiment: smoke run end to end (claims, results.json, figures, resume), the runs
map sharded == unsharded, determinism, config errors, the entry script's flag errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.atc_cusum import atc, baselines, configs, envs, train
from icml26_jax.core import results, testing

SMOKE_CLAIMS_HOLD = {"classical_detectors_linear_regret", "selective_detects_large_shifts",
                     "nile_break_located", "nile_atc_beats_best_baseline",
                     "realint_breaks_located"}
ALL_CLAIMS = {
    "atc_log_regret", "atc_regret_growth_logarithmic", "atc_within_constant_of_lower_bound",
    "atc_anytime_prefix_bound", "classical_detectors_linear_regret", "page_cusum_worse_than_atc",
    "atc_beats_tuned_baselines", "selective_ignores_tiny_shifts", "selective_detects_large_shifts",
    "selective_excess_regret_bounded", "atc_no_collapse_staircase",
    "atc_beats_discount_square_wave", "nile_break_located", "nile_atc_beats_best_baseline",
    "realint_breaks_located", "realint_mse_within_10pct_of_best_baseline"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("atc_smoke")
    with jax.enable_x64(True):
        out = train.run(configs.get_config("smoke"), str(workdir))
    return workdir, out


@pytest.mark.slow
def test_smoke_claims(smoke):
    _, out = smoke
    claims = {c["name"]: c for c in out["claims"]}
    assert set(claims) == ALL_CLAIMS
    for name in SMOKE_CLAIMS_HOLD:
        assert claims[name]["holds"], claims[name]
    sq = claims["atc_beats_discount_square_wave"]
    # The documented limitation: computed, failing, marked as expected to fail.
    assert not sq["holds"] and not sq["expected"] and sq["measured"] >= 1.2


@pytest.mark.slow
def test_smoke_results_and_figures(smoke):
    workdir, out = smoke
    d = results.load_results(workdir)
    results.validate_results(d)
    assert d["paper"] == "atc_cusum" and d["variant"] == "smoke"
    m = d["metrics"]
    assert set(m["synthetic"]) == {"S0_T500", "S0_T2000", "S4_T500", "S4_T2000"}
    cell = m["synthetic"]["S4_T2000"]
    assert cell["window_value"] in configs.WINDOWS and cell["discount_value"] in configs.GAMMAS
    assert cell["atc"]["ci"] > 0
    assert "peers_atc" in cell  # the peers ran (T = peers_T)
    assert m["real"]["nile"]["alarms"] == 1
    assert m["real"]["realint_full"]["alarms"] >= 3  # the full-sample result is reported
    for png in ("regret_vs_logT.png", "selective.png", "staircase.png", "square.png",
                "nile.png", "realint.png"):
        assert (workdir / png).stat().st_size > 1000, png


@pytest.mark.slow
def test_resume_restores_finished_suites(smoke, monkeypatch):
    workdir, out = smoke
    calls = []
    monkeypatch.setattr(train, "SUITE_FNS", {k: (lambda c, k=k: calls.append(k))
                                             for k in train.SUITE_FNS})
    with jax.enable_x64(True):
        again = train.run(configs.get_config("smoke"), str(workdir))
    assert calls == []  # nothing recomputed
    assert again["claims"] == out["claims"]
    c = configs.get_config("smoke")
    c.c = 3.5
    with pytest.raises(ValueError, match="another config"):
        with jax.enable_x64(True):
            train.run(c, str(workdir))


def test_sharded_equals_unsharded():
    # 13 runs on 8 devices: map_runs pads the runs axis to 16 and to_host drops the padding.
    rng = np.random.default_rng(0)
    mu = envs.random_jumps(rng, 13, 800, 4)
    x = envs.observe(rng, mu)
    p = atc.ATCParams(1.0)
    got = train.scores(("atc", p), x, mu, [400, 800])
    pred = jax.vmap(lambda v: atc.atc_predict(p, v).pred)(jnp.asarray(x))
    err = np.cumsum((np.asarray(pred) - mu) ** 2, axis=1)
    assert got["regret"].shape == (13,) and got["prefix"].shape == (13, 2)
    np.testing.assert_allclose(got["regret"], err[:, -1], rtol=1e-12)
    np.testing.assert_allclose(got["prefix"], err[:, [399, 799]], rtol=1e-12)
    g = train.grid_regret("discount", (0.9, 0.99), x, mu)
    want = [((np.asarray(baselines.discounted_mean(jnp.asarray(x[r]), gm)) - mu[r]) ** 2).sum()
            for gm in (0.9, 0.99) for r in range(13)]
    np.testing.assert_allclose(g, np.reshape(want, (2, 13)), rtol=1e-12)


def _tiny():
    c = configs.get_config("smoke")
    c.suites = ("selective",)
    c.selective.update(T=600, runs=8, deltas=(0.0, 1.0))
    return c


def test_same_seed_same_numbers_other_seed_differs():
    c = _tiny()
    a = train.suite_selective(c)
    b = train.suite_selective(c)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    c.seed = 1
    other = train.suite_selective(c)
    assert not np.array_equal(a["atc"], other["atc"])


@pytest.mark.parametrize("field,value,match", [
    ("c", 0.0, "config.c must"), ("sigma", -1.0, "config.sigma"),
    ("restart", "never", "config.restart"), ("scan", "dense", "config.scan"),
    ("suites", ("synthetic", "nab"), "config.suites"), ("suites", ("csv",), "csv_glob"),
    ("synthetic.S", (0, 5000), "S < min"), ("selective.deltas", (0.1, 0.2), "include 0.0"),
    ("square.cs", (0.0,), "config.square.cs"), ("synthetic.gammas", (1.0,), "gammas"),
    ("real.windows", (0,), "config.real.windows")])
def test_config_errors(field, value, match):
    c = configs.get_config("smoke")
    if "." in field:
        group, name = field.split(".")
        c[group][name] = value
    else:
        c[field] = value
    with pytest.raises(ValueError, match=match):
        train.validate_config(c)
    with pytest.raises(ValueError, match="variant"):
        configs.get_config("huge")


def test_run_requires_x64(tmp_path):
    if jax.config.jax_enable_x64:
        with jax.enable_x64(False):
            with pytest.raises(ValueError, match="jax_enable_x64"):
                train.run(_tiny(), str(tmp_path))


def test_entry_rejects_bad_flags(tmp_path):
    r = testing.run_entry("atc_cusum", "--config.scan=dense", f"--workdir={tmp_path}",
                          timeout=120, check=False)
    assert r.returncode != 0 and "config.scan must be one of" in r.stderr
