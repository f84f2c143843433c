"""The smoke run's claims (spec §Claims, marked S): they must hold for any seed."""

import json
import os

import pytest

from icml26_jax.mragent import configs, train

SMOKE_CLAIMS = {"bridge_hard_gain_vs_dense_bm25", "single_hop_em", "contents_ratio_vs_expansion",
                "ablation_single_step_drop"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    wd = str(tmp_path_factory.mktemp("mragent_smoke"))
    return wd, train.run(configs.get_config("smoke"), wd)


def test_smoke_claims_hold(smoke):
    _, out = smoke
    claims = {c["name"]: c for c in out["claims"]}
    assert set(claims) == SMOKE_CLAIMS
    for c in claims.values():
        assert c["holds"], c
    assert out["metrics"]["n"]["bridge_hard"] >= 20


def test_smoke_outputs_and_resume(smoke):
    wd, out = smoke
    for f in ("results.json", "predictions.json", "em_vs_contents.png", "per_category.png",
              "rounds_hist.png"):
        assert os.path.exists(os.path.join(wd, f)), f
    with open(os.path.join(wd, "results.json")) as f:
        saved = json.load(f)
    assert saved["claims"] == out["claims"]
    again = train.run(configs.get_config("smoke"), wd)  # every stage restored from checkpoints
    assert again["metrics"]["methods"] == out["metrics"]["methods"]
