r"""ATC: Anytime Tracking CUSUM under multiple change points (ICML 2026).

    python experiments/atc_cusum.py --config=icml26_jax/atc_cusum/configs.py:default \
        --workdir=runs/atc_cusum
    python experiments/atc_cusum.py --config=icml26_jax/atc_cusum/configs.py:smoke
    python experiments/atc_cusum.py --csv_glob='NAB/data/realAWSCloudwatch/*cpu*.csv'
"""

import os

from absl import flags, logging

from icml26_jax.core import flags as common

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "icml26_jax", "atc_cusum", "configs.py")
COMMON = common.define_flags("atc_cusum")
CONFIG = common.define_config(_CONFIGS, "Experiment config (variant "
                              "after ':', one of default, smoke, full).")
CSV_GLOB = flags.DEFINE_string("csv_glob", "", "User-supplied series (CSV with a header, "
                               "e.g. NAB realAWSCloudwatch/*.csv): adds the 'csv' suite.")


def main(argv):
    common.setup(argv, COMMON)
    import jax

    # Prefix sums over 10^4-10^5 samples need float64 (spec, Pitfall 8).
    common.require_float64("atc_cusum", "prefix sums over 10^4-10^5 samples")
    jax.config.update("jax_enable_x64", True)
    from icml26_jax.atc_cusum import train

    config = CONFIG.value
    config.seed = COMMON.seed.value
    config.suites = common.as_tuple(config.suites)  # --config.suites=synthetic,real
    if CSV_GLOB.value:
        config.csv_glob = CSV_GLOB.value
        if "csv" not in config.suites:
            config.suites = tuple(config.suites) + ("csv",)
    train.validate_config(config)
    logging.info("devices: %s", jax.devices())
    train.run(config, COMMON.workdir.value)


if __name__ == "__main__":
    common.run(main)
