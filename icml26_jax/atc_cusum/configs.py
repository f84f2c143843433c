"""Configurations of the ATC experiment: ``default``, ``smoke`` and ``full``.

Use from the command line as ``--config=icml26_jax/atc_cusum/configs.py:smoke`` and override
any field with ``--config.<field>=...`` (e.g. ``--config.c=3.0``,
``--config.synthetic.runs=128``).

Constants are set once per regime, never per instance or suite: ``c`` with known sigma (all
synthetic suites), ``c_estimated_sigma`` with sigma estimated from the series (real data).
"""

from __future__ import annotations

import ml_collections

VARIANTS = ("default", "smoke", "full")
SUITES = ("synthetic", "selective", "staircase", "square", "real", "csv")
WINDOWS = (10, 30, 100, 300, 1000)
GAMMAS = (0.8, 0.9, 0.95, 0.97, 0.99, 0.997, 0.999)
REAL_WINDOWS = (2, 3, 5, 10, 15, 20, 30, 50, 100)
REAL_GAMMAS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 0.99)
DELTAS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0)


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """Returns the config of ``variant`` (one of ``VARIANTS``)."""
    variant = variant or "default"
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.suites = ("synthetic", "selective", "staircase", "square", "real")
    c.sigma = 1.0  # noise scale of every synthetic suite (known to the learners)
    c.c = 3.0  # ATC threshold constant with known sigma
    c.c_estimated_sigma = 4.0  # ... and with sigma estimated from the series (real data)
    c.restart = "argmax"
    c.scan = "geom"
    c.ratio = 1.25
    c.csv_glob = ""  # user-supplied series (e.g. NAB realAWSCloudwatch/*.csv): suite "csv"
    c.csv_value_col = "value"
    c.csv_time_col = "timestamp"

    # G1 random jumps; held-out tuning of window / discount on tune_runs disjoint instances.
    c.synthetic = dict(S=(0, 4, 16), T=(1000, 4000, 16000), runs=64, tune_runs=64,
                       prefix_every=250, windows=WINDOWS, gammas=GAMMAS, delta=0.01,
                       page_k=0.25, page_h=8.0, page_M=50,
                       peers_runs=16, peers_T=16000, peers_S=(0, 4, 16))
    # G2 single change at T/2, the same noise for every Delta.
    c.selective = dict(T=16000, runs=256, deltas=DELTAS, window=300)
    # G3 staircase (steps of 0.25 every 200).
    c.staircase = dict(T=(2000, 8000, 32000), runs=64, tune_runs=64, windows=WINDOWS)
    # G4 square wave (period 400): the documented losing case.
    c.square = dict(T=(8000, 32000), runs=64, tune_runs=64, cs=(2.0, 3.0, 4.0),
                    windows=WINDOWS, gammas=GAMMAS)
    c.real = dict(windows=REAL_WINDOWS, gammas=REAL_GAMMAS, burn_in=5,
                  realint_start="1961Q1", realint_end="1986Q3")

    if variant == "smoke":
        c.synthetic.update(S=(0, 4), T=(500, 2000), runs=16, tune_runs=16, peers_runs=2,
                           peers_T=2000, peers_S=(0, 4))
        c.selective.update(T=4000, runs=64, deltas=(0.0, 0.05, 0.5, 2.0))
        c.staircase.update(T=(2000, 4000), runs=16, tune_runs=16)
        c.square.update(T=(8000,), runs=16, tune_runs=16)
    elif variant == "full":
        c.synthetic.update(S=(0, 4, 16, 64), T=(1000, 4000, 16000, 64000), runs=128,
                           tune_runs=128, peers_S=(0, 4, 16, 64))
    return c
