"""DSGD-HP in a 2-process job (2 x 2 CPU devices, gloo on 127.0.0.1).

That the smoke run of 2 processes equals 1 process x 4 devices (every metric and claim, and
only process 0 writes) is ``tests/test_multiprocess.py``. What stays here: ``dsgd.default_mesh``
keeps each users row inside one process (gossip never crosses processes when the runs allow
it), and a users x runs mesh that cannot use every device is a clear error on every process
of a multi-process job (a single process may leave devices idle: tests/core/test_mesh.py),
raised before anything is compiled.
"""

import sys

import pytest

from icml26_jax.core import testing

WORKER = [sys.executable, "-m", "tests.dsgd_hp.multiprocess_worker"]


@pytest.mark.multiprocess
def test_two_process_meshes_keep_gossip_in_process_or_fail_clearly():
    res = testing.run_processes(
        WORKER + ["--coordinator_address=127.0.0.1:{port}", "--num_processes={num_processes}",
                  "--process_id={process_id}", "--num_cpu_devices=2"],
        num_processes=2, timeout=240)
    for i, r in enumerate(res):
        assert "MESH_ERROR runs=3 must be a multiple of 2" in r.stdout, r.stdout
        assert "USERS_IN_PROCESS 2x2 True" in r.stdout, r.stdout
        assert f"DONE process {i} of 2" in r.stdout, r.stdout
