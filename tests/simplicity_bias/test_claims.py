"""The paper's claims at smoke scale (spec §Claims, those marked "Smoke"): the smoke variant
runs end to end and every claim it evaluates holds, with the smoke thresholds."""

import os

import pytest

from icml26_jax.core import results
from icml26_jax.simplicity_bias import configs, train

pytestmark = pytest.mark.slow  # one smoke run (~30 s); still run by CI


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("simplicity_bias_smoke")
    train.run(configs.get_config("smoke"), str(workdir))
    return workdir, results.load_results(workdir)


def test_smoke_evaluates_exactly_the_smoke_claims(smoke):
    _, r = smoke
    assert {c["name"] for c in r["claims"]} == set(train.SMOKE_CLAIMS)


@pytest.mark.parametrize("name", train.SMOKE_CLAIMS)
def test_smoke_claim_holds(smoke, name):
    _, r = smoke
    claim = next(c for c in r["claims"] if c["name"] == name)
    assert claim["holds"], claim


def test_smoke_writes_figures_and_metrics(smoke):
    workdir, r = smoke
    for f in ("overlap_vs_n_over_d.png", "exponents.png", "digits_clone_gap.png"):
        assert os.path.getsize(workdir / f) > 1000
    m = r["metrics"]
    # n*_u/d grows at most like log d (linear sample complexity), never like d^2.
    ratios = m["pairwise"]["n_star_u_over_d"]
    assert max(ratios) / min(ratios) < 4
    # The optional Tsodyks latent (third cumulant) has information exponent 3.
    assert abs(m["exponent"]["tsodyks"] - 3) < 0.1
