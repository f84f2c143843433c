"""Configurations of the FML experiment: ``default`` (<= 9 min on 2 CPU cores), ``smoke``
(< 60 s) and ``gpu`` (the paper's rounds and local epochs, 9 seeds; <= 20 min on one H100).

Use as ``--config=icml26_jax/fml/configs.py:default`` and override any field, e.g.
``--config.methods=fedavg,fml``, ``--config.rounds=100``, ``--config.k_m=8``,
``--config.beta_m=0``, ``--config.compression=pca``.

Every FML hyper-parameter is [R] (reconstructed from the abstract) and fixed a priori; the
baselines use their published values (FedProx mu 0.01, FPL T 0.02, SGD lr 0.01, momentum 0.9,
weight decay 1e-5).
"""

from __future__ import annotations

import ml_collections

from icml26_jax.core import flags
from icml26_jax.fml import domains

VARIANTS = ("default", "smoke", "gpu")
METHODS = ("fedavg", "fedprox", "fedproto", "fpl", "fml", "fml_k1", "fml_no_mml")
DOMAINS = tuple(domains.DOMAINS)
COMPRESSIONS = ("kmeans", "pca")


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    """Returns the config of ``variant`` (one of ``VARIANTS``)."""
    variant = variant or "default"
    if variant not in VARIANTS:
        raise ValueError(f"unknown config variant {variant!r}; allowed: {', '.join(VARIANTS)}")
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.seeds = ()  # several whole runs (run_seeds); num_seeds are vmapped inside one run
    c.num_seeds = 3  # seeds seed, seed + 1, ... (own data split, assignment, init each)
    c.methods = METHODS
    # data (spec §Data)
    c.n_clients = 10
    c.domain_counts = (3, 2, 2, 3)
    c.per_client = 100
    c.test_per_domain = 0  # 0: the whole test pool (497)
    c.label_skew = 0.0  # 0: off; > 0: Dirichlet concentration
    c.rand_assign = False
    # model
    c.channels = (16, 32)
    c.hidden = 128
    c.feat_dim = 64
    c.n_classes = 10
    c.groups = 8
    # federated optimisation (published values)
    c.rounds = 40
    c.local_epochs = 5
    c.batch = 20
    c.lr = 0.01
    c.momentum = 0.9
    c.weight_decay = 1e-5
    c.eval_every = 5
    c.final_evals = 3  # final accuracy = mean of the last 3 evaluations
    c.shard_clients = True  # client x seed rows over every device (train.place)
    # baselines
    c.prox_mu = 0.01
    c.proto_mu = 1.0
    c.fpl_temp = 0.02
    # FML [R]
    c.k_m = 4
    c.k_g = 8
    c.beta_m = 0.5
    c.tau_a = 0.1
    c.mml_iters = 1
    c.recompress = True
    c.compression = "kmeans"
    c.tau = 0.1
    c.sep_temp = 0.07
    c.lam_app = 1.0
    c.lam_sep = 1.0
    if variant == "smoke":
        c.n_clients = 4
        c.domain_counts = (1, 1, 1, 1)
        c.test_per_domain = 100
        c.methods = ("fedavg", "fml")
        c.num_seeds = 1
        c.rounds = 10
        c.eval_every = 2
    if variant == "gpu":
        # One H100, <= 20 min by core.timing's planning model (README "On an accelerator").
        # The README's default run finds FML ahead of every baseline by about one point, within
        # the 1-2-point seed noise, after 40 rounds x 5 epochs of an 80k-parameter CNN on 100
        # images per client; this moves toward the paper's protocol and resolves the noise.
        c.rounds = 100  # the paper's 100 rounds (final accuracy: rounds 90, 95, 100)
        c.local_epochs = 10  # ... of 10 local epochs
        c.per_client = 110  # 11 per class: the most the stratified split allows (pool: 119 9s)
        c.channels = (64, 128)  # 4x wider CNN (1.16 M parameters), toward the paper's ResNet-10
        c.hidden = 512  # 4x, with the channels
        # Three whole runs of 3 vmapped seeds (0-8): each run's claims keep the spec's
        # "2 of 3 seeds" reading, and the summary has 9 seeds against the 1-2-point noise.
        c.seeds = (0, 3, 6)
    return c


def validate(c: ml_collections.ConfigDict) -> None:
    """Raises ``ValueError`` naming the field for values the code does not support."""
    flags.require_positive_ints(c, ("num_seeds", "n_clients", "per_client", "hidden", "feat_dim",
                                    "n_classes", "groups", "rounds", "local_epochs", "batch",
                                    "eval_every", "final_evals", "mml_iters"))
    for name in ("k_m", "k_g"):
        if isinstance(c[name], bool) or not isinstance(c[name], int) or c[name] < 1:
            raise ValueError(f"--config.{name} must be an integer >= 1, got {c[name]!r}")
    bad = [m for m in c.methods if m not in METHODS]
    if bad or not c.methods:
        raise ValueError(f"--config.methods: unknown or empty {bad or c.methods}; allowed: "
                         f"{', '.join(METHODS)}")
    for name in ("tau", "tau_a", "sep_temp", "fpl_temp", "lr"):
        if not c[name] > 0:
            raise ValueError(f"--config.{name} must be > 0, got {c[name]}")
    if not 0.0 <= c.beta_m <= 1.0:
        raise ValueError(f"--config.beta_m must be in [0, 1], got {c.beta_m}")
    if c.compression not in COMPRESSIONS:
        raise ValueError(f"--config.compression must be one of {', '.join(COMPRESSIONS)}, got "
                         f"{c.compression!r}")
    if c.compression == "pca" and c.k_m != 5:
        raise ValueError("--config.compression=pca gives 5 anchors (mean, +-sqrt(lambda) u_1,2): "
                         f"set --config.k_m=5, got {c.k_m}")
    if len(c.domain_counts) != len(DOMAINS):
        raise ValueError(f"--config.domain_counts needs one count per domain {DOMAINS}, got "
                         f"{tuple(c.domain_counts)}")
    if not c.rand_assign:
        if c.n_clients < len(DOMAINS):
            raise ValueError(f"--config.n_clients={c.n_clients} is fewer than the {len(DOMAINS)} "
                             "domains; pass --config.rand_assign=True for random domains")
        if sum(c.domain_counts) != c.n_clients:
            raise ValueError(f"--config.domain_counts {tuple(c.domain_counts)} must sum to "
                             f"--config.n_clients={c.n_clients}")
    if c.batch > c.per_client:
        raise ValueError(f"--config.batch={c.batch} is larger than --config.per_client="
                         f"{c.per_client}")
    if c.n_clients * c.per_client > 1300:
        raise ValueError(f"--config.n_clients * per_client = {c.n_clients * c.per_client} exceeds "
                         "the 1,300-image train pool (clients are disjoint)")
    if c.label_skew < 0:
        raise ValueError(f"--config.label_skew must be >= 0 (0: off), got {c.label_skew}")
    if c.rounds < c.eval_every * c.final_evals:
        raise ValueError(f"--config.rounds={c.rounds} must allow final_evals={c.final_evals} "
                         f"evaluations every eval_every={c.eval_every} rounds")
