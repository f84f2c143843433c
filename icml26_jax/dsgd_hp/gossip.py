"""Gossip (one multiplication by W) on a users-sharded block, inside ``jax.shard_map``.

Every function takes the local block ``Y [..., nl, d]`` of the users this device holds
(users axis second to last, global user ``i`` at local row ``i - axis_index(USERS) * nl``)
and returns ``(W Y)`` restricted to the same rows. Communication is the subject here, so it
is explicit: ``ppermute`` for circulant graphs (ring, exp), ``all_gather`` for arbitrary W,
``pmean`` for the complete graph only.

Mixing by cyclic shifts is split in two so that several graphs (and several offsets of one
graph) share collectives: ``circulant_needs`` lists, per device hop, the rows another device
must send; ``halo_exchange`` does one ``ppermute`` per hop; ``circulant_mix`` (ring, exp) and
``torus_mix`` (a 2-D grid is cyclic shifts with a column mask) assemble ``W Y``.
"""

from __future__ import annotations

from collections.abc import Iterable

import jax.numpy as jnp
from jax import lax

from icml26_jax.core.mesh import USERS

Needs = dict[int, tuple[int, int]]  # device hop -> rows [lo, hi) of that device's block


def circulant_needs(offsets: Iterable[int], n: int, nl: int) -> Needs:
    """Rows each device must receive for the cyclic shifts ``Z_i = Y_{(i + s) mod n}``.

    With ``(q, r) = divmod(s mod n, nl)``, shift s takes rows ``[r, nl)`` of the device q
    ahead and rows ``[0, r)`` of the device q + 1 ahead. Hop 0 (this device) is left out.
    """
    n_dev = n // nl
    needs: Needs = {}

    def add(hop, lo, hi):
        hop %= n_dev
        if hop and hi > lo:
            old = needs.get(hop, (lo, hi))
            needs[hop] = (min(old[0], lo), max(old[1], hi))

    for s in offsets:
        q, r = divmod(s % n, nl)
        add(q, r, nl)
        add(q + 1, 0, r)
    return needs


def merge_needs(*needs: Needs) -> Needs:
    """The union of several ``circulant_needs`` (row ranges widened to cover all)."""
    out: Needs = {}
    for nd in needs:
        for hop, (lo, hi) in nd.items():
            old = out.get(hop, (lo, hi))
            out[hop] = (min(old[0], lo), max(old[1], hi))
    return out


def halo_exchange(Y, needs: Needs, n_dev: int) -> dict[int, tuple[int, object]]:
    """One ``ppermute`` per hop: ``{hop: (lo, rows [lo, hi) of the device hop ahead)}``."""
    out = {}
    for hop, (lo, hi) in sorted(needs.items()):
        perm = [(j, (j - hop) % n_dev) for j in range(n_dev)]
        out[hop] = (lo, lax.ppermute(Y[..., lo:hi, :], USERS, perm=perm))
    return out


def _shifted(Y, halo, s: int, n: int):
    """``Z_i = Y_{(i + s) mod n}`` from the local block and the received halo rows."""
    nl = Y.shape[-2]
    n_dev = n // nl

    def rows(hop, lo, hi):  # rows [lo, hi) of the block of the device `hop` ahead
        hop %= n_dev
        if hop == 0:
            return Y[..., lo:hi, :]
        start, block = halo[hop]
        return block[..., lo - start:hi - start, :]

    q, r = divmod(s % n, nl)
    if not r:
        return rows(q, 0, nl)
    return jnp.concatenate([rows(q, r, nl), rows(q + 1, 0, r)], axis=-2)


def circulant_mix(Y, halo, offsets, weight: float, n: int):
    """``W Y`` for a circulant W with ``w_{i, i+s} = weight`` for s in ``offsets`` and self
    weight ``1 - len(offsets) * weight`` (Metropolis–Hastings on a regular graph).

    Args:
      Y: [..., nl, d] local block.
      halo: ``halo_exchange`` output covering ``circulant_needs(offsets, n, nl)``, with the
        same leading dimensions as Y.
    """
    acc = (1.0 - len(offsets) * weight) * Y
    for s in offsets:
        acc = acc + weight * _shifted(Y, halo, s, n)
    return acc


def torus_offsets(r: int, c: int) -> tuple[int, ...]:
    """The cyclic shifts an r x c torus (row-major users) is made of: +-c between rows, and
    +-1 within a row with the wrap-around shifts 1 - c and c - 1 at the row ends."""
    n = r * c
    return tuple(sorted({c % n, -c % n, 1, n - 1, (1 - c) % n, c - 1}))


def torus_mix(Y, halo, uid, shape: tuple[int, int], weight: float):
    """``W Y`` on an r x c wrap-around grid (degree 4, MH weight ``weight`` per edge).

    The up/down neighbours are global cyclic shifts by +-c; the left/right neighbours are
    shifts by -+1, except in the first/last column, where they wrap within the row (shifts
    by c - 1 and 1 - c). Communication: the halo of ``circulant_needs(torus_offsets(r, c))``.

    Args:
      Y: [..., nl, d] local block; uid: [nl] global ids of its users.
    """
    r, c = shape
    n = r * c
    sh = lambda s: _shifted(Y, halo, s, n)
    col = (uid % c)[:, None]  # [nl, 1]
    right = jnp.where(col == c - 1, sh(1 - c), sh(1))
    left = jnp.where(col == 0, sh(c - 1), sh(-1))
    return (1.0 - 4 * weight) * Y + weight * (sh(c) + sh(-c) + right + left)


def mix_circulant(Y, offsets, weight: float, n: int):
    """``W Y`` for one circulant graph (one ``ppermute`` per distinct device hop)."""
    nl = Y.shape[-2]
    halo = halo_exchange(Y, circulant_needs(offsets, n, nl), n // nl)
    return circulant_mix(Y, halo, offsets, weight, n)


def shift(Y, s: int, n: int):
    """Global cyclic shift ``Z_i = Y_{(i + s) mod n}`` of a users-sharded block."""
    return mix_circulant(Y, (s,), 1.0, n)


def mix_ring(Y, n: int):
    """Ring with weights 1/3: a halo exchange of one boundary row in each direction."""
    if n < 3:
        raise ValueError(f"mix_ring needs n >= 3, got n={n}")
    return mix_circulant(Y, (1, n - 1), 1.0 / 3.0, n)


def mix_dense(Y, W_rows):
    """``W Y`` for any W: all-gather every user's row, multiply by this device's rows of W.

    Args:
      Y: [..., nl, d] local block.
      W_rows: [nl, n] this device's rows of W (or [..., nl, n] matching Y's leading dims).
    """
    full = lax.all_gather(Y, USERS, axis=Y.ndim - 2, tiled=True)  # [..., n, d]
    return jnp.einsum("...in,...nd->...id", W_rows.astype(Y.dtype), full)


def mix_complete(Y):
    """``J Y``: every user gets the global mean (the complete graph's MH weights are 1/n)."""
    mean = lax.pmean(jnp.mean(Y, axis=-2, keepdims=True), USERS)
    # pmean's result is the same on every users-device; the carry it feeds is per-device.
    return lax.pcast(jnp.broadcast_to(mean, Y.shape), (USERS,), to="varying")
