"""FML run level (spec §Tests): the entry script runs the smoke config in a subprocess, writes
every claim and the figures, and the smoke claims hold; same seed, same accuracies; a finished
workdir resumes to the same numbers; clear errors for bad config values."""

import json
import os

import jax
import numpy as np
import pytest

from icml26_jax.core import results, testing
from icml26_jax.fml import configs, report, train


@pytest.fixture(scope="module")
def smoke_dir(tmp_path_factory):
    wd = tmp_path_factory.mktemp("fml_smoke")
    out = testing.run_entry("fml", f"--workdir={wd}", variant="smoke", timeout=300)
    return wd, out.stdout


def test_smoke_entry_writes_every_claim_and_the_smoke_claims_hold(smoke_dir):
    wd, stdout = smoke_dir
    saved = results.load_results(wd)
    results.validate_results(saved)
    assert [c["name"] for c in saved["claims"]] == list(report.CLAIM_NAMES)
    by = {c["name"]: c for c in saved["claims"]}
    for name in report.SMOKE_CLAIMS:
        assert by[name]["holds"], by[name]
    assert by["structure_gain"]["expected"] is False
    for png in ("accuracy_vs_round.png", "per_domain.png"):
        assert (wd / png).stat().st_size > 1000, png
    m = saved["metrics"]
    assert set(m["methods"]) == {"fedavg", "fml"}
    fml = m["methods"]["fml"]
    assert len(fml["final"]) == 1 and len(fml["final"][0]) == 4  # one seed x four domains
    # FML uploads its manifolds besides the weights: 10 classes x 4 anchors x (64 + 1) floats
    assert fml["bytes"]["summary_up"] == 4 * 10 * 4 * 65 * 4
    assert "fedavg_sanity_band" in stdout


def _tiny():
    c = configs.get_config("smoke")
    c.rounds, c.eval_every, c.final_evals = 2, 1, 1
    c.per_client, c.test_per_domain, c.local_epochs = 20, 20, 1
    c.methods = ("fedproto",)
    return c


def test_same_seed_same_numbers_and_resume(tmp_path):
    a = train.run(_tiny(), str(tmp_path / "a"))
    b = train.run(_tiny(), str(tmp_path / "b"))
    dump = lambda r: json.dumps(r["metrics"]["methods"]["fedproto"]["final"])
    assert dump(a) == dump(b)
    os.remove(tmp_path / "a" / "results.json")
    assert dump(train.run(_tiny(), str(tmp_path / "a"))) == dump(a)  # restored, not retrained


@pytest.mark.parametrize("field,value,match", [
    ("methods", ("fedavg", "fedbn"), "methods"),
    ("k_m", 0, "k_m"),
    ("k_g", 0, "k_g"),
    ("tau", 0.0, "tau"),
    ("n_clients", 3, "n_clients"),
    ("per_client", 400, "per_client"),
    ("batch", 200, "batch"),
    ("compression", "svd", "compression"),
    ("beta_m", 1.5, "beta_m"),
])
def test_bad_config_values_raise_naming_the_field(field, value, match):
    c = configs.get_config("smoke")
    c[field] = value
    with pytest.raises(ValueError, match=match):
        configs.validate(c)


def test_unknown_domain_is_rejected():
    from icml26_jax.fml import data
    with pytest.raises(ValueError, match="domains"):
        data.make_digits_domains(0, n_clients=4, domain_counts=(1, 1, 1, 1),
                                 domains=("clean", "sketch", "thick_noisy", "colour_texture"))


def test_round_and_server_keys_are_the_documented_fold_ins():
    c = configs.get_config("smoke")
    c.seed, c.num_seeds = 5, 2
    keys, skeys = train.round_keys(c, 3, 4), train.server_keys(c, 3)
    assert keys.shape == (4, 2) and skeys.shape == (2,)
    data = jax.random.key_data
    for s in range(2):
        base = jax.random.key(5 + s)
        np.testing.assert_array_equal(data(skeys[s]), data(
            jax.random.fold_in(jax.random.fold_in(base, 10_003), 0)))
        for i in range(4):
            np.testing.assert_array_equal(data(keys[i, s]), data(
                jax.random.fold_in(jax.random.fold_in(base, 4), i)))
