"""FML federated mechanics (spec §Tests): the vmapped round equals a per-client reference loop
with the same keys; padded and masked clients equal unpadded ones; the round on a client mesh
equals the unsharded round; round 1 uses CE only; FedProx's proximal term is active from
round 1; FedAvg weights clients by their sizes."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.fml import baselines, clients, configs, model, train

N, S = 4, 1


@pytest.fixture(scope="module")
def setup():
    c = configs.get_config("smoke")
    c.local_epochs = 1
    c.per_client = 40
    train.normalise_config(c)
    sets = train.make_data(c)
    arrays = train.stack_clients(sets, int(c.batch))
    graphdef, params = train.init_params(c)
    return c, arrays, graphdef, params


@pytest.fixture(scope="module")
def rounds(setup):
    """One jitted round per method, compiled once for the module's tests."""
    c, _, graphdef, _ = setup
    cache = {}

    def get(method):
        if method not in cache:
            spec, round_fn, _ = clients.make_round(method, c, graphdef)
            cache[method] = spec, jax.jit(round_fn)
        return cache[method]

    return get


def _args(c, arrays, spec, params, use=1.0):
    target = jax.tree.map(lambda a: a[None], clients.init_target(spec, c, N))
    return (params, target, jnp.float32(use), jnp.asarray(arrays["x"]), jnp.asarray(arrays["y"]),
            jnp.asarray(arrays["mask"]), jnp.asarray(arrays["n"]), train.round_keys(c, 0, N))


def _close(a, b, tol=2e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol)


def test_vmapped_round_equals_a_per_client_loop_and_fedavg_weights_by_size(setup, rounds):
    c, arrays, graphdef, params = setup
    spec, round_jit = rounds("fedavg")
    args = _args(c, arrays, spec, params)
    new_global, _ = round_jit(*args)
    local = jax.jit(clients.local_train("fedavg", c, graphdef))
    keys = args[-1]
    outs = []
    for i in range(N):  # the reference: one client at a time, same keys
        p0 = jax.tree.map(lambda a: a[0], params)
        k = jax.random.fold_in(keys[i, 0], 0)
        outs.append(local(p0, args[3][i, 0], args[4][i, 0], args[5][i, 0], k,
                          jnp.zeros(()), jnp.float32(1.0)))
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *outs)
    ref = baselines.fedavg_aggregate(stacked, jnp.asarray(arrays["n"][:, 0]))
    _close(jax.tree.map(lambda a: a[0], new_global), ref)


def test_padded_masked_client_equals_unpadded(setup):
    """Padding rows (mask False) carry no weight: the masked CE of a padded batch has the same
    gradient as the unpadded batch (vmap needs equal client sizes, spec §Pitfalls)."""
    c, arrays, graphdef, params = setup
    p0 = jax.tree.map(lambda a: a[0], params)
    x = jnp.asarray(arrays["x"][0, 0, :20])
    y = jnp.asarray(arrays["y"][0, 0, :20])
    xp = jnp.concatenate([x, jnp.zeros_like(x[:5])])
    yp = jnp.concatenate([y, jnp.zeros_like(y[:5])])
    w = jnp.concatenate([jnp.ones(20), jnp.zeros(5)])

    def loss(p, xx, yy, ww):
        _, logits = model.forward(graphdef, p, xx)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, yy)
        return jnp.sum(ww * ce) / jnp.sum(ww)

    grad = jax.jit(jax.grad(loss))
    g1 = grad(p0, x, y, jnp.ones(20))
    g2 = grad(p0, xp, yp, w)
    _close(g1, g2, 1e-5)


def test_sharded_round_pads_rows_to_every_device_and_equals_unsharded(setup, rounds):
    """train.place: the 4 client x seed rows padded to the 8 devices, sharded; the padded rows
    are dropped before FedAvg and the summaries: the same global model and manifolds."""
    c, arrays, graphdef, params = setup
    spec, round_jit = rounds("fml")
    args = _args(c, arrays, spec, params)
    ref = round_jit(*args)
    cs = c.copy_and_resolve_references()
    cs.shard_clients = True
    placed, mesh = train.place(cs, {k: arrays[k] for k in ("x", "y", "mask", "n")})
    rows = placed["x"].shape[0]
    assert rows == 8 and len(placed["x"].sharding.device_set) == 8 == jax.device_count()
    flat = clients.make_flat_round("fml", c, graphdef, mesh)
    rep = lambda a: mesh_lib.replicate(np.asarray(a), mesh)
    got = jax.jit(lambda *a: flat(*a[:-1], jax.random.wrap_key_data(a[-1])))(
        jax.tree.map(rep, args[0]), jax.tree.map(rep, args[1]), args[2], placed["x"],
        placed["y"], placed["mask"], placed["seed"], placed["n"],
        train.place_keys(args[-1], mesh, rows))
    assert jax.tree.structure(got) == jax.tree.structure(ref)
    _close(got, ref, 5e-5)


def test_round_one_uses_ce_only_and_fedprox_differs_from_fedavg(setup, rounds):
    c, arrays, graphdef, params = setup
    outs = {}
    for method in ("fedavg", "fml", "fedprox"):
        spec, round_jit = rounds(method)
        outs[method] = round_jit(*_args(c, arrays, spec, params, use=0.0))[0]
    _close(outs["fml"], outs["fedavg"], 1e-6)  # use_target = 0: CE only, same keys
    diff = max(float(jnp.abs(a - b).max()) for a, b in zip(jax.tree.leaves(outs["fedprox"]),
                                                          jax.tree.leaves(outs["fedavg"])))
    assert diff > 0.0  # the proximal term is active from round 1


def test_unknown_method_is_rejected(setup):
    c, *_ = setup
    with pytest.raises(ValueError, match="unknown method"):
        clients.method_spec("fedbn", c)
