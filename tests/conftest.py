"""Test-wide JAX set-up: 8 CPU devices (so every sharded path runs), strict promotion and a
persistent compilation cache for this session.

pytest imports this module before any test module, hence before any JAX backend starts;
the CPU device count cannot change after that. The compilation cache lives in a fresh
temporary directory (removed at exit, so runs never share it): programs compiled again after
``jax.clear_caches`` below, by the notebook kernels or by the other ``pytest -n`` worker (they
inherit ``JAX_COMPILATION_CACHE_DIR``) are read back instead of recompiled.

BLAS runs one thread per process: the suite runs on two ``pytest -n`` workers over two cores,
and OpenBLAS's spinning threads oversubscribed them (two processes each calling eigvalsh on a
400 x 400 matrix ran 6x slower with the default thread count than with one). Subprocesses and
notebook kernels inherit the setting through the environment.
"""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("MPLBACKEND", "Agg")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# XLA:CPU's elemental emitters (core.testing.ELEMENTAL_EMITTERS, not imported here: that
# would start JAX): at test sizes compiling is most of the time, and they compile about twice
# as fast as the fusion emitters (the full suite: 2,140 -> 2,007 s on 2 cores, 4,208 -> 3,874
# worker-seconds). Child processes and notebook kernels inherit the flag; XLA_FLAGS that
# already name the emitters are left as they are.
if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_use_fusion_emitters=false".strip())
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _CACHE = tempfile.mkdtemp(prefix="icml26_jax_test_cache_")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

import jax  # noqa: E402
import threadpoolctl  # noqa: E402

# A plugin may have loaded numpy's BLAS before the variables above were set.
threadpoolctl.threadpool_limits(int(os.environ["OPENBLAS_NUM_THREADS"]))

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


import gc  # noqa: E402
import importlib.util  # noqa: E402

import pytest  # noqa: E402

if importlib.util.find_spec("xdist") is not None:

    def pytest_xdist_make_scheduler(config, log):
        """``pytest -n 2`` (the CI command) schedules whole test modules, except notebooks.

        A module's expensive module-scoped fixtures (smoke-trained models) must run once, on
        one worker, so a module is one work unit; each executed notebook and each paper's
        multi-process comparison is independent and slow, so each is its own unit and the two
        workers share them.
        """
        from xdist.scheduler import LoadScopeScheduling

        class _ModuleOrNotebook(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return nodeid if _alone(nodeid) else nodeid.split("::", 1)[0]

        return _ModuleOrNotebook(config, log)


def _alone(nodeid: str) -> bool:
    """An executed notebook or a paper's 2-process comparison: its own work unit."""
    return ("test_colabs.py::test_notebook_executes[" in nodeid
            or "test_multiprocess.py::test_two_processes_match_one[" in nodeid)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drops JAX's compiled programs after each test module.

    The whole suite runs in one process. Without this, every jitted program of every module
    stays alive until the end, and late modules compile with many GiB already held (a full
    run aborted inside an XLA compile at 95 %).
    """
    yield
    jax.clear_caches()
    gc.collect()
