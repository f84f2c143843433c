"""Gossip (one multiplication by W) on a users-sharded block, inside ``jax.shard_map``.

Every function takes the local block ``Y [..., nl, d]`` of the users this device holds
(users axis second to last, global user ``i`` at local row ``i - axis_index(USERS) * nl``)
and returns ``(W Y)`` restricted to the same rows. Communication is the subject here, so it
is explicit: ``ppermute`` for circulant graphs (ring, exp), ``all_gather`` for arbitrary W,
``pmean`` for the complete graph only.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from icml26_jax.core.mesh import USERS


def _from_device_ahead(x, hops: int, n_dev: int):
    """The value of ``x`` held by the device ``hops`` positions ahead on the users axis."""
    hops %= n_dev
    if hops == 0:
        return x
    return lax.ppermute(x, USERS, perm=[(j, (j - hops) % n_dev) for j in range(n_dev)])


def shift(Y, s: int, n: int):
    """Global cyclic shift ``Z_i = Y_{(i + s) mod n}`` of a users-sharded block.

    Sends exactly the rows that change device: ``nl - r`` rows from the device ``q`` ahead
    and ``r`` rows from the device ``q + 1`` ahead, where ``(q, r) = divmod(s mod n, nl)``.
    """
    nl = Y.shape[-2]
    n_dev = n // nl
    q, r = divmod(s % n, nl)
    parts = [_from_device_ahead(Y[..., r:, :], q, n_dev)]
    if r:
        parts.append(_from_device_ahead(Y[..., :r, :], q + 1, n_dev))
    return jnp.concatenate(parts, axis=-2) if len(parts) > 1 else parts[0]


def mix_circulant(Y, offsets, weight: float, n: int):
    """``W Y`` for a circulant W with ``w_{i, i+s} = weight`` for s in ``offsets``.

    The self weight is ``1 - len(offsets) * weight`` (Metropolis–Hastings on a regular graph).
    """
    acc = (1.0 - len(offsets) * weight) * Y
    for s in offsets:
        acc = acc + weight * shift(Y, s, n)
    return acc


def mix_ring(Y, n: int):
    """Ring with weights 1/3: a halo exchange of one boundary row in each direction.

    ``shift`` by +1 and by n - 1 each move a single row between neighbouring devices.
    """
    if n < 3:
        raise ValueError(f"mix_ring needs n >= 3, got n={n}")
    return mix_circulant(Y, (1, n - 1), 1.0 / 3.0, n)


def mix_dense(Y, W_rows):
    """``W Y`` for any W: all-gather every user's row, multiply by this device's rows of W.

    Args:
      Y: [..., nl, d] local block.
      W_rows: [nl, n] this device's rows of W.
    """
    full = lax.all_gather(Y, USERS, axis=Y.ndim - 2, tiled=True)  # [..., n, d]
    return jnp.einsum("in,...nd->...id", W_rows.astype(Y.dtype), full)


def mix_complete(Y):
    """``J Y``: every user gets the global mean (the complete graph's MH weights are 1/n)."""
    mean = lax.pmean(jnp.mean(Y, axis=-2, keepdims=True), USERS)
    # pmean's result is the same on every users-device; the carry it feeds is per-device.
    return lax.pcast(jnp.broadcast_to(mean, Y.shape), (USERS,), to="varying")
