"""A tiny DSGD-HP config for tests that exercise the pipeline rather than the claims."""

from icml26_jax.dsgd_hp import configs


def tiny_config(sweeps=("speedup", "tails")):
    c = configs.get_config("smoke")
    c.sweeps = tuple(sweeps)
    c.n_boot = 50
    c.speedup.update(T=100, log_every=50, runs=16)
    c.tails.update(n=4, T=50, runs=1024, deltas=(0.5, 0.2, 0.1, 0.05, 0.02, 0.01))
    c.network.update(T=100, log_every=50, runs=16)
    c.logreg.update(ns=(1, 4), T=100, log_every=50, runs=8)
    c.nonconvex.update(ns=(1, 4), T=100, log_every=50, runs=8, splits=("iid",))
    c.rate_hetero.update(n=8, T=200, log_every=50, runs=8)
    return c
