r"""OddSHAP (ICML 2026): Shapley values from the odd component of a game — paired sampling,
an oblivious-GBT proxy with an exact Walsh spectrum, constrained float64 regression on the
odd Walsh basis; against KernelSHAP (paired / unpaired), LeverageSHAP and antithetic
permutation sampling at equal budgets, with exact ground truth.

    python experiments/oddshap.py --workdir=runs/oddshap                     # default, ~13 min
    python experiments/oddshap.py --config=icml26_jax/oddshap/configs.py:smoke
    python experiments/oddshap.py --config.games=soum30,mlp_synth14 --config.num_seeds=10
    python experiments/oddshap.py --config.proxy_depth=10                   # the paper's depth
    python experiments/oddshap.py --config.seeds=0,1,2 --workdir=runs/oddshap_seeds
"""

import os

from absl import flags, logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "oddshap", "configs.py")
COMMON = common.define_flags("oddshap")
# One simulated CPU device per core (at most 8): each device runs its share of a cell's
# seeds x explicands one replica after another (train.REPLICA_BATCH), so the devices keep
# the cores busy (2 cores, 50 replicas, 1 -> 2 devices: OddSHAP soum60 m = 6,000 21 -> 13 s,
# KernelSHAP soum100 m = 10,000 7.9 -> 4.6 s). GPUs and several processes shard over all.
flags.FLAGS.set_default("num_cpu_devices", max(1, min(8, os.cpu_count() or 1)))
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    # The Shapley regression, spectra and exact ground truth are float64 (spec §Pitfalls).
    common.require_float64("oddshap", "the Shapley regression, spectra and exact ground truth")
    jax.config.update("jax_enable_x64", True)
    from icml26_jax.oddshap import configs, train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    configs.validate(config)
    logging.info("devices: %s", jax.devices())
    if not config.seeds:
        train.run(config, COMMON.workdir.value)
        return
    common.run_seeds(config, COMMON.workdir.value, train.run,
                     metrics=lambda r: ["identities/walsh_max_err"])


if __name__ == "__main__":
    common.run(main)
