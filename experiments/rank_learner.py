r"""Rank-Learner: orthogonal ranking of treatment effects (ICML 2026).

    python experiments/rank_learner.py --config=icml26_jax/rank_learner/configs.py:default \
        --workdir=runs/rank_learner
    python experiments/rank_learner.py --config=icml26_jax/rank_learner/configs.py:smoke
    python experiments/rank_learner.py --config.dgp=randhie --config.nuisance=learned
"""

import os

from absl import logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "rank_learner", "configs.py")
COMMON = common.define_flags("rank_learner")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.rank_learner import train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    config.semisynthetic = common.as_tuple(config.semisynthetic, str)
    config.perturb = common.as_tuple(config.perturb, str)
    config.deltas = common.as_tuple(config.deltas, float)
    config.both_deltas = common.as_tuple(config.both_deltas, float)
    train.validate_config(config)
    logging.info("devices: %s", jax.devices())
    train.run(config, COMMON.workdir.value)


if __name__ == "__main__":
    common.run(main)
