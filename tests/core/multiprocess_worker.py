"""Worker started by tests/core/test_testing.py: one of several JAX processes on 127.0.0.1.

Each process owns 2 CPU devices; together they psum a value over all devices, then save
and restore a sharded checkpoint (orbax coordinates the processes). Prints ``PSUM <value>``
and ``RESTORED <sum>`` lines that the test checks.
"""

import argparse

from icml26_jax.core import distributed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator_address", required=True)
    parser.add_argument("--num_processes", type=int, required=True)
    parser.add_argument("--process_id", type=int, required=True)
    parser.add_argument("--ckpt_dir", default=None)
    args = parser.parse_args()
    distributed.maybe_initialize(args.coordinator_address, args.num_processes,
                                 args.process_id, num_cpu_devices=2)
    import jax  # Deferred: nothing may touch the backend before maybe_initialize.
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((jax.device_count(),), ("x",))
    sharding = NamedSharding(mesh, P("x"))
    # Global value i + 1 on device i; this process holds its own contiguous rows.
    n_local = jax.local_device_count()
    local = np.arange(n_local, dtype=np.float32) + 1 + jax.process_index() * n_local
    x = jax.make_array_from_process_local_data(sharding, local, (jax.device_count(),))
    total = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v, "x"), mesh=mesh,
                                  in_specs=P("x"), out_specs=P()))(x)
    value = float(np.asarray(total.addressable_shards[0].data)[0])
    print(f"PSUM {value} devices {jax.device_count()} process {jax.process_index()}", flush=True)

    if args.ckpt_dir:
        from icml26_jax.core import checkpoint

        with checkpoint.Checkpointer(args.ckpt_dir) as ckpt:
            ckpt.save(3, {"x": x, "step": 3})
            restored = ckpt.restore(like={"x": x, "step": 0})
        mine = [np.asarray(s.data) for s in x.addressable_shards]
        got = [np.asarray(s.data) for s in restored["x"].addressable_shards]
        same = all(np.array_equal(a, b) for a, b in zip(got, mine))
        print(f"RESTORED step {restored['step']} local_sum {sum(float(g.sum()) for g in got)} "
              f"same {same}", flush=True)

if __name__ == "__main__":
    main()
