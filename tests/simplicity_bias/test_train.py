"""The experiment's plumbing: config errors and normalisation, the metric helpers on
synthetic curves, resume from checkpoints, and claims computed from metrics."""

import math
import os

import numpy as np
import pytest

from icml26_jax.core import results
from icml26_jax.simplicity_bias import configs, train


def _cfg(**kw):
    c = configs.get_config("smoke")
    for k, v in kw.items():
        node, *rest = k.split(".")
        if rest:
            c[node][rest[0]] = v
        else:
            c[k] = v
    return c


@pytest.mark.parametrize("change, word", [
    (dict(parts=("pairwise", "bogus")), "parts"),
    (dict(parts=()), "parts"),
    (dict(replicas=0), "replicas"),
    (dict(eta=0.0), "eta"),
    (dict(a=1.0), "a must"),
    (dict(beta_u=-1.0), "beta_u"),
    (dict(thr=1.0), "thr"),
    (dict(**{"pairwise.dims": (32,)}), "pairwise.dims"),
    (dict(**{"correlated.latents": ("independent", "cubic")}), "correlated.latents"),
    (dict(**{"exponent.m_max": 0.5}), "exponent"),
    (dict(**{"images.epochs": 0}), "epochs"),
])
def test_validate_config_names_the_field(change, word):
    with pytest.raises(ValueError, match=word):
        train.validate_config(_cfg(**change))


def test_unknown_variant_is_rejected():
    with pytest.raises(ValueError, match="variant"):
        configs.get_config("large")


def test_normalise_config_parses_comma_strings():
    c = configs.get_config("default")
    # config_flags hands --config.parts=pairwise,exponent over as a 1-tuple of one string.
    c.parts = ("pairwise, exponent",)
    c.pairwise.dims = ("16,32",)
    c.images.claim_b = ("0.6",)
    train.normalise_config(c)
    assert c.parts == ("pairwise", "exponent") and c.pairwise.dims == (16, 32)
    assert c.images.claim_b == (0.6,)


def test_final_overlap_and_collapse_spread_on_synthetic_curves():
    m = np.tile(np.linspace(0, 1, 10), (4, 1))
    m[1] *= -1  # sign-ambiguous
    assert train.final_overlap(m) == pytest.approx(np.mean([8 / 9, 1.0]))
    ns = np.arange(1, 101)
    curve = lambda d, shift: {"ns": ns * d, "m_u": np.tile(  # noqa: E731
        np.clip(np.log(ns) / np.log(100) + shift, 0, 1), (3, 1))}
    same = {"d8": curve(8, 0.0), "d16": curve(16, 0.0)}
    assert train.collapse_spread(same) == pytest.approx(0.0, abs=1e-9)
    off = {"d8": curve(8, 0.0), "d16": curve(16, 0.2)}
    assert train.collapse_spread(off) == pytest.approx(0.2, abs=1e-6)


def test_gaussian_phase_gap():
    im = {"L_real": np.array([[30.0], [20.0], [14.0], [10.0]]), "L_W": np.array([13.0]),
          "gap": np.array([[0.0], [0.02], [0.01], [0.5]])}
    # L_real <= 1.15 * 13 = 14.95 first at index 2: max gap over indices 0..2.
    assert train.gaussian_phase_gap(im, 0) == pytest.approx(0.02)
    im["L_real"] = im["L_real"] + 100
    assert train.gaussian_phase_gap(im, 0) == math.inf


def test_claims_from_metrics_thresholds_and_smoke_subset():
    met = {"pairwise": {"slope": 1.2, "collapse_spread": 0.2},
           "linear_budget": {"m_v_sqrt_d": [0.5, 1.6], "m_u": [0.74, 0.75]},
           "exponent": {"pairwise": 2.0, "cumulant": 4.1, "correlated": 1.3,
                        "independent_control": 4.0}}
    full = {c.name: c for c in train.claims(met, configs.get_config("default"))}
    assert full["pairwise_linear_slope"].holds
    assert not full["pairwise_curve_collapse"].holds  # 0.2 > 0.15
    assert not full["hoc_invisible_at_linear_budget"].holds  # max 1.6 > 1.5
    assert full["pairwise_learned_at_linear_budget"].holds
    assert not full["exponent_correlated"].holds  # |1.3 - 1| > 0.1
    assert "cumulant_cubic_slope" not in full  # its part did not run
    smoke = {c.name for c in train.claims(met, configs.get_config("smoke"))}
    assert "pairwise_curve_collapse" not in smoke and "pairwise_linear_slope" in smoke


def test_run_writes_results_and_resumes_from_checkpoints(tmp_path, capsys):
    c = _cfg(parts=("linear_budget", "exponent"), replicas=8)
    c.linear_budget.dims = (8, 16)
    c.linear_budget.n_over_d = 30
    c.exponent.points = 4
    out = train.run(c, str(tmp_path))
    r = results.load_results(tmp_path)
    assert r["paper"] == "simplicity_bias" and r["variant"] == "smoke"
    names = {x["name"] for x in r["claims"]}
    assert names == {"hoc_invisible_at_linear_budget", "pairwise_learned_at_linear_budget",
                     "exponent_pairwise", "exponent_cumulant", "exponent_correlated",
                     "exponent_independent_control"}
    assert r["metrics"]["linear_budget"]["dims"] == [8, 16]
    assert os.path.exists(tmp_path / "exponents.png")
    assert os.path.isdir(tmp_path / "ckpt" / "linear_budget")
    # Resume: the per-d results are restored, identical.
    again = train.run(c, str(tmp_path))
    assert again["metrics"]["linear_budget"] == out["metrics"]["linear_budget"]
    # Another config in the same workdir is refused, not silently mixed.
    c.linear_budget.n_over_d = 31
    with pytest.raises(ValueError, match="another config"):
        train.run(c, str(tmp_path))
