"""Tests of icml26_jax.core.results: claims, results.json round trip, validation, tables."""

import json
import math
import os

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from icml26_jax.core import results


@pytest.mark.parametrize("measured, holds", [(0.5, True), (0.0, True), (1.0, True),
                                             (1.0001, False), (-0.1, False),
                                             (float("nan"), False), (float("inf"), False)])
def test_in_range(measured, holds):
    c = results.in_range("x", measured, 0.0, 1.0)
    assert c.holds is holds
    assert c.threshold == "[0, 1]"
    assert c.expected is True


@pytest.mark.parametrize("measured, holds", [(2.0, True), (1.5, True), (1.49, False),
                                             (float("nan"), False), (float("inf"), True)])
def test_at_least(measured, holds):
    c = results.at_least("speedup", measured, 1.5)
    assert c.holds is holds and c.threshold == ">= 1.5"


@pytest.mark.parametrize("measured, holds", [(0.125, True), (0.25, True), (0.3, False),
                                             (float("nan"), False), (-float("inf"), True)])
def test_at_most(measured, holds):
    c = results.at_most("gap", np.float32(measured), 0.25)  # 0.25 is exact in float32
    assert c.holds is holds and c.threshold == "<= 0.25"


def test_check_takes_the_callers_condition_and_never_holds_on_non_finite():
    c = results.check("margin", 0.2, "> 0 (a and b)", True)
    assert c.holds and c.threshold == "> 0 (a and b)" and c.measured == 0.2
    assert not results.check("margin", -0.1, "> 0", False).holds
    assert not results.check("margin", float("nan"), "> 0", True).holds
    assert not results.check("margin", float("inf"), "> 0", True).holds
    assert results.check("x", 1, "t", True, expected=False).expected is False


def test_claim_accepts_array_scalars_and_expected_flag():
    c = results.at_most("loss", jnp.asarray(0.25), 1e-3, expected=False)
    assert isinstance(c.measured, float) and c.measured == 0.25
    assert not c.holds and c.expected is False
    assert c.to_dict() == {"name": "loss", "measured": 0.25, "threshold": "<= 0.001",
                           "holds": False, "expected": False}
    assert results.at_least("d", float("nan"), 0).to_dict()["measured"] is None
    with pytest.raises(ValueError, match="lo=2 must be <= hi=1"):
        results.in_range("bad", 1.5, 2, 1)


def test_to_jsonable():
    cfg = ml_collections.ConfigDict({"lr": 0.1, "sizes": (1, 2), "inner": {"n": 3}})
    tree = {
        "cfg": cfg,
        "np": np.arange(3, dtype=np.int32),
        "jax": jnp.array([[1.0, float("nan")]]),
        "scalar": np.float64(2.5),
        "int": np.int64(4),
        "bool": np.bool_(True),
        "inf": float("-inf"),
        1: ("a", None),
    }
    out = results.to_jsonable(tree)
    assert out == {"cfg": {"lr": 0.1, "sizes": [1, 2], "inner": {"n": 3}}, "np": [0, 1, 2],
                   "jax": [[1.0, None]], "scalar": 2.5, "int": 4, "bool": True, "inf": None,
                   "1": ["a", None]}
    assert type(out["int"]) is int and type(out["bool"]) is bool
    json.dumps(out, allow_nan=False)  # Strict JSON: would raise on NaN.
    with pytest.raises(TypeError, match="object"):
        results.to_jsonable({"x": object()})


def _write(workdir, **kw):
    args = dict(paper="toy", variant="smoke", seed=3,
                config=ml_collections.ConfigDict({"lr": 0.1, "steps": 10}),
                metrics={"loss": np.float32(0.125), "curve": jnp.arange(3.0),
                         "diverged": float("nan")},
                claims=[results.at_most("loss", 0.125, 0.2),
                        results.at_least("speedup", 0.5, 2.0, expected=False)],
                runtime_s=1.5)
    args.update(kw)
    return results.write_results(workdir, **args)


