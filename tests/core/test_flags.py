"""core.flags.as_tuple: the forms a list-valued config flag arrives in."""

from icml26_jax.core.flags import as_tuple


def test_as_tuple_splits_every_form_of_a_list_flag():
    assert as_tuple("a,b") == ("a", "b")
    assert as_tuple(("a,b",)) == ("a", "b")  # what config_flags gives a tuple field
    assert as_tuple(("a", "b, c")) == ("a", "b", "c")
    assert as_tuple(("16,32",), int) == (16, 32)
    assert as_tuple((0.5, 1), float) == (0.5, 1.0)
    assert as_tuple("") == () and as_tuple(()) == ()


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
