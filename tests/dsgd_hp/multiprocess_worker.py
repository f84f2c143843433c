"""One JAX process of tests/dsgd_hp/test_multiprocess.py: a mesh that would leave devices idle
in a 2-process job is a clear ``ValueError`` before anything is compiled.

Prints ``MESH_ERROR <message>`` (or ``MESH_ERROR none``), the default mesh of 16 users x 8 runs
(``USERS_IN_PROCESS <runs>x<users> <whether every users row is on one process>``) and
``DONE process <i> of <n>``.
"""

import argparse

from icml26_jax.core import distributed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator_address", default=None)
    parser.add_argument("--num_processes", type=int, default=1)
    parser.add_argument("--process_id", type=int, default=0)
    parser.add_argument("--num_cpu_devices", type=int, default=2)
    args = parser.parse_args()
    distributed.maybe_initialize(args.coordinator_address, args.num_processes, args.process_id,
                                 num_cpu_devices=args.num_cpu_devices)
    import jax

    from icml26_jax.dsgd_hp import dsgd, problems
    from icml26_jax.dsgd_hp.graphs import make_graph

    try:  # users = 2 on 4 devices leaves 2 devices for runs = 3: no even split
        dsgd.simulate(problems.quadratic(2), [make_graph("complete", 2)],
                      dsgd.constant_schedule(0.1), T=1, runs=3, key=0, log_every=1)
        print("MESH_ERROR none", flush=True)
    except ValueError as e:
        print(f"MESH_ERROR {e}", flush=True)
    # The default mesh keeps gossip inside each process: every users row on one process.
    m = dsgd.default_mesh(16, 8)
    local = all(len({d.process_index for d in row}) == 1 for row in m.devices)
    print(f"USERS_IN_PROCESS {m.shape['runs']}x{m.shape['users']} {local}", flush=True)
    print(f"DONE process {jax.process_index()} of {jax.process_count()}", flush=True)


if __name__ == "__main__":
    main()
