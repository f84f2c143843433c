"""Helpers for tests: pytree comparison, multi-process launches and compile counting."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence

import jax
import numpy as np

# The repository root (this file is icml26_jax/core/testing.py): child processes import the
# package from here without it being installed.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# jax.monitoring records this duration event around every XLA backend compilation (cache
# misses of jit's executable cache only); see BACKEND_COMPILE_EVENT in jax/_src/dispatch.py.
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

# At smoke sizes compiling is most of a run. The test suite compiles with XLA:CPU's older
# elemental emitters, which compile about twice as fast as its fusion emitters (tests/conftest.py
# sets them for the pytest process; child processes inherit them), and the slow tests' child
# processes (the 2-process pairs, the notebook kernels) also with XLA's optimisation passes off.
ELEMENTAL_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


def fast_compile_env() -> dict[str, str]:
    """Environment variables for a test's child process: the caller's ``XLA_FLAGS`` plus
    the elemental emitters (unless the flags already choose the emitters), and
    ``JAX_DISABLE_MOST_OPTIMIZATIONS``."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_use_fusion_emitters" not in flags:
        flags = f"{flags} {ELEMENTAL_EMITTERS}".strip()
    return {"JAX_DISABLE_MOST_OPTIMIZATIONS": "1", "XLA_FLAGS": flags}


def tree_allclose(a, b, *, rtol: float = 1e-6, atol: float = 1e-6, err_msg: str = "") -> None:
    """Asserts two pytrees have the same structure, leaf shapes and (close) values.

    Args:
      a: actual pytree (arrays, scalars).
      b: desired pytree.
      rtol: relative tolerance of ``np.testing.assert_allclose``.
      atol: absolute tolerance.
      err_msg: prefix of the failure message.

    Raises:
      AssertionError: naming the first differing leaf path.
    """
    prefix = f"{err_msg}: " if err_msg else ""
    sa, sb = jax.tree.structure(a), jax.tree.structure(b)
    if sa != sb:
        raise AssertionError(f"{prefix}tree structures differ:\n  {sa}\n  {sb}")
    leaves_a = jax.tree_util.tree_flatten_with_path(a)[0]
    leaves_b = jax.tree.leaves(b)
    for (path, x), y in zip(leaves_a, leaves_b):
        name = jax.tree_util.keystr(path) or "<root>"
        x, y = _host(x), _host(y)
        if x.shape != y.shape:
            raise AssertionError(f"{prefix}leaf {name}: shapes differ, {x.shape} vs {y.shape}")
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=f"{prefix}leaf {name}")


