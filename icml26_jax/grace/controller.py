"""GRACE's adaptive Information-Bottleneck controller (spec §Method "Adaptive IB controller").

The Lagrangian relaxation of "min L_CE s.t. L_GDKD <= tau" is solved by projected dual
ascent on the distillation weight beta, once per optimizer step, with L_bar that step's
L_GDKD:

    EMA  <- d EMA + (1 - d) L_bar        (d = 0.99; the EMA starts at the first value)
    beta <- clip(beta + eta (EMA - tau), beta_min, beta_max)

so beta rises while the smoothed distillation loss exceeds the budget tau and falls once
it is met. Reconstructed defaults [R] (spec "Our defaults"): ``tau='auto'`` holds beta at
beta_0 for ``auto_steps`` = 50 steps and then sets tau = ``auto_frac`` x EMA (0.5) once,
because tau's scale depends on |V| and the task (the paper's 3.0 would pin beta at a bound
here); when ``eta`` is None it follows the rule eta = (beta_max - beta_min) / (0.25 T_q tau),
so that beta can cross its range in about a quarter of the T_q QAT steps.

The state is a NamedTuple of scalars, stored in (and checkpointed with) the train state;
:func:`ib_update` is pure and jit-safe, with the config static.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

TAU_FLOOR = 1e-8  # an automatic tau is floored here so that the eta rule stays finite
ETA_RULE_FRACTION = 0.25  # beta crosses [beta_min, beta_max] in ~25 % of the QAT steps


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def eta_rule(tau, beta_min: float, beta_max: float, qat_steps: int):
    """The [R] step size eta = (beta_max - beta_min) / (0.25 T_q tau).

    Works on Python floats and on traced arrays (``tau`` set inside a jitted step).
    """
    return (beta_max - beta_min) / (ETA_RULE_FRACTION * qat_steps * tau)


@dataclasses.dataclass(frozen=True)
class IBConfig:
    """Controller hyper-parameters (hashable: pass it as a static argument or close over it).

    Attributes:
      tau: the budget on L_GDKD, a number > 0 (dual ascent from step 0; the paper's 3.0), or
        ``'auto'`` ([R] default): beta held at ``beta_init`` for ``auto_steps`` steps, then
        tau = ``auto_frac`` x EMA at that step, set once.
      eta: the dual step size > 0, or None for :func:`eta_rule` (needs ``qat_steps``).
      beta_init: beta_0, in [beta_min, beta_max]; default 0.5.
      beta_min, beta_max: the projection interval, 0 <= beta_min < beta_max; [0.1, 1.0].
      ema_decay: d in [0, 1); 0.99.
      auto_steps: steps before the automatic tau is set (int >= 0); 50.
      auto_frac: tau = auto_frac x EMA (> 0); 0.5.
      qat_steps: T_q, the QAT step count used by the eta rule (int >= 1); required when
        ``eta`` is None.
    """

    tau: float | str = "auto"
    eta: float | None = None
    beta_init: float = 0.5
    beta_min: float = 0.1
    beta_max: float = 1.0
    ema_decay: float = 0.99
    auto_steps: int = 50
    auto_frac: float = 0.5
    qat_steps: int | None = None

    def __post_init__(self):
        if isinstance(self.tau, str):
            if self.tau != "auto":
                raise ValueError(f"tau must be a number > 0 or 'auto', got tau={self.tau!r}")
        elif not (_is_number(self.tau) and math.isfinite(self.tau) and self.tau > 0):
            raise ValueError(f"tau must be a number > 0 or 'auto', got tau={self.tau!r}")
        if self.eta is not None and not (_is_number(self.eta) and math.isfinite(self.eta)
                                         and self.eta > 0):
            raise ValueError(f"eta must be a finite number > 0 or None (the rule "
                             f"(beta_max - beta_min) / (0.25 qat_steps tau)), got "
                             f"eta={self.eta!r}")
        for name in ("beta_init", "beta_min", "beta_max", "ema_decay", "auto_frac"):
            v = getattr(self, name)
            if not (_is_number(v) and math.isfinite(v)):
                raise ValueError(f"{name} must be a finite number, got {name}={v!r}")
        if not 0 <= self.beta_min < self.beta_max:
            raise ValueError(f"need 0 <= beta_min < beta_max, got beta_min={self.beta_min}, "
                             f"beta_max={self.beta_max}")
        if not self.beta_min <= self.beta_init <= self.beta_max:
            raise ValueError(f"beta_init must lie in [beta_min, beta_max] = [{self.beta_min}, "
                             f"{self.beta_max}], got beta_init={self.beta_init}")
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"ema_decay must be in [0, 1), got ema_decay={self.ema_decay}")
        if not self.auto_frac > 0:
            raise ValueError(f"auto_frac must be > 0, got auto_frac={self.auto_frac}")
        if isinstance(self.auto_steps, bool) or not isinstance(self.auto_steps, int) \
                or self.auto_steps < 0:
            raise ValueError(f"auto_steps must be an int >= 0, got "
                             f"auto_steps={self.auto_steps!r}")
        if self.qat_steps is not None and (isinstance(self.qat_steps, bool)
                                           or not isinstance(self.qat_steps, int)
                                           or self.qat_steps < 1):
            raise ValueError(f"qat_steps must be an int >= 1 or None, got "
                             f"qat_steps={self.qat_steps!r}")
        if self.eta is None and self.qat_steps is None:
            raise ValueError("eta=None selects the rule eta = (beta_max - beta_min) / "
                             "(0.25 qat_steps tau), which needs qat_steps (an int >= 1); "
                             "pass qat_steps or a number for eta")

    @property
    def auto(self) -> bool:
        """Whether tau is set automatically."""
        return self.tau == "auto"


class IBState(NamedTuple):
    """The controller state: float32 scalars except ``count`` (int32).

    Attributes:
      beta: the current distillation weight.
      ema: the EMA of L_GDKD (meaningless while ``count`` is 0).
      tau: the budget; 0 while an automatic tau is not set yet (a set tau is >= 1e-8).
      eta: the dual step size; 0 while the rule waits for an automatic tau.
      count: the number of finite L_GDKD values absorbed (the EMA starts at the first).
    """

    beta: jax.Array
    ema: jax.Array
    tau: jax.Array
    eta: jax.Array
    count: jax.Array


def ib_init(cfg: IBConfig) -> IBState:
    """The initial state: beta = beta_0, no EMA yet, tau and eta set unless ``'auto'``."""
    if cfg.auto:
        tau = 0.0
        eta = 0.0 if cfg.eta is None else cfg.eta
    else:
        tau = float(cfg.tau)
        eta = (eta_rule(tau, cfg.beta_min, cfg.beta_max, cfg.qat_steps) if cfg.eta is None
               else cfg.eta)
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    return IBState(f32(cfg.beta_init), f32(0.0), f32(tau), f32(eta), jnp.asarray(0, jnp.int32))


def ib_update(state: IBState, gdkd, step, cfg: IBConfig) -> IBState:
    """One controller step (once per optimizer step), pure and jit-safe.

    EMA <- d EMA + (1 - d) L_bar (EMA = L_bar on the first finite value), then
    beta <- clip(beta + eta (EMA - tau), beta_min, beta_max) once tau is known. With
    ``tau='auto'``, beta is held while ``step < auto_steps``; at the first step with
    ``step >= auto_steps`` (step ``auto_steps`` itself unless that value was non-finite),
    tau = max(auto_frac x EMA, 1e-8) is set from the EMA that includes this step's value, eta
    from the rule if ``cfg.eta`` is None, and the dual ascent starts in that same step.

    A non-finite ``gdkd`` leaves the whole state unchanged (the step is skipped).

    Args:
      state: the current :class:`IBState`.
      gdkd: this step's L_GDKD (a scalar; averaged over devices by the caller's jit).
      step: the 0-based optimizer step (Python int or integer scalar array).
      cfg: the :class:`IBConfig` (static).

    Returns:
      The next :class:`IBState`.
    """
    x = jnp.asarray(gdkd)
    if x.shape != ():
        raise ValueError(f"gdkd must be a scalar, got shape {x.shape}")
    x = x.astype(jnp.float32)
    finite = jnp.isfinite(x)
    d = cfg.ema_decay
    ema = jnp.where(state.count > 0, d * state.ema + (1.0 - d) * x, x)
    if cfg.auto:
        set_now = (state.tau <= 0.0) & (jnp.asarray(step) >= cfg.auto_steps)
        tau = jnp.where(set_now, jnp.maximum(cfg.auto_frac * ema, TAU_FLOOR), state.tau)
        eta = state.eta if cfg.eta is not None else jnp.where(
            set_now, eta_rule(tau, cfg.beta_min, cfg.beta_max, cfg.qat_steps), state.eta)
        active = tau > 0.0
    else:
        tau, eta, active = state.tau, state.eta, jnp.asarray(True)
    beta = jnp.where(active, jnp.clip(state.beta + eta * (ema - tau), cfg.beta_min,
                                      cfg.beta_max), state.beta)
    new = IBState(beta, ema, tau, eta, state.count + 1)
    return jax.tree.map(lambda a, b: jnp.where(finite, a, b).astype(b.dtype), new, state)
