r"""FPDA: Forensic Prompting with Dual-Action Policy Optimization for vision-language forgery
detection and localisation (ICML 2026), on ForgeBench-S (real photos from the scikit-image /
scikit-learn wheels with splice, copy-move and inpainting edits and a shared post-processing
chain).

    python experiments/fpda.py --workdir=runs/fpda                       # default, ~10 min
    python experiments/fpda.py --config=icml26_jax/fpda/configs.py:smoke
    python experiments/fpda.py --config.methods=fpda,no_prompt,all_routes --config.steps_sup=600
    python experiments/fpda.py --config.seeds=0,1,2 --workdir=runs/fpda_seeds
"""

import os

from absl import logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "fpda", "configs.py")
COMMON = common.define_flags("fpda")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke, gpu).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.fpda import configs, train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    configs.validate(config)
    logging.info("devices: %s", jax.devices())
    if not config.seeds:
        train.run(config, COMMON.workdir.value)
        return
    common.run_seeds(config, COMMON.workdir.value, train.run,
                     metrics=lambda r: [f"splits/{s}/{m}/{k}" for s in ("test_id",)
                                        for m in r["metrics"]["splits"]["test_id"]
                                        for k in ("pixel_f1", "image_auc", "reward")])


if __name__ == "__main__":
    common.run(main)
