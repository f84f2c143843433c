r"""TRACE (ICML 2026): continuous mechanism trajectories — a VAE with K explicit experts trained
on pure domains, α(t) recovered at test time from expert centroids by least squares on the
simplex, against discrete-switching baselines (Viterbi, forward–backward, probabilistic
routing, nearest centroid) on the same encoder, with oracle and constant-guess controls and a
K ablation.

    python experiments/trace.py --workdir=runs/trace                      # default, <= 10 min
    python experiments/trace.py --config=icml26_jax/trace/configs.py:smoke
    python experiments/trace.py --config.parts=main --config.mix_modes=param
    python experiments/trace.py --config.projection=euclid --config.window=0
    python experiments/trace.py --config.parts=main,k_ablation,data_sweep
    python experiments/trace.py --config.seeds=0,1,2 --workdir=runs/trace_seeds
"""

import os

from absl import flags, logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "trace", "configs.py")
COMMON = common.define_flags("trace")
# One small model on one device: the 8 simulated CPU devices would only split the 2 cores.
flags.FLAGS.set_default("num_cpu_devices", 1)
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke, paper).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.trace import configs, train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    configs.validate(config)
    logging.info("devices: %s", jax.devices())
    if not config.seeds:
        train.run(config, COMMON.workdir.value)
        return
    common.run_seeds(config, COMMON.workdir.value, train.run,
                     metrics=lambda r: ["summary/mcc", "summary/k_ablation/spearman"])


if __name__ == "__main__":
    common.run(main)