def _host(x) -> np.ndarray:
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(jax.device_get(x))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(cmd: Sequence[str], num_processes: int = 2, *, timeout: float = 180,
                  env: Mapping[str, str] | None = None, cwd: str | None = None,
                  check: bool = True) -> list[subprocess.CompletedProcess]:
    """Starts ``num_processes`` copies of a command at once and waits for all of them.

    Every element of ``cmd`` is ``str.format``-ed per process with ``port`` (one free port,
    shared), ``process_id`` and ``num_processes``, e.g.
    ``[sys.executable, "worker.py", "--coordinator_address=127.0.0.1:{port}",
    "--process_id={process_id}", "--num_processes={num_processes}"]``.

    If one process fails, or ``timeout`` seconds pass, all are killed (a multi-process JAX
    job whose peer died would otherwise wait forever in a collective).

    Args:
      cmd: the command, with format fields.
      num_processes: number of processes.
      timeout: seconds for all of them together.
      env: extra environment variables (over ``os.environ`` and ``JAX_PLATFORMS=cpu``);
        ``PYTHONPATH`` always starts with the repository root.
      cwd: working directory (default: repository root).
      check: raise if any process failed or timed out.

    Returns:
      One ``CompletedProcess`` per process (text stdout/stderr), in process order.

    Raises:
      AssertionError: with ``check``, naming each failed process with its stderr tail.
    """
    if num_processes < 1:
        raise ValueError(f"num_processes must be >= 1, got {num_processes}")
    port = free_port()
    full_env = dict(os.environ, JAX_PLATFORMS="cpu")
    full_env.update(env or {})
    full_env["PYTHONPATH"] = os.pathsep.join(
        [REPO_ROOT] + [p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p])
    procs, outs = [], []
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        for i in range(num_processes):
            args = [c.format(port=port, process_id=i, num_processes=num_processes) for c in cmd]
            # Files, not pipes: a chatty child can never block on a full pipe buffer.
            out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
            outs.append((args, out, err))
            procs.append(subprocess.Popen(args, stdout=out, stderr=err, env=full_env,
                                          cwd=cwd or REPO_ROOT, start_new_session=True))
        while any(p.poll() is None for p in procs):
            if any(p.returncode not in (None, 0) for p in procs):
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)  # the child's own session: it and its children
                p.wait()
    results = []
    for p, (args, out, err) in zip(procs, outs):
        out.seek(0)
        err.seek(0)
        results.append(subprocess.CompletedProcess(args, p.returncode, out.read(), err.read()))
        out.close()
        err.close()
    if check and (timed_out or any(r.returncode for r in results)):
        why = f"timed out after {timeout} s" if timed_out else "failed"
        report = [f"{num_processes} processes {why}: {' '.join(cmd)}"]
        for i, r in enumerate(results):
            report.append(f"--- process {i}: exit code {r.returncode}; stderr tail:\n"
                          f"{_tail(r.stderr)}\n--- stdout tail:\n{_tail(r.stdout, 10)}")
        raise AssertionError("\n".join(report))
    return results


def run_entry(paper: str, *flags: str, variant: str | None = None, timeout: float = 300,
              check: bool = True, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> subprocess.CompletedProcess:
    """Runs ``experiments/<paper>.py`` as a user would, in one child process.

    From ``cwd`` (default the repository root, where the script and config paths are
    relative; absolute from elsewhere), with ``PYTHONPATH`` starting at the root and
    ``JAX_PLATFORMS=cpu`` unless ``env`` says otherwise, with
    ``--config=icml26_jax/<paper>/configs.py:<variant>`` first when ``variant`` is given, then
    ``flags``. Through :func:`run_processes` with one process: killed after
    ``timeout`` seconds, and with ``check`` a failure raises ``AssertionError`` with the
    stderr tail.

    Returns:
      The ``CompletedProcess`` (text stdout / stderr, ``returncode``).
    """
    root = "" if cwd is None else REPO_ROOT  # paths relative to the root when run from it
    cmd = [sys.executable, os.path.join(root, "experiments", f"{paper}.py")]
    if variant is not None:
        cmd.append(f"--config={os.path.join(root, 'icml26_jax', paper, 'configs.py')}"
                   f":{variant}")
    # run_processes formats every argument ({port}, ...): braces in flags stay literal.
    cmd += [f.replace("{", "{{").replace("}", "}}") for f in flags]
    return run_processes(cmd, 1, timeout=timeout, env=env, cwd=cwd, check=check)[0]


# The bad-input cases every entry script must reject in seconds, before any compute, with one
# ``error:`` line (tests/test_entry_errors.py checks them, benchmarks/entry_errors.py times
# them). They run with a JAX platform that does not exist, so starting a backend would fail.
ENTRY_PAPERS = tuple(sorted(
    f[:-3] for f in os.listdir(os.path.join(REPO_ROOT, "experiments")) if f.endswith(".py")
    and os.path.exists(os.path.join(REPO_ROOT, "icml26_jax", f[:-3], "configs.py"))))
BAD_INPUT_CASES = ("unwritable_workdir", "unknown_field", "wrong_type")
NO_BACKEND_ENV = {"JAX_PLATFORMS": "no_such_platform"}


def bad_input_flags(paper: str, case: str, tmp_dir: str) -> tuple[list[str], str]:
    """The flags of one of :data:`BAD_INPUT_CASES` for ``paper`` (files under ``tmp_dir``)
    and a string its ``error:`` line must contain.

    unwritable_workdir: a path below a regular file (uncreatable even for root);
    unknown_field: a one-letter typo of the default config's first integer field;
    wrong_type: ``abc`` for that field. The last two point ``--workdir`` at
    ``<tmp_dir>/run``, which must stay empty.
    """
    import importlib

    config = importlib.import_module(f"icml26_jax.{paper}.configs").get_config()
    field = next((k for k, v in config.items()
                  if isinstance(v, int) and not isinstance(v, bool)), None)
    if field is None:
        raise ValueError(f"{paper}'s default config has no integer field")
    workdir = os.path.join(tmp_dir, "run")
    if case == "unwritable_workdir":
        blocker = os.path.join(tmp_dir, "a_file")
        open(blocker, "w").close()
        return [f"--workdir={os.path.join(blocker, 'run')}"], "--workdir="
    if case == "unknown_field":
        return [f"--workdir={workdir}", f"--config.{field}x=1"], f"--config.{field}x"
    if case == "wrong_type":
        return [f"--workdir={workdir}", f"--config.{field}=abc"], f"--config.{field}"
    raise ValueError(f"case must be one of {BAD_INPUT_CASES}, got {case!r}")


# Metric names that are wall-clock measurements or process / device counts: they legitimately
# differ between a 1-process and a 2-process run of the same experiment.
_TIMING = re.compile(r"(^|_)(s|ms|sec|secs|seconds|time|times|runtime|wall|latency|throughput)"
                     r"($|_)")
_COUNTS = frozenset({"devices", "processes", "num_devices", "num_processes", "device_count",
                     "process_count", "local_devices"})


def flat_metrics(metrics) -> dict[str, object]:
    """``{"a/b/0": leaf}`` of a results.json ``metrics`` tree, without timings and process /
    device counts (any path component matching them drops the leaf)."""
    out = {}

    def walk(x, path):
        if isinstance(x, dict):
            for k, v in x.items():
                if not (_TIMING.search(str(k)) or str(k) in _COUNTS):
                    walk(v, path + (str(k),))
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, path + (str(i),))
        else:
            out["/".join(path)] = x

    walk(metrics, ())
    return out


