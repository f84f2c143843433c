"""The base optimisers from optax and the permuted-depth control."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26_jax.grad_smoothing import baselines, transform


def _params():
    ks = jax.random.split(jax.random.key(4), 3)
    return {"blocks": {"layers": {"mlp": {"kernel": jax.random.normal(ks[0], (8, 6, 10))},
                                  "norm": {"scale": jnp.ones((8, 6))}}},
            "embed": {"embedding": jax.random.normal(ks[1], (9, 6))}}


@pytest.mark.parametrize("name", ["adamw", "sgd", "muon"])
def test_base_optimizer_is_alpha0(name):
    p = _params()
    kw = dict(weight_decay=0.05)
    ours = transform.smoothed_optimizer(name, 3e-3, alpha=0.0, adam_lr=1e-3, **kw) \
        if name == "muon" else transform.smoothed_optimizer(name, 3e-3, alpha=0.0, **kw)
    ref = baselines.base_optimizer(name, 3e-3, adam_lr=1e-3, **kw)
    so, sr, po, pr = ours.init(p), ref.init(p), p, p
    for t in range(3):
        g = jax.tree.map(lambda x: jnp.cos(x * (t + 0.7)), po)
        uo, so = ours.update(g, so, po)
        ur, sr = ref.update(g, sr, pr)
        po, pr = optax.apply_updates(po, uo), optax.apply_updates(pr, ur)
    if name == "muon":
        # optax's Muon decays Adam-branch leaves only through adam_weight_decay (0 here);
        # compare the Muon-branch kernels, where both decay.
        np.testing.assert_allclose(po["blocks"]["layers"]["mlp"]["kernel"],
                                   pr["blocks"]["layers"]["mlp"]["kernel"], atol=1e-7)
    else:
        for a, b in zip(jax.tree.leaves(po), jax.tree.leaves(pr)):
            np.testing.assert_allclose(a, b, atol=1e-7)


def test_permuted_control():
    perm = baselines.permuted_control(8, seed=0)
    assert sorted(perm.tolist()) == list(range(8))
    assert not np.any(np.abs(np.diff(perm)) == 1)  # no original neighbours stay adjacent
    np.testing.assert_array_equal(perm, baselines.permuted_control(8, seed=0))
    S = transform.smoothing_matrix(8, 0.2)
    Sp = transform.smoothing_matrix(8, 0.2, permutation=perm)
    # Same spectrum, different neighbours: block 0 mixes with blocks not at depth 1.
    np.testing.assert_allclose(np.sort(np.linalg.eigvals(Sp).real),
                               np.sort(np.linalg.eigvals(S).real), atol=1e-9)
    assert Sp[perm[0], perm[1]] > 0 and abs(perm[0] - perm[1]) != 1
    with pytest.raises(ValueError, match="depth"):
        baselines.permuted_control(1, 0)
    with pytest.raises(ValueError, match="name="):
        baselines.base_optimizer("lion", 1e-3)
