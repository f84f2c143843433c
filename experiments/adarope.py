r"""AdaRoPE: head-specific rotary frequencies and scaling (ICML 2026), small-scale analogue.

    python experiments/adarope.py --config=icml26_jax/adarope/configs.py:default \
        --workdir=runs/adarope --seed=0
    python experiments/adarope.py --config=icml26_jax/adarope/configs.py:smoke
    python experiments/adarope.py --config.arms=rope,adarope --config.steps=2000
"""

import os

from absl import logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "adarope", "configs.py")
COMMON = common.define_flags("adarope")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke, full, gpu).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.adarope import train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    for name, cast in (("arms", str), ("tasks", str), ("eval_lens", int)):  # --config.arms=a,b
        config[name] = common.as_tuple(config[name], cast)
    train.validate_config(config)
    logging.info("devices: %s", jax.devices())
    train.run(config, COMMON.workdir.value)


if __name__ == "__main__":
    common.run(main)
