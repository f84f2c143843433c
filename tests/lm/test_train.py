"""``lm.train.shard_replicas``: stacked replicas on every device, padded and trimmed."""

import jax
import numpy as np
import pytest

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.lm import train as lm_train


@pytest.mark.parametrize("n", [1, 3, 8, 9])
def test_shard_replicas_pads_to_every_device_and_to_host_trims(n):
    mesh = mesh_lib.runs_mesh(n)
    total = mesh_lib.padded_size(n, mesh)
    tree = {"w": np.arange(n * 2, dtype=np.float32).reshape(n, 2),
            "b": np.arange(5 * n, dtype=np.int32).reshape(5, n)}
    out = {"w": lm_train.shard_replicas(tree["w"], mesh, n),
           "b": lm_train.shard_replicas(tree["b"], mesh, n, dim=1)}
    assert out["w"].shape == (total, 2) and out["b"].shape == (5, total)
    assert len(out["w"].sharding.device_set) == jax.device_count()
    assert out["w"].sharding.spec[0] == mesh_lib.RUNS and out["b"].sharding.spec[1] == \
        mesh_lib.RUNS
    w = mesh_lib.to_host(out["w"])
    np.testing.assert_array_equal(w[:n], tree["w"])
    np.testing.assert_array_equal(w[n:], np.repeat(tree["w"][-1:], total - n, 0))
    np.testing.assert_array_equal(mesh_lib.to_host(out["w"], n), tree["w"])
    np.testing.assert_array_equal(mesh_lib.to_host(out["b"])[:, :n], tree["b"])
    # A restored padded copy (here of 16 devices) is cut back to n replicas first.
    restored = mesh_lib.pad_leading(tree["w"], n + 16)
    np.testing.assert_array_equal(
        mesh_lib.to_host(lm_train.shard_replicas(restored, mesh, n)), w)
