"""gp2Scale spec §Tests 11-12 (run level): the smoke run writes every claim and claims 1-3 and
5 hold (plus the exact grid count); a finished workdir resumes to the same numbers; float64 is
required; clear errors for bad config values; kernel 3's parameter map and static pattern."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import x64
from icml26_jax.core import results
from icml26_jax.gp2scale import configs, kernels, nonstationary, report, train


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    wd = tmp_path_factory.mktemp("gp2scale_smoke")
    with x64.enabled():  # module fixtures run before the package's
        return wd, train.run(configs.get_config("smoke"), str(wd))


@pytest.mark.slow
def test_smoke_run_writes_every_claim_and_the_smoke_claims_hold(smoke_run):
    wd, res = smoke_run
    saved = results.load_results(wd)
    assert [c["name"] for c in saved["claims"]] == list(report.CLAIM_NAMES)
    by = {c["name"]: c for c in saved["claims"]}
    for name in report.SMOKE_CLAIMS:
        assert by[name]["holds"], by[name]
    for png in ("time_vs_n.png", "slq_error.png", "camera_prediction.png", "am_trace.png",
                "synth1d_ns_gaps.png"):
        assert (wd / png).stat().st_size > 1000, png
    m = saved["metrics"]
    assert m["camera"]["iters_done"] > 0 and 0 < m["camera"]["accept_rate"][0] < 1
    assert m["scaling"]["rows"]["nnz_per_row"][0] == pytest.approx(30, rel=0.1)


@pytest.mark.slow
def test_resume_gives_the_same_numbers(smoke_run):
    wd, res = smoke_run
    again = train.run(configs.get_config("smoke"), str(wd))  # every phase restored
    for key in ("camera", "nonstationary"):
        a, b = res["metrics"][key], again["metrics"][key]
        assert a["rmse_ratio" if key == "camera" else "nlpd_gain"] == \
            b["rmse_ratio" if key == "camera" else "nlpd_gain"]
    assert res["metrics"]["slq"]["mean"] == again["metrics"]["slq"]["mean"]


def test_needs_float64(tmp_path):
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match="needs float64"):
            train.run(configs.get_config("smoke"), str(tmp_path))
    finally:
        jax.config.update("jax_enable_x64", before)


@pytest.mark.parametrize("field,value,match", [
    ("train", "sgd", "--config.train must be one of"),
    ("pattern_mode", "dense", "--config.pattern_mode must be one of"),
    ("dataset", "mnist", "--config.dataset must be one of"),
    ("num_probes", 0, "--config.num_probes"),
    ("cg_tol", 0.0, "--config.cg_tol must be in"),
    ("ls_bounds_px", (5.0, 1.0), "--config.ls_bounds_px must be"),
    ("scaling_ns", (1000,), "--config.scaling_ns needs"),
    ("crop", (300, 200), "--config.crop must be"),
    ("ns_k3_steps", -1, "--config.ns_k3_steps must be >= 0"),
    ("ns_k3_n", 0, "--config.ns_k3_n"),
])
def test_bad_config_values_raise(field, value, match):
    c = configs.get_config("default")
    c[field] = value
    with pytest.raises(ValueError, match=match):
        configs.validate(c)
    with pytest.raises(ValueError, match="unknown config variant"):
        configs.get_config("huge")


def test_npy_dataset_needs_paths():
    c = configs.get_config("smoke")
    c.dataset = "npy"
    with pytest.raises(ValueError, match="x_path and --config.y_path"):
        configs.validate(c)


def test_grid_count_claim_check_is_exact():
    closed, brute = report.grid_count_check(np.array([3.3, 5.0]))
    assert closed == brute and closed > 48 * 40


def test_risser_parameters_stay_in_bounds_and_the_static_pattern_holds_every_nonzero():
    """Any unconstrained u maps inside kernel 3's bounds, and the pattern built at the bounds
    (r0 and radii at their maxima) holds every non-zero of the dense kernel matrix — the
    likelihood on it is exact for every parameter Adam can reach."""
    c = configs.get_config("smoke")
    lo, hi = nonstationary._risser_bounds(c)
    assert len(lo) == sum(k for _, k in nonstationary.K3_FIELDS) and np.all(lo < hi)
    names = [n for n, k in nonstationary.K3_FIELDS for _ in range(k)]
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0, 1, 300))[:, None]
    pat = nonstationary.risser_pattern(x, hi[names.index("r0")], hi[names.index("g1_radii")])
    have = np.zeros((300, 300), bool)
    have[pat.rows[pat.valid()], pat.cols[pat.valid()]] = True
    # x ~ 0 lies under no bump of either group (their balls start at 0.025): it pairs only
    # locally, so far-apart pairs outside one common group stay structural zeros
    assert x[0, 0] < 0.02 and have[0].sum() < 10 and not have[0, -1]
    u0 = nonstationary._k3_init(lo, hi)
    for u in (u0, rng.normal(0, 3, len(lo)), np.full(len(lo), 30.0)):  # 30: every bound hit
        th = lo + (hi - lo) / (1 + np.exp(-u))
        assert np.all((th >= lo) & (th <= hi))
        p = nonstationary._k3_from(jnp.asarray(u), jnp.asarray(lo), jnp.asarray(hi))
        k = np.asarray(kernels.k_dense("risser", p, jnp.asarray(x), jnp.asarray(x)))
        assert np.all(k[~have] == 0.0) and np.all(np.diag(k) > 0)
    init = nonstationary._k3_split(lo + (hi - lo) / (1 + np.exp(-u0)))
    assert float(init["r0"]) == pytest.approx(0.01, rel=1e-6)
    assert float(init["g1_radii"][0]) == pytest.approx(0.08, rel=1e-6)
