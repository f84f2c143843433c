r"""DSGD-HP: high-probability convergence of decentralized SGD (Armacki & Sayed, ICML 2026).

    python experiments/dsgd_hp.py --users=64
    python experiments/dsgd_hp.py --config=icml26_jax/dsgd_hp/configs.py:smoke
    python experiments/dsgd_hp.py --config.speedup.runs=1024 --seed=3 --workdir=runs/s3

Two processes on one machine (each with 2 simulated CPU devices):

    for i in 0 1; do python experiments/dsgd_hp.py --config=icml26_jax/dsgd_hp/configs.py:smoke \
      --coordinator_address=127.0.0.1:12355 --num_processes=2 --process_id=$i \
      --num_cpu_devices=2 & done; wait
"""

import os

from absl import flags, logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "dsgd_hp", "configs.py")
COMMON = common.define_flags("dsgd_hp")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke, full).")
USERS = flags.DEFINE_integer("users", None, "Number of simulated users U (the largest n); "
                             "overrides config.users. A power of two (>= 32 for default/full).")
DATA_PATH = flags.DEFINE_string("data_path", None, "Optional .npz with X [N, D] and y [N] to "
                                "run the logistic sweeps on instead of the bundled digits.")


def main(argv):
    common.setup(argv, COMMON)
    from icml26_jax.core import mesh
    from icml26_jax.dsgd_hp import train

    config = CONFIG.value
    if USERS.value is not None:
        config.users = USERS.value
    if DATA_PATH.value:
        config.problem, config.data_path = "npz", DATA_PATH.value
    config.seed = COMMON.seed.value
    train.validate_config(config)
    m = mesh.users_mesh(config.users, config.network.runs)
    logging.info("mesh at n = %d: %s (%d users per device)", config.users, dict(m.shape),
                 config.users // m.shape[mesh.USERS])
    train.run(config, COMMON.workdir.value)


if __name__ == "__main__":
    common.run(main)