def test_write_load_validate_round_trip(tmp_path):
    workdir = tmp_path / "runs" / "toy"  # Does not exist yet.
    path = _write(workdir, figures=["loss.png"])
    assert path == os.path.join(workdir, "results.json")
    d = results.load_results(workdir)
    assert d == results.load_results(path)
    results.validate_results(d)
    assert d["paper"] == "toy" and d["variant"] == "smoke" and d["seed"] == 3
    assert d["config"] == {"lr": 0.1, "steps": 10}
    assert d["metrics"] == {"loss": 0.125, "curve": [0.0, 1.0, 2.0], "diverged": None}
    assert d["claims"] == [
        {"name": "loss", "measured": 0.125, "threshold": "<= 0.2", "holds": True,
         "expected": True},
        {"name": "speedup", "measured": 0.5, "threshold": ">= 2", "holds": False,
         "expected": False}]
    assert d["runtime_s"] == 1.5 and d["figures"] == ["loss.png"]
    # Atomic write leaves no temporary file behind, with the mode `open` would give it.
    assert sorted(os.listdir(workdir)) == ["results.json"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask
    # Rewriting replaces the file.
    _write(workdir, seed=4)
    assert results.load_results(workdir)["seed"] == 4


def test_write_validates_before_writing(tmp_path):
    with pytest.raises(ValueError, match=r"claims'\]\[0\] is missing the key 'holds'"):
        _write(tmp_path, claims=[{"name": "c", "measured": 1.0, "threshold": ">= 0"}])
    assert not (tmp_path / "results.json").exists()


def test_only_process_zero_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(results.jax, "process_index", lambda: 1)
    assert _write(tmp_path / "w") is None
    assert not (tmp_path / "w").exists()


def _valid():
    return {"paper": "p", "variant": "v", "seed": 0, "config": {}, "metrics": {},
            "claims": [{"name": "c", "measured": 1.0, "threshold": ">= 0", "holds": True,
                        "expected": True}], "runtime_s": 2}


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.pop("paper"), "missing the key 'paper'"),
    (lambda d: d.pop("runtime_s"), "missing the key 'runtime_s'"),
    (lambda d: d.update(seed="0"), r"results\['seed'\] must be int"),
    (lambda d: d.update(seed=True), r"results\['seed'\] must be int"),
    (lambda d: d.update(metrics=[]), r"results\['metrics'\] must be dict"),
    (lambda d: d.update(runtime_s="fast"), r"results\['runtime_s'\] must be a number"),
    (lambda d: d["claims"][0].pop("holds"), r"claims'\]\[0\] is missing the key 'holds'"),
    (lambda d: d["claims"][0].update(holds="yes"), r"\['holds'\] must be bool"),
    (lambda d: d["claims"][0].update(measured="1"), r"\['measured'\] must be a number or null"),
    (lambda d: d["claims"][0].update(expected=1), r"\['expected'\] must be bool"),
    (lambda d: d["claims"].append("c"), r"claims'\]\[1\] must be a dict"),
])
def test_validate_errors(mutate, match):
    d = _valid()
    results.validate_results(d)
    mutate(d)
    with pytest.raises(ValueError, match=match):
        results.validate_results(d)


def test_validate_accepts_null_measured():
    d = _valid()
    d["claims"][0]["measured"] = None
    results.validate_results(d)
    with pytest.raises(ValueError, match="must be a dict"):
        results.validate_results([d])


def test_format_table():
    table = results.format_table(
        [["adam", 0.123456, True, None], ["sgd-long-name", 12345.678, False, 3]],
        ["method", "loss", "ok", "n"], title="Results")
    lines = table.splitlines()
    assert lines[0] == "Results"
    assert lines[1].split() == ["method", "loss", "ok", "n"]
    assert set(lines[2]) == {"-", " "}
    assert lines[3].split() == ["adam", "0.123", "yes", "-"]
    assert lines[4].split() == ["sgd-long-name", "1.23e+04", "no", "3"]
    # Columns are aligned: every row is as wide as the header rule (numbers right-aligned).
    assert len(lines[3]) == len(lines[4]) == len(lines[2])
    assert lines[3].index("0.123") + len("0.123") == lines[4].index("1.23e+04") + 8
    assert "0.1235" in results.format_table([[0.123456]], ["x"], floatfmt=".4f")
    with pytest.raises(ValueError, match="row 0 has 1 cells, expected 2"):
        results.format_table([[1]], ["a", "b"])


