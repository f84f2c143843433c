r"""Baguan-TS: sequence-native in-context forecasting with covariates (ICML 2026), a
~0.5 M-parameter 3D transformer pretrained on a synthetic prior, evaluated on held-out
synthetic tasks and on real series that statsmodels ships.

    python experiments/baguan_ts.py --workdir=runs/baguan_ts
    python experiments/baguan_ts.py --config=icml26_jax/baguan_ts/configs.py:smoke
    python experiments/baguan_ts.py --config=icml26_jax/baguan_ts/configs.py:gpu   # accelerator
    python experiments/baguan_ts.py --config.seeds=0,1,2 --workdir=runs/baguan_ts3
    python experiments/baguan_ts.py --config.rag=recent --config.K=4 --config.mF=2
"""

import os

from absl import logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "baguan_ts", "configs.py")
COMMON = common.define_flags("baguan_ts")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke, gpu).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.baguan_ts import train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    train.validate_config(config)
    logging.info("devices: %s", jax.devices())
    if not config.seeds:
        train.run(config, COMMON.workdir.value)
        return
    common.run_seeds(config, COMMON.workdir.value, train.run,
                     metrics=lambda r: [f"mean_wql/{split}/{meth}"
                                   for split, per in r["metrics"]["mean_wql"].items()
                                   for meth in per])


if __name__ == "__main__":
    common.run(main)
