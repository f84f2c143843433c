"""One JAX process of tests/dsgd_hp/test_multiprocess.py (or the 1-process reference).

Runs ``simulate`` (n = 16, ring + exp, T = 200, R = 32) and a tiny ``train.run``, and writes
``trace_<process>.npz`` plus what ``write_results`` returned on this process.
"""

import argparse
import os

from icml26_jax.core import distributed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator_address", default=None)
    parser.add_argument("--num_processes", type=int, default=1)
    parser.add_argument("--process_id", type=int, default=0)
    parser.add_argument("--num_cpu_devices", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    distributed.maybe_initialize(args.coordinator_address, args.num_processes, args.process_id,
                                 num_cpu_devices=args.num_cpu_devices)
    import jax
    import numpy as np

    from icml26_jax.core import mesh
    from icml26_jax.dsgd_hp import dsgd, problems, train
    from icml26_jax.dsgd_hp.graphs import make_graph
    from tests.dsgd_hp.helpers import tiny_config

    pid = jax.process_index()
    gs = [make_graph(g, 16) for g in ("ring", "exp")]
    tr = dsgd.simulate(problems.quadratic(16, hetero=0.5), gs,
                       dsgd.strongly_convex_schedule(2.0, 1.0, 20.0), T=200, runs=32, key=4,
                       log_every=50)
    np.savez(os.path.join(args.out, f"trace_{pid}.npz"),
             **{k: v for k, v in tr._asdict().items() if v is not None})
    try:  # users = 16 on 4 devices leaves no device for runs = 6: a clear error in multi-process
        mesh.users_mesh(2, runs=3)
        print("MESH_ERROR none", flush=True)
    except ValueError as e:
        print(f"MESH_ERROR {e}", flush=True)
    out = train.run(tiny_config(("speedup", "tails")), os.path.join(args.out, "run"))
    print(f"DONE process {pid} of {jax.process_count()} devices {jax.device_count()} "
          f"wrote {out['results_path'] is not None}", flush=True)


if __name__ == "__main__":
    main()
