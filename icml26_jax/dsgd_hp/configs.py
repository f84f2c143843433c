"""Configurations of the DSGD-HP experiment: ``default``, ``smoke`` and ``full``.

Use from the command line as ``--config=icml26_jax/dsgd_hp/configs.py:smoke`` and override
any field with ``--config.<field>=...`` (e.g. ``--config.speedup.runs=512``).
"""

from __future__ import annotations

import ml_collections

VARIANTS = ("default", "smoke", "full")
SWEEPS = ("speedup", "network", "transient", "tails", "logreg", "nonconvex", "rate_hetero")
DELTAS = (0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001)


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """Returns the config of ``variant`` (one of ``VARIANTS``)."""
    variant = variant or "default"
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.users = 64  # U: the largest n; a power of two
    c.seed = 0
    c.sweeps = ("speedup", "network", "transient", "tails", "logreg", "nonconvex")
    c.order = "atc"
    c.sigma = 1.0  # per-coordinate noise std of the quadratic
    c.dim = 10
    c.mu, c.L = 1.0, 10.0
    c.a = 2.0  # strongly convex schedule alpha_t = a / (mu (t + t0)), t0 = ceil(a L / mu)
    c.c_alpha = 1.0  # non-convex alpha = min(1/L, c_alpha sqrt(n / T))
    c.quantile = 0.9
    c.n_boot = 1000
    c.problem = "digits"  # digits problems: "digits" (scikit-learn's) or "npz" (data_path)
    c.data_path = ""  # .npz with X [N, D] and y [N] for problem="npz"
    c.tfds_data_dir = ""  # if set, digits are read through the digits_users TFDS builder

    c.speedup = dict(graph="exp", T=2000, log_every=250, runs=256, hetero=0.0)
    c.network = dict(graphs=("ring", "torus", "exp", "er", "complete"), T=2000, log_every=500,
                     runs=128, hetero=0.25)
    c.transient = dict(graphs=("ring", "exp"), divisors=(8, 4, 2), T=8000, log_every=500,
                       runs=128, hetero=0.25, tol=1.25)
    c.tails = dict(graph="exp", n=8, T=500, runs=8192, deltas=DELTAS, noises=("gauss", "heavy"))
    # runs=512, not the spec's 128: at 128 runs the q90 at n = 1 varies by +-20% between
    # seeds (measured: 6.5e-3 to 11.8e-3) and the 3-point slope's sampling sd is ~0.08, half
    # the claim's tolerance; see the paper README.
    c.logreg = dict(graph="exp", ns=(1, 4, 16), T=4000, log_every=1000, runs=512, split="iid",
                    mu=0.1)
    c.nonconvex = dict(graph="exp", ns=(1, 4, 16), T=4000, log_every=1000, eval_every=10,
                       runs=64, splits=("iid", "label_skew"))
    c.rate_hetero = dict(graphs=("exp", "complete"), n=16, T=16000, log_every=1000, runs=128,
                         hetero=1.0)

    if variant == "smoke":
        c.users = 16
        c.speedup.update(T=500, runs=128)
        c.network.update(T=500, runs=32)
        c.transient.update(divisors=(4, 2), T=2000, runs=64)
        c.tails.update(n=4, T=200, runs=2048, deltas=tuple(d for d in DELTAS if d >= 0.005))
        c.logreg.update(ns=(1, 4), T=500, log_every=250, runs=16)
        c.nonconvex.update(ns=(1, 4), T=500, log_every=250, runs=16)
    elif variant == "full":
        c.sweeps = c.sweeps + ("rate_hetero",)
        c.speedup.update(runs=1024)
        c.tails.update(n=16, T=1000, runs=16384)
        c.transient.update(T=16000)
        c.nonconvex.update(ns=(1, 4, 16, 64), runs=256)
    return c
