r"""gp2Scale (ICML 2026): exact Gaussian processes with compactly supported, non-stationary
kernels; sparse BCSR covariance, batched CG + stochastic Lanczos log-determinants in float64.

    python experiments/gp2scale.py --workdir=runs/gp2scale                    # default, ~10 min
    python experiments/gp2scale.py --config=icml26_jax/gp2scale/configs.py:smoke
    python experiments/gp2scale.py --config.scaling_ns=10000,100000,1000000   # bigger scaling
    python experiments/gp2scale.py --config.train=adam          # Adam instead of block AM
    python experiments/gp2scale.py --config.dataset=npy --config.x_path=x.npy --config.y_path=y.npy
    python experiments/gp2scale.py --config.seeds=0,1,2 --workdir=runs/gp2scale_seeds
"""

import os

from absl import flags, logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "gp2scale", "configs.py")
COMMON = common.define_flags("gp2scale")
# The sparse mat-mats do not shard over simulated devices; one CPU device by default.
flags.FLAGS.set_default("num_cpu_devices", 1)
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    # CG to 1e-8 with a 1e-2 nugget and the SLQ log terms need float64 (spec §Pitfalls).
    common.require_float64("gp2scale", "CG to 1e-8 with a 1e-2 nugget and the SLQ log terms")
    jax.config.update("jax_enable_x64", True)
    from icml26_jax.gp2scale import configs, train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    configs.validate(config)
    logging.info("devices: %s", jax.devices())
    if not config.seeds:
        train.run(config, COMMON.workdir.value)
        return
    common.run_seeds(config, COMMON.workdir.value, train.run,
                     metrics=lambda r: ["camera/rmse_ratio", "nonstationary/nlpd_gain",
                                        "scaling/slope", "slq/rel_error"])


if __name__ == "__main__":
    common.run(main)
