r"""SafeFlowRL: geometric control of out-of-distribution shift in safe offline RL (ICML 2026).
A feasibility-weighted conditional flow prior and an ordered latent refiner with a latent
budget, against BC-All, BC-Safe, BC-Lag and FISOR-lite on the PointRobotHazard reach-avoid task.

    python experiments/safe_flow_rl.py --workdir=runs/safe_flow_rl
    python experiments/safe_flow_rl.py --config=icml26_jax/safe_flow_rl/configs.py:smoke
    python experiments/safe_flow_rl.py --config.latent_budget=0.25 --config.eps_sweep=0.1,0.25,inf
    python experiments/safe_flow_rl.py --config.seeds=0,1,2 --workdir=runs/safe_flow_rl_seeds
    python experiments/safe_flow_rl.py --config.data_path=my_point_robot.npz
"""

import os

from absl import logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "safe_flow_rl", "configs.py")
COMMON = common.define_flags("safe_flow_rl")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.safe_flow_rl import train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    train.validate_config(config)
    logging.info("devices: %s", jax.devices())
    if not config.seeds:
        train.run(config, COMMON.workdir.value)
        return
    common.run_seeds(config, COMMON.workdir.value, train.run,
                     metrics=lambda r: [f"methods/{n}/{k}" for n in r["metrics"]["methods"]
                                        for k in ("r_norm", "c_norm", "violation_rate")])


if __name__ == "__main__":
    common.run(main)
