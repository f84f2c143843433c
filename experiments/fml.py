r"""FML (ICML 2026; reconstructed from the abstract): federated learning under domain shift with
compressed class manifolds, attention-based Manifold Mutual Learning on the server, and
manifold approximation / separation losses — against FedAvg, FedProx, FedProto and FPL on a
digits-like domain suite built from scikit-learn's bundled 8x8 digits.

    python experiments/fml.py --workdir=runs/fml                       # default, <= 9 min
    python experiments/fml.py --config=icml26_jax/fml/configs.py:smoke
    python experiments/fml.py --config.methods=fedavg,fml --config.rounds=100
    python experiments/fml.py --config.k_m=8 --config.beta_m=0
    python experiments/fml.py --config.seeds=0,3 --workdir=runs/fml_seeds   # + summary.json
"""

import os

from absl import logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "fml", "configs.py")
COMMON = common.define_flags("fml")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke, gpu).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.fml import configs, train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    configs.validate(config)
    logging.info("devices: %s", jax.devices())
    if not config.seeds:
        train.run(config, COMMON.workdir.value)
        return
    common.run_seeds(config, COMMON.workdir.value, train.run,
                     metrics=lambda r: [f"methods/{m}/avg" for m in config.methods])


if __name__ == "__main__":
    common.run(main)
