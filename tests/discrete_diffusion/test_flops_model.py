"""FLOP counting on the unrolled forward (spec §Tests) and the backbone's token layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.discrete_diffusion import flops, model

K, L = 64, 64


@pytest.mark.parametrize("size", list(model.SIZES))
def test_unrolled_flops_match_the_analytic_count(size):
    cfg = model.model_config(size, "mdlm", K, unroll=True)
    g, p = model.init(size, "mdlm", K, 0, unroll=True)
    f = flops.forward_flops(g, p, 2, L, cfg)
    # 2 N_matmul + 4 n_layer L d per token; XLA also counts norms, softmax, GELU and the
    # adaLN maps, which add 2-8 % at these widths.
    assert f == pytest.approx(flops.analytic_flops(cfg, L), rel=0.10)


def test_scanned_count_is_rejected_and_undercounts_by_depth():
    size = "XL"  # 5 layers
    g, p = model.init(size, "mdlm", K, 0)
    cfg = model.model_config(size, "mdlm", K)
    with pytest.raises(ValueError, match="unrolled"):
        flops.forward_flops(g, p, 2, L, cfg)
    gu, pu = model.init(size, "mdlm", K, 0, unroll=True)
    ratio = flops.compiled_flops(gu, pu, 2, L) / flops.compiled_flops(g, p, 2, L)
    assert 3.5 < ratio <= 5.5  # ~ n_layer


def test_steps_for_budget_and_errors():
    assert flops.steps_for_budget(6e11, 1e6, 32) == int(6e11 // (3e6 * 32))
    with pytest.raises(ValueError, match="C > 0"):
        flops.steps_for_budget(0, 1e6, 32)


def test_layout_sizes_and_families():
    assert model.non_embedding_params("M") == 12 * 64 ** 2 * 4 == 196_608
    g, p = model.init("XS", "duo", K, 0)
    tok = jnp.full((2, L), K, jnp.int32)  # all masks
    out = model.logits_fn(g, p, tok, cond=jnp.array([0.1, 2.0]))
    assert out.shape == (2, L, K)  # mask and BOS outputs dropped
    assert model.model_config("XS", "ar", K).causal and not model.model_config(
        "XS", "duo", K).causal
    with pytest.raises(ValueError, match="family"):
        model.init("XS", "sedd", K, 0)
    with pytest.raises(ValueError, match="size"):
        model.init("XXL", "ar", K, 0)
    # Same parameter count for every family (the FLOPs match by construction).
    counts = {f: sum(np.size(x) for x in jax.tree.leaves(model.init("S", f, K, 0)[1]))
              for f in model.FAMILIES}
    assert len(set(counts.values())) == 1
