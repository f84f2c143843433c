"""The experiment driver: config errors name the field, per-method records are
deterministic, the real-data (LoCoMo file) path runs without thresholds."""

import json

import numpy as np
import pytest

from icml26_jax.mragent import agent, configs, train
from icml26_jax.mragent.reasoner import LocalParams, LocalReasoner
from icml26_jax.mragent.schema import dump_locomo


@pytest.mark.parametrize("field,value,match", [
    ("data", "msc", "config.data must be one of"),
    ("embedder", "bert", "config.embedder must be one of"),
    ("reasoner", "gpt", "config.reasoner must be one of"),
    ("ablations", ("single_step", "no_memory"), "config.ablations: unknown"),
    ("ks", (0, 20), "config.ks must be integers"),
    ("hops", (3,), "config.hops"),
    ("full_context_tokens", 0, "config.full_context_tokens"),
])
def test_bad_config_values_name_the_field(field, value, match):
    c = configs.get_config("smoke")
    c[field] = value
    with pytest.raises(ValueError, match=match):
        train.validate_config(c)


def test_more_config_errors(tmp_path):
    c = configs.get_config("smoke")
    c.reasoner = "openai"
    with pytest.raises(ValueError, match="llm_base_url"):
        train.validate_config(c)
    c = configs.get_config("smoke")
    c.data, c.data_path = "locomo", str(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="does not exist"):
        train.validate_config(c)
    c = configs.get_config("smoke")
    c.budget.max_calls = 0
    with pytest.raises(ValueError, match="budget.max_calls"):
        train.validate_config(c)
    c = configs.get_config("smoke")
    c.calibration.tau_abstain = (0.9,)
    with pytest.raises(ValueError, match="tau_abstain"):
        train.validate_config(c)
    with pytest.raises(ValueError, match="unknown config variant"):
        configs.get_config("large")


def test_flag_strings_are_normalised():
    import ml_collections
    c = ml_collections.ConfigDict(configs.get_config("smoke").to_dict(), type_safe=False)
    c.ks, c.ablations, c.seeds = "10,20", "no_tags", "0,1"
    train.normalise_config(c)
    assert c.ks == (10, 20) and c.ablations == ("no_tags",) and c.seeds == (0, 1)


def test_records_are_deterministic(small):
    convs, emb, graphs = small
    c = configs.get_config("smoke")
    items = train.prepare(c, convs, graphs, [0, 1], emb, None)
    params = LocalParams(theta=-1.0, theta_hi=-1.0, tau_stop=0.45, m_stop=0.05)
    r = LocalReasoner(params, encode=emb.encode)
    for name in ("mragent", "single_step", "dense@20", "ppr@20", "expand2"):
        a = train.run_method(name, items, c, r, params, agent.Budget())
        b = train.run_method(name, items, c, r, params, agent.Budget())
        for f in train.RECORD_FIELDS:
            if f != "wall_ms":
                np.testing.assert_array_equal(a[f], b[f], err_msg=f"{name}.{f}")
        assert len(train._decode_strings(a["answers"])) == len(items)


def test_locomo_file_path_runs_without_thresholds(small, tmp_path):
    convs, _, _ = small
    path = tmp_path / "locomo10.json"
    dump_locomo(convs, path)
    c = configs.get_config("smoke")
    c.data, c.data_path = "locomo", str(path)
    c.ks, c.ablations = (20,), ("single_step",)
    out = train.run(c, str(tmp_path / "run"))
    assert out["claims"] == []
    m = out["metrics"]["methods"]
    assert {"mragent", "single_step", "dense@20", "bm25@20", "ppr@20", "expand2"} <= set(m)
    assert "calibration" not in out["metrics"]  # no dev split in a user's file
    n = sum(len(conv.qa) for conv in convs)
    preds = json.loads((tmp_path / "run" / "predictions.json").read_text())
    assert len(preds) == n and out["metrics"]["n"]["test_questions"] == n