def assert_results_match(got: dict, want: dict, *, rtol: float = 1e-5, atol: float = 0.0,
                         err_msg: str = "") -> int:
    """Asserts two results.json dicts hold the same metrics and claims.

    Every numeric metric (:func:`flat_metrics`) and every claim's ``measured`` agree within
    ``|got - want| <= atol + rtol |want|`` (NaN equals NaN); other leaves (strings, bools,
    None) and each claim's ``holds`` are equal. Returns the number of numbers compared.

    Raises:
      AssertionError: listing every mismatch (up to 20).
    """
    a, b = flat_metrics(got["metrics"]), flat_metrics(want["metrics"])
    bad = []
    if set(a) != set(b):
        bad.append(f"metric paths differ: only in got {sorted(set(a) - set(b))[:10]}, only in "
                   f"want {sorted(set(b) - set(a))[:10]}")
    pairs = [(f"metrics/{k}", a[k], b[k]) for k in sorted(set(a) & set(b))]
    ca = {c["name"]: c for c in got["claims"]}
    cb = {c["name"]: c for c in want["claims"]}
    if list(ca) != list(cb):
        bad.append(f"claim names differ: {list(ca)} vs {list(cb)}")
    for k in ca.keys() & cb.keys():
        pairs.append((f"claims/{k}/measured", ca[k]["measured"], cb[k]["measured"]))
        pairs.append((f"claims/{k}/holds", ca[k]["holds"], cb[k]["holds"]))
    n = 0
    for name, x, y in pairs:
        if isinstance(x, bool) or isinstance(y, bool) or not (
                isinstance(x, (int, float)) and isinstance(y, (int, float))):
            if x != y:
                bad.append(f"{name}: {x!r} != {y!r}")
            continue
        n += 1
        if math.isnan(x) and math.isnan(y):
            continue
        if not abs(x - y) <= atol + rtol * abs(y):
            bad.append(f"{name}: {x!r} vs {y!r} (rel {abs(x - y) / max(abs(y), 1e-300):.2g})")
    if bad:
        prefix = f"{err_msg}: " if err_msg else ""
        raise AssertionError(f"{prefix}{len(bad)} mismatches (rtol={rtol}, atol={atol}):\n  "
                             + "\n  ".join(bad[:20]))
    return n


