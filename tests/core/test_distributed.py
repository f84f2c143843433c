"""Tests of icml26_jax.core.distributed that are safe inside the (single) test process.

``maybe_initialize`` is never called with ``num_cpu_devices`` here: the backend has already
started with conftest.py's 8 devices. The real multi-process path is exercised by
tests/core/test_testing.py::test_two_processes_psum.
"""

import jax
import pytest

from icml26_jax.core import distributed


def test_single_process_is_a_noop():
    distributed.maybe_initialize()
    distributed.maybe_initialize(None, None, None)
    distributed.maybe_initialize(num_processes=1)
    assert jax.process_count() == 1
    assert jax.device_count() == 8
    assert distributed.is_primary()


def test_multi_process_needs_coordinator():
    with pytest.raises(ValueError, match="coordinator_address"):
        distributed.maybe_initialize(None, 2, 0)


@pytest.mark.parametrize("process_id", [None, -1, 2, 5])
def test_bad_process_id(process_id):
    with pytest.raises(ValueError, match="process_id must be in"):
        distributed.maybe_initialize("127.0.0.1:1", 2, process_id)


def test_bad_counts():
    with pytest.raises(ValueError, match="num_processes must be >= 1"):
        distributed.maybe_initialize(num_processes=0)
    with pytest.raises(ValueError, match="num_cpu_devices must be >= 1"):
        distributed.maybe_initialize(num_cpu_devices=0)


@pytest.mark.parametrize("address", ["127.0.0.1", "host:", ":123", "h:99999", "h:x1"])
def test_bad_coordinator_address(address):
    with pytest.raises(ValueError, match="--coordinator_address must be host:port"):
        distributed.maybe_initialize(address, 2, 0)


def test_barrier_and_primary_first_single_process():
    calls = []
    distributed.barrier("noop")
    assert distributed.primary_first(lambda: calls.append(1) or "x", "t") == "x"
    assert calls == [1]
