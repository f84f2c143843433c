r"""Simplicity bias in diffusion models: pair-wise statistics first, higher-order later
(Merger, Bardone & Goldt, ICML 2026).

    python experiments/simplicity_bias.py --config=icml26_jax/simplicity_bias/configs.py:default \
        --workdir=runs/simplicity_bias
    python experiments/simplicity_bias.py --config=icml26_jax/simplicity_bias/configs.py:smoke
    python experiments/simplicity_bias.py --config.parts=pairwise,cumulant --config.replicas=64
"""

import os

from absl import logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "simplicity_bias", "configs.py")
COMMON = common.define_flags("simplicity_bias")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.simplicity_bias import train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    train.validate_config(config)
    logging.info("devices: %s", jax.devices())
    train.run(config, COMMON.workdir.value)


if __name__ == "__main__":
    common.run(main)
