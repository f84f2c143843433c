r"""Logit-Attention Divergence: attention-guided calibration of the position bias of
multi-image retrieval (LAD, ICML 2026).

    python experiments/lad.py --config=icml26_jax/lad/configs.py:default \
        --workdir=runs/lad
    python experiments/lad.py --config=icml26_jax/lad/configs.py:smoke
    python experiments/lad.py --config.n_cal=5 --config.tau=5 --config.agg=paper
"""

import os

from absl import logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "lad", "configs.py")
COMMON = common.define_flags("lad")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.lad import train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    train.validate_config(config)
    logging.info("devices: %s", jax.devices())
    train.run(config, COMMON.workdir.value)


if __name__ == "__main__":
    common.run(main)
