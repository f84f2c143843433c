r"""TGsF: Taylor-Gaussians with quadratic motion and temporal opacity, TGs-Flow supervision
and a feed-forward model, for novel view synthesis from monocular video (ICML 2026).
Per-scene fits (E1: order 2 vs order 1, temporal opacity; E2: decoupled depth + 2D flow vs
photometric and lifted-3D supervision) and the feed-forward model (E3) on analytic
ray-cast scenes textured with real photos.

    python experiments/tgsf.py --workdir=runs/tgsf                       # E1 + E2
    python experiments/tgsf.py --config=icml26_jax/tgsf/configs.py:feedforward --workdir=runs/tgsf_ff
    python experiments/tgsf.py --config=icml26_jax/tgsf/configs.py:smoke
    python experiments/tgsf.py --config=icml26_jax/tgsf/configs.py:gpu --workdir=runs/tgsf_gpu
    python experiments/tgsf.py --config.scenes=S1,S2 --config.orders=0,1,2 --config.steps=1600
    python experiments/tgsf.py --config.seeds=0,1,2 --workdir=runs/tgsf_seeds
"""

import os

from absl import logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "tgsf", "configs.py")
COMMON = common.define_flags("tgsf")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke, feedforward, "
                              "full, gpu).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.tgsf import train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    train.validate_config(config)
    logging.info("devices: %s", jax.devices())
    if not config.seeds:
        train.run(config, COMMON.workdir.value)
        return
    common.run_seeds(config, COMMON.workdir.value, train.run,
                     metrics=lambda r: [f"{e}/{a}/masked_psnr_extrap"
                                        for e in ("e1", "e2") for a in r["metrics"].get(e, {})
                                        if not a.startswith("_")])


if __name__ == "__main__":
    common.run(main)