def load_json(path) -> object:
    """The JSON document at ``path``."""
    with open(path) as f:
        return json.load(f)


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


class CompileCounter:
    """Counts XLA backend compilations inside a ``with`` block.

    Example::

        with CompileCounter() as cc:
            f(x); f(x)
        assert cc.count == 1      # the second call hit jit's cache

    Counts every compilation in the process while active (from any thread).
    """

    def __init__(self):
        self.count = 0
        self._active = False

    def _listener(self, event: str, duration_secs: float, **kwargs) -> None:
        del duration_secs, kwargs
        if event == BACKEND_COMPILE_EVENT:
            self.count += 1

    def __enter__(self) -> CompileCounter:
        if self._active:
            raise RuntimeError("CompileCounter is already active")
        self._active = True
        jax.monitoring.register_event_duration_secs_listener(self._listener)
        return self

    def __exit__(self, *exc) -> None:
        jax.monitoring.unregister_event_duration_listener(self._listener)
        self._active = False


def _element_bytes(element_type: str) -> float:
    """Bytes per element of an MLIR element type name: f32, bf16, i1, ui8, complex<f64>, ..."""
    if element_type.startswith("complex<"):
        return 2 * _element_bytes(element_type[len("complex<"):-1])
    bits = re.search(r"\d+", element_type)
    return max(int(bits.group()), 8) / 8 if bits else 8.0  # i1 is stored as a byte; index: 8


def largest_constant(fn, *args, **kwargs) -> tuple[int, tuple[int, ...]]:
    """The largest constant that ``fn`` embeds in its program for these arguments.

    Lowers ``fn`` (a jitted function, or any function, which is jitted) to StableHLO and
    walks every ``stablehlo.constant``, nested regions (loops, conditionals, shard_map bodies)
    included. An array a step closes over instead of taking as an argument is baked into the
    program as such a constant: the program grows with the data, every new array recompiles,
    and an accelerator run copies it into each executable.

    Returns:
      ``(nbytes, shape)`` of the largest constant, ``(0, ())`` if there is none.
    """
    from jax._src.lib.mlir import ir  # jax's MLIR bindings (what `.compiler_ir` returns)

    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    module = jitted.lower(*args, **kwargs).compiler_ir("stablehlo")
    best: tuple[int, tuple[int, ...]] = (0, ())

    def walk(op) -> None:
        nonlocal best
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    child = child.operation
                    if child.name == "stablehlo.constant":
                        t = ir.RankedTensorType(child.attributes["value"].type)
                        shape = tuple(int(d) for d in t.shape)
                        nbytes = int(math.prod(shape) * _element_bytes(str(t.element_type)))
                        best = max(best, (nbytes, shape))
                    walk(child)

    walk(module.operation)
    return best


# No jitted step may embed a constant above this (issue 43): layers' parameters fit, data sets
# do not.
MAX_CONSTANT_BYTES = 1 << 20


def assert_no_large_constant(name: str, fn, *args, limit: int = MAX_CONSTANT_BYTES,
                             **kwargs) -> int:
    """Asserts that ``fn`` lowered for these arguments embeds no constant above ``limit``
    bytes (:func:`largest_constant`); returns the largest constant's size.

    Raises:
      AssertionError: naming ``name``, the constant's size and shape.
    """
    nbytes, shape = largest_constant(fn, *args, **kwargs)
    if nbytes > limit:
        raise AssertionError(f"{name} embeds a {nbytes}-byte constant of shape {shape} (over "
                             f"{limit} bytes): pass the array as a jit argument")
    return nbytes
