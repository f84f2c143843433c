r"""Discrete diffusion scaling: IsoFLOP study of AR, masked (MDLM), uniform-state (Duo) and
interpolating (Eso-LM) diffusion LMs (Sahoo et al., ICML 2026).

    python experiments/discrete_diffusion.py --config=icml26_jax/discrete_diffusion/configs.py:default \
        --workdir=runs/discrete_diffusion
    python experiments/discrete_diffusion.py --config=icml26_jax/discrete_diffusion/configs.py:smoke
    python experiments/discrete_diffusion.py --config.budgets=3e11,1e12 --config.sizes=XS,S,M,L
    python experiments/discrete_diffusion.py --config=icml26_jax/discrete_diffusion/configs.py:gpu \
        --workdir=runs/discrete_diffusion_gpu      # the full grid on one accelerator
"""

import os

from absl import logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "discrete_diffusion", "configs.py")
COMMON = common.define_flags("discrete_diffusion")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke, full, gpu).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.discrete_diffusion import train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    train.validate_config(config)
    logging.info("devices: %s", jax.devices())
    train.run(config, COMMON.workdir.value)


if __name__ == "__main__":
    common.run(main)
