"""Bad input to the 19 entry scripts fails fast: an unwritable ``--workdir``, an unknown
config field and a wrongly typed one each end with exit code 2, at most 2 lines on stderr
(the last one ``error: ...`` naming the flag), no traceback, and no compute.

"No compute" is checked, not timed: the scripts run with ``JAX_PLATFORMS`` set to a platform
that does not exist, so anything that starts a JAX backend (or runs the experiment) would
end with a different error. ``benchmarks/entry_errors.py`` times the same cases (the
issue's bound is 10 s each).
"""

from __future__ import annotations

import importlib
import os
import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
PAPERS = sorted(p.stem for p in (REPO_ROOT / "experiments").glob("*.py")
                if (REPO_ROOT / "icml26_jax" / p.stem / "configs.py").exists())
CASES = ("unwritable_workdir", "unknown_field", "wrong_type")


def test_every_paper_has_an_entry_script():
    assert len(PAPERS) == 19, PAPERS


def _int_field(config) -> str:
    """A top-level integer field of the default config (not a bool)."""
    for k, v in config.items():
        if isinstance(v, int) and not isinstance(v, bool):
            return k
    raise AssertionError(f"no integer field in {sorted(config.keys())}")


def case_args(paper: str, case: str, tmp_path: pathlib.Path) -> tuple[list[str], str]:
    """The flags of one bad-input case and a string its error line must contain."""
    config = importlib.import_module(f"icml26_jax.{paper}.configs").get_config()
    field = _int_field(config)
    workdir = tmp_path / "run"
    if case == "unwritable_workdir":
        blocker = tmp_path / "a_file"
        blocker.write_text("")
        # A path below a regular file cannot be created, even by root.
        return [f"--workdir={blocker / 'run'}"], "--workdir="
    if case == "unknown_field":
        # A one-letter typo of a real field: the message names the field and the real one.
        return [f"--workdir={workdir}", f"--config.{field}x=1"], f"--config.{field}x"
    return [f"--workdir={workdir}", f"--config.{field}=abc"], f"--config.{field}"


def run_script(paper: str, args: list[str], cwd, env_extra=None, timeout=120):
    env = {**os.environ, "JAX_PLATFORMS": "no_such_platform", **(env_extra or {})}
    env.pop("XLA_FLAGS", None)
    return subprocess.run([sys.executable, str(REPO_ROOT / "experiments" / f"{paper}.py"),
                           *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("paper", PAPERS)
def test_bad_input_ends_with_one_error_line(paper, case, tmp_path):
    args, named = case_args(paper, case, tmp_path)
    proc = run_script(paper, args, cwd=tmp_path)
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    assert 1 <= len(err) <= 2, proc.stderr
    assert err[-1].startswith("error: ") and named in err[-1], err[-1]
    if case == "unknown_field":
        field = named[len("--config."):-1]
        assert "closest:" in err[-1] and field in err[-1].split("closest:")[1], err[-1]
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_a_bad_list_item_names_its_field(tmp_path):
    """A tuple field is cast after the backend starts: the error still names the field, and
    JAX's own start-up logging stays within the two lines."""
    proc = run_script("grace", [f"--workdir={tmp_path / 'run'}", "--config.seeds=abc"],
                      cwd=tmp_path, env_extra={"JAX_PLATFORMS": "cpu"})
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(err) <= 2, proc.stderr
    assert err[-1].startswith("error: --config.seeds must be a comma-separated list of ints")


def test_help_lists_the_shared_flags(tmp_path):
    proc = run_script("grace", ["--help"], cwd=tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr  # absl's --help exits with code 1
    for flag in ("--workdir", "--seed", "--num_cpu_devices", "--config"):
        assert flag in proc.stdout, (flag, proc.stdout[:2000])
