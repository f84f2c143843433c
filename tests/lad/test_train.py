"""The LAD experiment driver: config errors, a tiny end-to-end run (every claim listed,
training-free accounting, determinism, resume) and the smoke run (spec Tests #9-11)."""

import os

import numpy as np
import pytest

from icml26_jax.core import results
from icml26_jax.lad import configs, train


@pytest.mark.parametrize("field,value,match", [
    ("tau", 0.0, "tau"), ("topk", 4, "topk"), ("n_cal", 0, "n_cal"), ("agg", "max", "agg"),
    ("mix", "sum", "mix"), ("pos_skew", "left", "pos_skew"), ("num_shuffles", 1, "num_shuffles"),
    ("settings", ("random5",), "settings"), ("train_n", ("1,4",), "train_n"),
    ("layers", ("7",), "layers"), ("variant", "big", "variant")])
def test_config_errors_name_the_field(field, value, match):
    c = configs.get_config("smoke")
    c[field] = value
    with pytest.raises(ValueError, match=match):
        train.normalise_config(c)
        train.validate_config(c)
    c = configs.get_config("smoke")
    c.mix = "prob"  # needs the paper-form bias
    with pytest.raises(ValueError, match="bias"):
        train.validate_config(c)
    with pytest.raises(ValueError, match="variant"):
        configs.get_config("large")


def _tiny():
    c = configs.get_config("smoke")
    c.train_steps, c.chunk = 20, 10
    c.n_test, c.n_cal, c.n_cal_sweep = 16, 2, 4
    return c


def test_tiny_run_lists_every_claim_is_deterministic_and_resumes(tmp_path):
    a = train.run(_tiny(), str(tmp_path / "a"))
    results.validate_results(a)
    assert [x["name"] for x in a["claims"]] == list(train.ALL_CLAIMS)
    assert all(isinstance(x["holds"], bool) for x in a["claims"])
    free = {x["name"]: x for x in a["claims"]}["lad_training_free"]
    assert free["holds"]  # checksum unchanged, N |D_cal| calibration passes, 1 per instance
    nf = a["metrics"]["settings"]["random4"]["n_forward"]
    assert nf == {"calibration": 8, "test": 32, "perm_average": 128, "instances": 32}
    b = train.run(_tiny(), str(tmp_path / "b"))
    ma, mb = a["metrics"]["settings"]["random4"], b["metrics"]["settings"]["random4"]
    assert a["metrics"]["params_unchanged"] and b["metrics"]["params_unchanged"]
    assert ma["methods"] == mb["methods"] and ma["bias"] == mb["bias"]
    assert a["metrics"]["train_loss_end"] == b["metrics"]["train_loss_end"]
    os.remove(tmp_path / "a" / "results.json")
    again = train.run(_tiny(), str(tmp_path / "a"))  # training restored, not redone
    assert again["metrics"]["settings"]["random4"]["bias"] == ma["bias"]
    assert again["metrics"]["settings"]["random4"]["methods"] == ma["methods"]


@pytest.mark.slow
def test_smoke_run_end_to_end(tmp_path):
    out = train.run(configs.get_config("smoke"), str(tmp_path))
    assert {x["name"] for x in out["claims"]} == set(train.ALL_CLAIMS)
    assert {os.path.basename(p) for p in out["figures"]} == {
        "confusion_vanilla_vs_lad.png", "bias_matrix.png", "recall_by_position.png",
        "divergence_bars.png"}
    assert out["metrics"]["train_loss_end"] < np.log(8)
