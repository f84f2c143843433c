"""Samplers with the perfect denoiser of a product distribution reproduce its marginals for
any number of steps (spec §Tests), and AR with a KV cache equals full recomputation."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from icml26_jax.discrete_diffusion import model, samplers
from tests.compile_passes import module_fixture


# Tiny models run for a few steps: compiled with few XLA passes (tests/compile_passes.py).
_few_passes = module_fixture()

K, L, N = 6, 8, 4096
P = np.random.default_rng(3).dirichlet(np.ones(K), size=L).astype(np.float32)  # [L, K]


def _chi2_pvalue(x):
    counts = np.stack([np.bincount(x[:, pos], minlength=K) for pos in range(L)])  # [L, K]
    chi2 = float(np.sum((counts - N * P) ** 2 / (N * P)))
    return stats.chi2.sf(chi2, df=L * (K - 1))


def _product_probs(z, sigma):
    return jnp.broadcast_to(jnp.asarray(P), z.shape + (K,))


def _product_step(cache, tokens, positions, keep):
    return jnp.asarray(P)[positions], cache


@pytest.mark.parametrize("T", [1, 4, 16])
@pytest.mark.parametrize("family", ["mdlm", "duo", "esolm"])
def test_perfect_product_denoiser_gives_the_marginals(family, T):
    key = jax.random.key(T)
    if family == "mdlm":
        fn = functools.partial(samplers.mdlm_sample_with, _product_probs)
        x = jax.jit(fn, static_argnums=(1, 2, 3, 4))(key, N, L, T, K)
    elif family == "duo":
        fn = functools.partial(samplers.duo_sample_with, _product_probs)
        x = jax.jit(fn, static_argnums=(1, 2, 3, 4))(key, N, L, T, K)
    else:  # chunks of L / T tokens: T = 16 > L becomes one token per call (T = L)
        x = samplers.esolm_sample_with(_product_step, jnp.zeros(()), key, N, L, min(T, L), K)
    x = np.asarray(x)
    assert x.min() >= 0 and x.max() < K  # never the mask
    assert _chi2_pvalue(x) > 0.01


def test_ar_kv_cache_equals_full_recomputation_and_model_samplers_run():
    g, p = model.init("XS", "ar", K, 0)
    key = jax.random.key(0)
    cached = samplers.ar_sample(g, p, key, 4, L)
    full = samplers.ar_sample(g, p, key, 4, L, use_cache=False)
    np.testing.assert_array_equal(cached, full)
    for fam, fn in (("mdlm", samplers.mdlm_sample), ("duo", samplers.duo_sample),
                    ("esolm", samplers.esolm_sample)):
        g, p = model.init("XS", fam, K, 0)
        x = np.asarray(fn(g, p, key, 3, L, 4))
        assert x.shape == (3, L) and x.min() >= 0 and x.max() < K, fam
    with pytest.raises(ValueError, match="multiple"):
        samplers.esolm_sample_with(_product_step, None, key, 2, L, 3, K)
