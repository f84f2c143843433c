r"""CoF-T2I: a video model as a pure visual reasoner for text-to-image generation (ICML 2026),
on procedural GenEval-schema scenes: one small video DiT denoises the draft -> corrected ->
refined trajectory jointly, each frame encoded on its own; the last frame is the image.

    python experiments/cof_t2i.py --workdir=runs/cof_t2i                    # default, ~15 min
    python experiments/cof_t2i.py --config=icml26_jax/cof_t2i/configs.py:smoke
    python experiments/cof_t2i.py --config.arms=cof,single --config.steps=1000
    python experiments/cof_t2i.py --config.cfg=auto        # CFG chosen per arm on validation
    python experiments/cof_t2i.py --config.seeds=0,1,2 --workdir=runs/cof_t2i_seeds
    python experiments/cof_t2i.py --num_cpu_devices=8  # sampling sharded over 8 devices
"""

import os

from absl import flags, logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "cof_t2i", "configs.py")
COMMON = common.define_flags("cof_t2i")
# Training here runs on one device: splitting 2 CPU cores into 8 simulated devices made each
# DiT step ~30 % slower (0.084 vs 0.064 s for cof). --num_cpu_devices=8 shards sampling over
# a DATA mesh instead (the tests check the sharded loss against the unsharded one).
flags.FLAGS.set_default("num_cpu_devices", 1)
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke, gpu).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.cof_t2i import configs, train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    configs.validate(config)
    logging.info("devices: %s", jax.devices())
    if not config.seeds:
        train.run(config, COMMON.workdir.value)
        return
    common.run_seeds(config, COMMON.workdir.value, train.run,
                     metrics=lambda r: [f"arms/{a}/geneval/all/overall"
                                        for a in r["metrics"]["arms"]])


if __name__ == "__main__":
    common.run(main)
