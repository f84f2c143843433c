"""experiments/dsgd_hp.py end to end: the smoke run, one-line errors on bad flags.

The default run (``--users=64``) is the README's first Quick-start command and its measured
table lives in icml26_jax/dsgd_hp/README.md; at 250 s of the suite's 30-minute budget it no
longer runs inside the test suite, whose smoke run covers the same code path.
"""

import os
import subprocess
import sys

import pytest

from icml26_jax.core import results
from icml26_jax.core import testing
from icml26_jax.core.testing import REPO_ROOT

SCRIPT = os.path.join(REPO_ROOT, "experiments", "dsgd_hp.py")


def _env():
    return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO_ROOT)




def _check_run(r, workdir):
    assert r.returncode == 0, r.stderr[-3000:]
    d = results.load_results(workdir)
    results.validate_results(d)
    for title in ("(1) graphs at n =", "(2) speed-up on exp", "(3) claims"):
        assert title in r.stdout, r.stdout
    for png in ("speedup.png", "rate.png", "tails.png", "transient.png", "logreg.png",
                "nonconvex.png"):
        assert (workdir / png).exists(), png
    return d


@pytest.mark.slow
def test_smoke_end_to_end(tmp_path):
    r = testing.run_entry("dsgd_hp", f"--workdir={tmp_path}", variant="smoke", timeout=400)
    d = _check_run(r, tmp_path)
    assert d["variant"] == "smoke" and d["metrics"]["devices"] == 8
    assert len(d["claims"]) == 12
    held = {c["name"] for c in d["claims"] if c["holds"]}
    assert {"speedup_slope_q90", "exp_matches_centralized"} <= held


BAD_FLAGS = [
    (["--users=48"], "--users must be a power of two >= 32"),
    (["--users=abc"], "flag --users=abc"),
    (["--config.sigma=-1"], "config.sigma must be > 0"),
    (["--config.speedup.T=0"], "config.speedup.T must be a positive integer"),
    (["--config.network.graphs=('ring','star')"], "unknown graph 'star'"),
    (["--config.order=xyz"], "allowed: atc, cta"),
    (["--num_processes=2"], "--coordinator_address is required"),
    (["--num_cpu_devices=0"], "flag --num_cpu_devices=0"),
    (["--config=icml26_jax/dsgd_hp/configs.py:huge"], "unknown config variant 'huge'"),
    (["positional"], "unexpected positional arguments"),
]


def test_bad_flags_give_one_error_line(tmp_path):
    # Started together: each is mostly interpreter and JAX start-up.
    procs = [subprocess.Popen([sys.executable, SCRIPT, *args, f"--workdir={tmp_path}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env(), cwd=REPO_ROOT) for args, _ in BAD_FLAGS]
    for p, (args, match) in zip(procs, BAD_FLAGS):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 2, (args, err)
        lines = [l for l in err.splitlines() if l.startswith("error:")]
        assert len(lines) == 1 and match in lines[0], (args, err)
        assert "Traceback" not in err, (args, err)
    assert not (tmp_path / "results.json").exists()
