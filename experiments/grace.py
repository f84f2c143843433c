r"""GRACE: gated relational alignment via confidence-based distillation for INT4 VLMs
(ICML 2026), on DigitGrid-VQA with a teacher and a student we train ourselves.

    python experiments/grace.py --config=icml26_jax/grace/configs.py:default \
        --workdir=runs/grace
    python experiments/grace.py --config=icml26_jax/grace/configs.py:smoke
    python experiments/grace.py --config.tau=auto --config.omega=3 --config.arms=qat_ce,grace
"""

import os

from absl import logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "grace", "configs.py")
COMMON = common.define_flags("grace")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke, gpu).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.grace import train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    train.validate_config(config)
    logging.info("devices: %s", jax.devices())
    if not config.seeds:
        train.run(config, COMMON.workdir.value)
        return
    common.run_seeds(config, COMMON.workdir.value, train.run,
                     metrics=lambda r: [f"arms/{a}/acc" for a in r["metrics"]["arms"]]
                     + ["entropy_error/pearson_r"])


if __name__ == "__main__":
    common.run(main)
