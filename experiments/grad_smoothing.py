r"""Gradient Smoothing: depth-wise smoothing of block-wise optimiser updates (ICML 2026).

    python experiments/grad_smoothing.py \
        --config=icml26_jax/grad_smoothing/configs.py:default --workdir=runs/grad_smoothing
    python experiments/grad_smoothing.py --config=icml26_jax/grad_smoothing/configs.py:smoke
    python experiments/grad_smoothing.py --config.alpha=0.4 --config.mode=norm
"""

import os

from absl import logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "grad_smoothing", "configs.py")
COMMON = common.define_flags("grad_smoothing")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke, full, gpu).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.grad_smoothing import train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    for name, cast in (("lrs", float), ("eval_seeds", int)):  # --config.lrs=1e-3,2e-3
        config[name] = common.as_tuple(config[name], cast)
    train.validate_config(config)
    logging.info("devices: %s", jax.devices())
    train.run(config, COMMON.workdir.value)


if __name__ == "__main__":
    common.run(main)
