r"""GRACE: gated relational alignment via confidence-based distillation for INT4 VLMs
(ICML 2026), on DigitGrid-VQA with a teacher and a student we train ourselves.

    python experiments/grace.py --config=icml26_jax/grace/configs.py:default \
        --workdir=runs/grace
    python experiments/grace.py --config=icml26_jax/grace/configs.py:smoke
    python experiments/grace.py --config.tau=auto --config.omega=3 --config.arms=qat_ce,grace
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from icml26_jax.core import flags as common  # noqa: E402
from icml26_jax.core import results  # noqa: E402

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "grace", "configs.py")
COMMON = common.define_flags("grace")
CONFIG = config_flags.DEFINE_config_file("config", _CONFIGS, "Experiment config (variant "
                                         "after ':', one of default, smoke).")


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
    runs = []
    for seed in config.seeds:  # the confirmatory run: one workdir per seed
        cfg = config.copy_and_resolve_references()
        cfg.seed = int(seed)
        workdir = os.path.join(COMMON.workdir.value, f"seed_{seed}")
        train.run(cfg, workdir)
        runs.append(results.load_results(workdir))
    paths = [f"arms/{arm}/acc" for arm in runs[0]["metrics"]["arms"]]
    summary = results.summarise_seeds(runs, metrics=paths + ["entropy_error/pearson_r"])
    path = results.write_summary(COMMON.workdir.value, summary)
    logging.info("\n%s\nsummary: %s", results.seeds_table(summary), path)


if __name__ == "__main__":
    common.run(main)
