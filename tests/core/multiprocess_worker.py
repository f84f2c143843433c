"""Worker started by tests/core/test_testing.py: one of several JAX processes on 127.0.0.1.

Each process owns 2 CPU devices; together they psum a value over all devices, then save
and restore a sharded checkpoint (orbax coordinates the processes). Prints ``PSUM <value>``
and ``RESTORED <sum>`` lines that the test checks, then exercises the core helpers that span
processes: ``mesh.to_host`` of an array sharded over both processes, ``mesh.map_runs`` over
replica counts that do not divide the 4 devices, ``mesh.put_rows`` (each process generates only
its own rows), ``mesh.batched``, ``mesh.map_columns`` and ``distributed.primary_first`` (``HOST``, ``RUNS``,
``ROWS``, ``BATCHED``, ``COLUMNS``, ``FIRST`` and ``AGREED`` lines).
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

    from icml26_jax.core import mesh as mesh_lib

    print(f"HOST {mesh_lib.to_host(x).tolist()}", flush=True)  # spans both processes
    runs = mesh_lib.runs_mesh()
    for n in (1, 3, 5, 6):
        mesh = mesh_lib.runs_mesh(n)
        out = mesh_lib.map_runs(mesh, _replica, 2.0, np.arange(n, dtype=np.float32),
                                np.ones((n, 2), np.float32))
        again = mesh_lib.map_runs(mesh, _replica, 2.0, out[0], out[1])  # padded outputs back in
        print(f"RUNS n={n} shape={out[0].shape[0]} devices={len(out[0].sharding.device_set)} "
              f"{mesh_lib.to_host(again, n)[0].tolist()}", flush=True)
    calls = []
    y = mesh_lib.put_rows(lambda r: (calls.append(r.tolist()),
                                     np.stack([r, 10 * r], 1).astype(np.float32))[1], 8, runs)
    print(f"ROWS {mesh_lib.to_host(y)[:, 1].tolist()} mine={sorted(sum(calls[1:], []))}",
          flush=True)
    data = mesh_lib.data_mesh()
    b = mesh_lib.batched(jax.jit(lambda v: v * 3), 7, 3, np.arange(7, dtype=np.float32),
                         mesh=data)
    print(f"BATCHED {b.tolist()}", flush=True)
    # 5 columns over one device per process (CPU): each process solves its own block.
    seen = []
    cols = np.arange(10, dtype=np.float32).reshape(2, 5)
    c = jax.jit(lambda s, b: mesh_lib.map_columns(
        lambda s, b: (seen.append(b.shape[-1]), b * s)[1], b, s))(np.float32(3.0), cols)
    print(f"COLUMNS local={seen[-1]} mesh={mesh_lib.columns_mesh().devices.size} "
          f"{mesh_lib.to_host(c)[1].tolist()}", flush=True)
    from icml26_jax.core import data as data_lib

    src = [{"x": np.float32(i)} for i in range(8)]
    share = next(data_lib.batches(src, 8, seed=0, shuffle=False))
    g = data_lib.global_batch(share, runs)
    print(f"GLOBAL {g['x'].shape[0]} local={share['x'].tolist()} "
          f"{mesh_lib.to_host(g['x']).tolist()}", flush=True)
    order = []
    got = distributed.primary_first(lambda: order.append(jax.process_index()) or len(order),
                                    "worker")
    print(f"FIRST {got}", flush=True)
    if args.ckpt_dir:
        import os
        import time

        from icml26_jax.core import checkpoint

        # checkpoint.cached on a new directory, process 1 late: process 0 is creating the
        # directory when process 1 looks for it, and both must still take the "compute" branch.
        d = os.path.join(args.ckpt_dir + "_cached", "stage")
        if jax.process_index() == 1:
            time.sleep(1.0)
        a = checkpoint.cached(d, fingerprint=7, compute=lambda: {"v": np.arange(3.0)}, name="w")
        b = checkpoint.cached(d, fingerprint=7, compute=lambda: {"v": np.zeros(3)}, name="w")
        print(f"AGREED {distributed.agreed(jax.process_index() == 1)} "
              f"CACHED {a['v'].tolist()} {np.asarray(b['v']).tolist()}", flush=True)


def _replica(scale, a, b):
    return a * scale, b + a

if __name__ == "__main__":
    main()
