"""The optimiser of spec §Model and optimiser: AdamW on the network, Adam on the PE params.

Network weights: AdamW, lr 1e-3 with 5% linear warm-up then cosine decay, β = (0.9, 0.95),
weight decay 0.1 on matrices only (kernels and embeddings; not norms). Position-encoding
parameters (φ, ρ, ψ, c and the base-only log b) sit in their own ``optax.partition`` group:
Adam with 10x the learning rate (the same schedule) and **no** weight decay, since decay
would pull log θ -> 0, i.e. θ -> 1 rad/token. One global-norm clip (1.0) over all gradients
precedes the partition. ``frozen`` groups get ``optax.set_to_zero`` (extension with a frozen
backbone trains only the PE group).
"""

from __future__ import annotations

import dataclasses

import jax
import optax

from icml26_jax.core.optim import promotion_safe

PE_PARAMS = ("log_freq", "log_interp", "log_temp", "len_slope", "log_base")
DECAYED = ("kernel", "embedding")
LABELS = ("pe", "decay", "no_decay")


def param_name(path) -> str:
    """The parameter's attribute name: the last path entry that is not NNX's ``.value``."""
    for entry in reversed(path):
        name = str(getattr(entry, "key", getattr(entry, "name", entry)))
        if name != "value":
            return name
    return ""


def pe_param_labels(params):
    """A pytree like ``params`` of labels ``pe`` | ``decay`` | ``no_decay`` (by leaf name)."""
    def label(path, _):
        name = param_name(path)
        if name in PE_PARAMS:
            return "pe"
        return "decay" if name in DECAYED else "no_decay"

    return jax.tree_util.tree_map_with_path(label, params)


def schedule(lr: float, steps: int, warmup_frac: float = 0.05):
    """Linear warm-up over ``warmup_frac`` of ``steps`` then cosine decay to 0."""
    warm = max(1, int(round(warmup_frac * steps)))
    return optax.warmup_cosine_decay_schedule(0.0, lr, warm, max(steps, warm + 1), 0.0)


def make_optimizer(config, *, train: str = "all") -> optax.GradientTransformation:
    """The partitioned optimiser.

    Args:
      config: has ``lr``, ``pe_lr``, ``weight_decay``, ``b1``, ``b2``, ``clip``,
        ``warmup_frac`` and ``steps`` (a ``ConfigDict`` or any attribute holder).
      train: ``"all"`` (pretraining, continued pretraining) or ``"pe"`` (only the
        position-encoding parameters move; the backbone is frozen).
    """
    if train not in ("all", "pe"):
        raise ValueError(f"train={train!r}; allowed: 'all', 'pe'")
    net_sched = schedule(config.lr, config.steps, config.warmup_frac)
    pe_sched = schedule(config.pe_lr, config.steps, config.warmup_frac)
    betas = dict(b1=config.b1, b2=config.b2)
    if train == "all":
        freeze = optax.identity()
        net = {"decay": optax.adamw(net_sched, weight_decay=config.weight_decay, **betas),
               "no_decay": optax.adam(net_sched, **betas)}
    else:
        # Zeroed before the clip, so frozen weights' gradients do not shrink the PE step.
        freeze = optax.partition({"pe": optax.identity(), "decay": optax.set_to_zero(),
                                  "no_decay": optax.set_to_zero()}, pe_param_labels)
        net = {"decay": optax.set_to_zero(), "no_decay": optax.set_to_zero()}
    return promotion_safe(optax.chain(
        freeze, optax.clip_by_global_norm(config.clip),
        optax.partition({"pe": optax.adam(pe_sched, **betas), **net}, pe_param_labels)))


@dataclasses.dataclass(frozen=True)
class _Opt:
    lr: float
    pe_lr: float
    weight_decay: float
    b1: float
    b2: float
    clip: float
    warmup_frac: float
    steps: int


def dict_config(opt, *, steps: int) -> _Opt:
    """The optimiser settings of ``config.opt`` with the step count of a stage."""
    return _Opt(steps=steps, **{k: opt[k] for k in ("lr", "pe_lr", "weight_decay", "b1", "b2",
                                                    "clip", "warmup_frac")})
