"""The smoke-scale claims (spec §Claims, the claims marked S) and the slow ICL test (spec
§Tests): one smoke run of ``train.run`` on the mini prior (d 32, 2 layers, 300 steps),
evaluated on held-out mini-prior tasks and ``nile``."""

import pytest

from icml26_jax.baguan_ts import configs, train


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    c = configs.get_config("smoke")
    return train.run(c, str(tmp_path_factory.mktemp("baguan_smoke")))


@pytest.mark.slow
def test_smoke_claims_marked_s_hold(smoke):
    by = {c["name"]: c for c in smoke["claims"]}
    assert len(by) == 10  # every claim is computed, failing ones included
    # S: icl_wql_ratio <= 0.90, rbfcst_context_gain >= 0.0 at smoke scale.
    assert by["icl_wql_ratio"]["threshold"] == "<= 0.9"
    assert by["icl_wql_ratio"]["holds"], by["icl_wql_ratio"]
    assert by["rbfcst_context_gain"]["threshold"] == ">= 0"
    assert by["rbfcst_context_gain"]["holds"], by["rbfcst_context_gain"]


@pytest.mark.slow
def test_mini_prior_300_steps_learn_in_context(smoke):
    # Spec §Tests (slow): 300 steps on the mini prior give icl_wql_ratio <= 0.8.
    assert smoke["config"]["train"]["trunk_steps"] == 300
    ratio = {c["name"]: c for c in smoke["claims"]}["icl_wql_ratio"]["measured"]
    assert ratio <= 0.8, ratio
