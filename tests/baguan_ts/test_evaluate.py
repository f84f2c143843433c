"""Baguan-TS evaluation: the claims computed from a hand-made metrics table, and the
statsmodels baselines fitted in a worker process equal the inline fits."""

import concurrent.futures
import multiprocessing

import jax
import ml_collections
import numpy as np
import pytest

from icml26_jax.baguan_ts import data_real, evaluate


def _table(values: dict, names, **extra) -> dict:
    """{method: {task: {"wql": v, "osi": ..., "coverage": ...}}}."""
    out = {}
    for meth, vals in values.items():
        out[meth] = {n: {"wql": float(v), "osi": extra.get("osi", {}).get(meth, 0.0),
                         "coverage": extra.get("coverage", 0.8)} for n, v in zip(names, vals)}
    return out


def test_claims_from_hand_made_metrics():
    names = ["c0", "c1", "s0", "s1"]
    fams = {"c0": "covariate", "c1": "synthetic_energy", "s0": "spike", "s1": "spike"}
    syn = _table({"baguan": [0.1, 0.2, 0.1, 0.1], "k0": [0.2, 0.4, 0.2, 0.2],
                  "seasonal_naive": [0.4, 0.8, 0.4, 0.4], "ets": [0.2, 0.1, 0.3, 0.3],
                  "2d": [0.2, 0.1, 0.2, 0.2], "recent": [0.2, 0.2, 0.2, 0.2],
                  "random": [0.3, 0.3, 0.3, 0.3], "co_off": [0.1, 0.2, 0.1, 0.1]},
                 names, osi={"baguan": 0.5, "co_off": 0.2}, coverage=0.75)
    rn = ["r0", "r1"]
    real = _table({"baguan": [0.5, 0.5], "seasonal_naive": [1.0, 0.25], "ets": [0.6, 0.6],
                   "sarimax_exog": [0.4, 0.4], "tabular_qr": [0.7, 0.7],
                   "retrieval_average": [0.8, 0.8], "2d": [0.9, 0.9]}, rn)
    m = {"synthetic": syn, "real": real, "families": fams}
    c = ml_collections.ConfigDict({"mini_prior": False})
    cl, extra = evaluate.claims(c, m, jax.random.key(0))
    by = {x.name: x for x in cl}
    assert by["icl_wql_ratio"].measured == pytest.approx(0.5)
    assert by["synth_wql_ratio_vs_snaive"].measured == pytest.approx(0.25)
    assert by["covariate_win_rate_vs_ets"].measured == pytest.approx(0.5)  # wins c0, loses c1
    assert by["win_rate_3d_vs_2d"].measured == pytest.approx(0.75)
    # 1 - mean(baguan) / min(mean(recent), mean(random)) = 1 - 0.125 / 0.2
    assert by["rbfcst_context_gain"].measured == pytest.approx(0.375)
    assert by["co_osi_gain"].measured == pytest.approx(0.3)
    assert by["co_wql_ratio"].measured == pytest.approx(1.0)
    assert by["interval_coverage_error"].measured == pytest.approx(0.05)
    # Skill vs seasonal naive: 1 - geomean(0.5, 2) = 0. Win rate: r0 beats 5 of the 6 others
    # (not SARIMAX), r1 beats 4 (not SARIMAX, not seasonal naive).
    assert by["real_skill_score"].measured == pytest.approx(0.0, abs=1e-12)
    assert not by["real_skill_score"].holds  # "> 0" is strict
    assert by["real_win_rate"].measured == pytest.approx((5 / 6 + 4 / 6) / 2)
    assert extra["real_field"][0] == "baguan"
    lo, hi = extra["real_skill_ci"]
    assert lo <= 0.0 <= hi


def test_host_baselines_in_a_worker_equal_inline():
    tasks = [data_real.load_task("nile")]
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        fut = evaluate.submit_host_baselines(pool, ["ets"], [tasks, tasks[:1]])
        (a, b), seconds = evaluate.collect_host_baseline(fut["ets"], [tasks, tasks[:1]])
    assert seconds > 0
    ref = evaluate.baseline_on("ets", tasks, 8, jax.random.key(0))
    for d in (a, b):
        np.testing.assert_array_equal(d["nile"][0], ref["nile"][0])
        np.testing.assert_array_equal(d["nile"][1], ref["nile"][1])