def test_claims_table():
    claims = [results.at_least("speedup", 2.5, 1.5),
              results.at_most("gap", float("nan"), 0.1),
              {"name": "limit", "measured": None, "threshold": "<= 1", "holds": False,
               "expected": False}]
    lines = results.claims_table(claims).splitlines()
    assert lines[0].split() == ["claim", "measured", "threshold", "holds"]
    assert lines[2].split() == ["speedup", "2.5", ">=", "1.5", "yes"]
    assert lines[3].split() == ["gap", "nan", "<=", "0.1", "no"]
    assert lines[4].split() == ["limit", "-", "<=", "1", "no", "(expected", "to", "fail)"]
    assert math.isnan(claims[1].measured)


def _seed_run(seed, measured, acc):
    d = _valid()
    d["seed"] = seed
    d["claims"] = [results.at_least("gap", measured, 2.0).to_dict(),
                   results.at_most("err", 0.5, 1.0).to_dict()]
    d["metrics"] = {"arms": {"a": {"acc": acc}}}
    d["runtime_s"] = 10.0 + seed
    return d


def test_summarise_seeds_mean_sd_and_holds_count(tmp_path):
    runs = [_seed_run(0, 3.0, 90.0), _seed_run(1, 1.0, 80.0), _seed_run(2, 5.0, 70.0)]
    s = results.summarise_seeds(runs, metrics=["arms/a/acc"])
    gap = s["claims"][0]
    assert gap["name"] == "gap" and gap["threshold"] == ">= 2"
    assert gap["measured"] == [3.0, 1.0, 5.0] and gap["holds"] == [True, False, True]
    assert gap["holds_on"] == 2 and s["claims"][1]["holds_on"] == 3
    np.testing.assert_allclose(gap["mean"], 3.0)
    np.testing.assert_allclose(gap["sd"], np.std([3.0, 1.0, 5.0], ddof=1))
    acc = s["metrics"]["arms/a/acc"]
    assert acc["values"] == [90.0, 80.0, 70.0] and acc["sd"] == pytest.approx(10.0)
    assert s["seeds"] == [0, 1, 2] and s["runtime_s"] == [10.0, 11.0, 12.0]
    table = results.seeds_table(s)
    assert "3 ± 2" in table and "3 / 1 / 5" in table and "2/3" in table
    assert "80 ± 10" in table
    path = results.write_summary(tmp_path, s)
    with open(path) as f:
        assert json.load(f) == s


def test_summarise_seeds_non_finite_has_no_mean():
    runs = [_seed_run(0, 3.0, 90.0), _seed_run(1, float("nan"), None)]
    s = results.summarise_seeds(runs, metrics=["arms/a/acc"])
    assert s["claims"][0]["measured"] == [3.0, None] and s["claims"][0]["mean"] is None
    assert s["metrics"]["arms/a/acc"]["mean"] is None
    assert "-" in results.seeds_table(s)


@pytest.mark.parametrize("mutate, metrics, match", [
    (lambda rs: rs[1].update(paper="q"), (), "runs differ in 'paper'"),
    (lambda rs: rs[1].update(seed=0), (), r"repeated seeds \[0, 0\]"),
    (lambda rs: rs[1]["claims"].pop(), (), "seed 1 has claims"),
    (lambda rs: None, ["arms/b/acc"], "metric 'arms/b/acc' is not in every run's metrics"),
    (lambda rs: None, ["arms/a"], "must be a number in every run"),
    (lambda rs: rs.clear(), (), "at least one results dict"),
])
def test_summarise_seeds_errors(mutate, metrics, match):
    runs = [_seed_run(0, 3.0, 90.0), _seed_run(1, 1.0, 80.0)]
    mutate(runs)
    with pytest.raises(ValueError, match=match):
        results.summarise_seeds(runs, metrics=metrics)


def test_median_seconds_times_synchronised_calls_and_validates():
    import time as _time

    from icml26_jax.core import timing

    calls = []

    def slow(x, *, pause=0.01):
        calls.append(x)
        _time.sleep(pause)
        return jnp.asarray(x)

    t = timing.median_seconds(slow, 3, repeats=3)
    assert calls == [3, 3, 3, 3]  # one warm-up call, three timed ones
    assert 0.009 < t < 0.5
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        timing.median_seconds(slow, 1, repeats=0)
