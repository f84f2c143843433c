r"""MRAgent: graph memory for LLM agents, reconstructed rather than retrieved (ICML 2026).
Active reconstruction on a Cue-Tag-Content graph vs. passive retrieval (dense, BM25, PPR,
graph expansion) on SynthMem, a generated long-conversation benchmark in the LoCoMo schema.

    python experiments/mragent.py --workdir=runs/mragent
    python experiments/mragent.py --config=icml26_jax/mragent/configs.py:smoke
    python experiments/mragent.py --config.seeds=0,1,2 --workdir=runs/mragent3
    python experiments/mragent.py --config.data=locomo --config.data_path=locomo10.json
    python experiments/mragent.py --config.reasoner=openai \
        --config.llm_base_url=http://127.0.0.1:8000/v1 --config.llm_model=my-model
"""

import os

from absl import logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "mragent", "configs.py")
COMMON = common.define_flags("mragent")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke).")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    from icml26_jax.mragent import train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    train.normalise_config(config)
    train.validate_config(config)
    logging.info("devices: %s", jax.devices())
    if not config.seeds:
        train.run(config, COMMON.workdir.value)
        return
    common.run_seeds(config, COMMON.workdir.value, train.run,
                     metrics=lambda r: [f"methods/{n}/{k}" for n in ("mragent", "dense@20",
                                                                     "bm25@20", "ppr@20")
                                        if n in r["metrics"]["methods"]
                                        for k in ("em", "bridge_hard/em")])


if __name__ == "__main__":
    common.run(main)
