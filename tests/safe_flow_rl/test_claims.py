"""The smoke run (spec §Claims, the claims marked S): ``train.run`` at smoke size writes a
valid results.json whose S claims hold, with every method evaluated and the four figures."""

import os

import numpy as np
import pytest

from icml26_jax.core import results
from icml26_jax.safe_flow_rl import configs, report, train

S_CLAIMS = ("dataset_violation_fraction", "kl_invariance_zscore", "w2_bound_ratio")


pytestmark = pytest.mark.slow  # one full smoke run (~55 s); CI runs it


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    wd = str(tmp_path_factory.mktemp("safe_flow_rl_smoke"))
    return train.run(configs.get_config("smoke"), wd), wd


def test_smoke_claims_hold(smoke_run):
    out, wd = smoke_run
    claims = {c["name"]: c for c in out["claims"]}
    assert set(claims) == set(S_CLAIMS)
    for name in S_CLAIMS:
        assert claims[name]["holds"], claims[name]
    saved = results.load_results(wd)
    assert saved["variant"] == "smoke" and [c["name"] for c in saved["claims"]] == \
        [c["name"] for c in out["claims"]]


def test_smoke_run_evaluates_every_method_and_writes_the_figures(smoke_run):
    out, wd = smoke_run
    m = out["metrics"]
    c = configs.get_config("smoke")
    want = {report.eps_name(e) for e in c.eps_sweep} | {
        "ours_deterministic", "unweighted_prior_refiner", "prior_only", "prior_only_unweighted",
        "bc_all", "bc_safe", "bc_lag", "fisor_lite"}
    assert set(m["methods"]) == want
    for name, x in m["methods"].items():
        assert 0 <= x["violation_rate"] <= 1 and x["c_norm"] >= 0, name
        assert np.isfinite(x["ood_nll"]) and x["nn_action_distance"] >= 0, name
        assert len(x["per_seed"]) == c.num_seeds
    # the refiner's budget bounds its measured shift: the W2 coupling never exceeds L^_f eps
    b = m["bounds"]
    assert np.all(np.asarray(b["w2_coupling"]) <= np.asarray(b["w2_bound"]) + 1e-6)
    for f in ("feasible_region", "eps_sweep", "trajectories", "bound_tightness"):
        assert os.path.getsize(os.path.join(wd, f + ".png")) > 0
    assert set(m["stage_s"]) >= {"data", "critics", "flows", "refiners", "baselines",
                                 "evaluation", "bounds", "total_s"}
