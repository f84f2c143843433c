"""core.flags: the forms a list-valued config flag arrives in, the errors bad input gets
(tests/test_entry_errors.py runs them through the 19 entry scripts), ``run_seeds`` and the
float64 check."""

import ml_collections
import pytest

from icml26_jax.core import flags
from icml26_jax.core.flags import as_tuple


def test_as_tuple_splits_every_form_of_a_list_flag():
    assert as_tuple("a,b") == ("a", "b")
    assert as_tuple(("a,b",)) == ("a", "b")  # what config_flags gives a tuple field
    assert as_tuple(("a", "b, c")) == ("a", "b", "c")
    assert as_tuple(("16,32",), int) == (16, 32)
    assert as_tuple((0.5, 1), float) == (0.5, 1.0)
    assert as_tuple("") == () and as_tuple(()) == ()


def test_as_tuple_names_the_field_a_bad_item_came_from():
    with pytest.raises(ValueError, match=r"^--config\.seeds must be a comma-separated list "
                       r"of ints, got 'a,1'"):
        as_tuple("a,1", int, name="seeds")
    with pytest.raises(ValueError, match="list of valid items"):
        as_tuple(("x",), lambda v: float(v), name="eps")


def test_unknown_config_field_names_the_path_and_the_closest_fields():
    c = ml_collections.ConfigDict({"lr": 0.1, "lr_warmup": 5, "steps": 3,
                                   "teacher": {"d": 8, "depth": 2}})
    assert flags.unknown_config_field(c, ["--config.lr=1", "--config.teacher.d=4"]) is None
    msg = flags.unknown_config_field(c, ["--config.steps=2", "--config.lrr=0.1"])
    assert msg.startswith("--config.lrr: config has no field 'lrr' (closest: lr")
    msg = flags.unknown_config_field(c, ["--config.teacher.dpth=3"])
    assert msg == "--config.teacher.dpth: config.teacher has no field 'dpth' (closest: depth)"
    # Nothing close: every field is listed; a path below a scalar is not a config.
    assert "fields: lr, lr_warmup, steps, teacher" in flags.unknown_config_field(
        c, ["--config.zzz"])
    assert "not a config" in flags.unknown_config_field(c, ["--config.lr.x=1"])


def test_a_config_seed_override_is_refused_naming_the_seed_flag():
    msg = flags.seed_override(["--config.steps=2", "--config.seed=100"])
    assert msg.startswith("--config.seed=100: the seed is set by --seed") and "--seed=N" in msg
    assert flags.seed_override(["--config.seeds=0,1,2", "--config.seed_offset=1"]) is None


def test_probe_workdir_creates_it_or_names_the_flag(tmp_path):
    flags.probe_workdir(str(tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b").is_dir() and not any((tmp_path / "a" / "b").iterdir())
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"^--workdir=.*/file/run: cannot write there"):
        flags.probe_workdir(str(tmp_path / "file" / "run"))
    flags.probe_workdir(None)  # a script without a workdir flag


def test_run_seeds_runs_every_seed_in_its_workdir_and_writes_the_summary(tmp_path):
    import json

    import ml_collections

    from icml26_jax.core import flags, results

    c = ml_collections.ConfigDict({"seed": 0, "seeds": (3, 5), "scale": 2.0})
    seen = []

    def run(cfg, workdir):
        seen.append((cfg.seed, workdir))
        acc = cfg.scale * cfg.seed
        results.write_results(workdir, paper="toy", variant="default", seed=cfg.seed,
                              config=cfg.to_dict(), metrics={"acc": acc},
                              claims=[results.at_least("acc", acc, 8.0)], runtime_s=1.0)

    path = flags.run_seeds(c, str(tmp_path), run, metrics=lambda r: ["acc"])
    assert seen == [(3, str(tmp_path / "seed_3")), (5, str(tmp_path / "seed_5"))]
    assert c.seed == 0  # the caller's config is untouched
    with open(path) as f:
        s = json.load(f)
    assert s["seeds"] == [3, 5] and s["claims"][0]["holds_on"] == 1
    assert s["metrics"]["acc"]["values"] == [6.0, 10.0]


def test_require_float64_refuses_a_tpu_unless_the_emulation_is_accepted(monkeypatch):
    import jax
    import pytest

    from icml26_jax.core import flags as common

    monkeypatch.delenv(common.TPU_FLOAT64_ENV, raising=False)
    with pytest.raises(ValueError, match=r"gp2scale needs float64 \(CG\).*JAX_PLATFORMS=cpu"):
        common.require_float64("gp2scale", "CG", backend="tpu")
    common.require_float64("gp2scale", "CG", backend="cpu")
    common.require_float64("gp2scale", "CG", backend="gpu")
    monkeypatch.setenv(common.TPU_FLOAT64_ENV, "1")
    common.require_float64("gp2scale", "CG", backend="tpu")
    assert not jax.config.jax_enable_x64  # a check only: the entry script configures JAX
