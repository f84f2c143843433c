"""The FPDA baselines (spec §Baselines and peers), implemented for real.

All learned baselines share FPDA's encoder, decoder, refiner, data, step count and seed:

* ``no_prompt`` (B0): ``FPDANet(mode="none")``: c = 0 and no evidence maps; r = 2; trained
  separately.
* ``fixed_prompt`` (B1): ``FPDANet(mode="fixed")``: one generic prompt ("a tampered image")
  gives c and one evidence map; r = 2; trained separately.
* ``all_routes`` (B2): the FPDA supernet with every group routed and r = 2 (FPM without DAPO).
* ``random_policy`` (B3): a uniform random (rho, r) per image on the supernet.
* ``best_fixed_action`` (B4): the single (rho, r) with the best mean *validation* reward on
  the supernet (all 15 x (R + 1) joint actions searched).
* ``noise_variance_map``: no learning. The local variance of the SRM residual in 8x8
  windows, as a robust z-score against the image's median (median absolute deviation); the
  mask is |z| > 3 and the image score is the mean of the top 1 % of |z|.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from icml26_jax.fpda import filters, prompts

BASELINE_R = 2  # the refinement steps of B0, B1 and B2
NOISE_WINDOW = 8
NOISE_Z = 3.0  # |z| threshold of the sanity floor
MAD_TO_SD = 1.4826


def no_prompt_config(c: ml_collections.ConfigDict) -> dict:
    """Network arguments of B0 (``FPDANet(**...)``)."""
    return dict(width=c.width, img_size=c.img_size, max_refine=c.max_refine, mode="none")


def fixed_prompt_config(c: ml_collections.ConfigDict) -> dict:
    """Network arguments of B1."""
    return dict(width=c.width, img_size=c.img_size, max_refine=c.max_refine, mode="fixed")


def supernet_config(c: ml_collections.ConfigDict) -> dict:
    """Network arguments of the FPDA supernet (also B2, B3, B4)."""
    return dict(width=c.width, img_size=c.img_size, max_refine=c.max_refine, mode="bank")


def all_routes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """B2's actions for n images: the all-groups route and r = 2."""
    return np.full((n,), prompts.ALL_ROUTE, np.int32), np.full((n,), BASELINE_R, np.int32)


def random_policy(n: int, num_refine: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """B3's actions: uniform route index and r per image (seeded)."""
    rng = np.random.default_rng([seed, 31337])
    return (rng.integers(0, len(prompts.ROUTES), n).astype(np.int32),
            rng.integers(0, num_refine, n).astype(np.int32))


def best_fixed_action(val_rewards: np.ndarray) -> tuple[int, int]:
    """B4: the joint action with the best mean validation reward.

    Args:
      val_rewards: ``[N_val, 15, R + 1]`` rewards of every joint action on every
        validation image.

    Returns:
      ``(route_idx, r)``.
    """
    mean = np.asarray(val_rewards).mean(0)
    route, r = np.unravel_index(int(np.argmax(mean)), mean.shape)
    return int(route), int(r)


def _local_variance(res: jax.Array, window: int) -> jax.Array:
    """Variance over ``window x window`` neighbourhoods (edge-padded), [B, S, S]."""
    lo = (window - 1) // 2
    pad = ((0, 0), (lo, window - 1 - lo), (lo, window - 1 - lo))

    def box(v):
        return jax.lax.reduce_window(jnp.pad(v, pad, mode="edge"), 0.0, jax.lax.add,
                                     (1, window, window), (1, 1, 1), "VALID") / window ** 2

    m = box(res)
    return jnp.maximum(box(res * res) - m * m, 0.0)


def noise_variance_map(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The learning-free sanity floor.

    Args:
      x: images ``[B, S, S, 3]`` in [0, 1].

    Returns:
      ``(mask_logits [B, S, S], score_logits [B])``: logit |z| - 3, so sigmoid > 0.5 exactly
      where |z| > 3; the score is the mean top-1 % |z| minus 3.
    """
    res = filters.srm_residual(x)  # [B, S, S, 3]
    var = jnp.mean(jnp.stack([_local_variance(res[..., k], NOISE_WINDOW) for k in range(3)]),
                   0)
    flat = var.reshape(var.shape[0], -1)
    med = jnp.median(flat, -1)[:, None, None]
    mad = jnp.median(jnp.abs(flat - med[:, :, 0]), -1)[:, None, None]
    z = jnp.abs(var - med) / (MAD_TO_SD * mad + 1e-8)
    k = max(1, int(round(0.01 * flat.shape[-1])))
    top = jax.lax.top_k(z.reshape(z.shape[0], -1), k)[0].mean(-1)
    return z - NOISE_Z, top - NOISE_Z
