"""core.timing: FLOP counts from XLA's cost analysis and the H100 planning model."""

import jax
import jax.numpy as jnp
import pytest

from icml26_jax.core import timing


def test_step_flops_counts_a_matmul_and_scales_with_a_vmapped_batch():
    a = jnp.ones((64, 32))
    b = jnp.ones((32, 16))
    assert timing.step_flops(lambda x, y: x @ y, a, b) == 2 * 64 * 32 * 16
    batched = timing.step_flops(jax.vmap(lambda x, y: x @ y), jnp.stack([a] * 3),
                                jnp.stack([b] * 3))
    assert batched == 3 * 2 * 64 * 32 * 16


def test_step_flops_counts_a_scan_body_once():
    a = jnp.ones((16, 16))

    def chunk(x):
        return jax.lax.scan(lambda c, _: (c @ a, None), x, None, length=7)[0]

    one = timing.step_flops(lambda x: x @ a, a)
    # The loop counter adds a couple of scalar FLOPs; 7 iterations would be 7x.
    assert one <= timing.step_flops(chunk, a) < 1.01 * one


def test_h100_seconds_is_the_documented_formula_and_rejects_negatives():
    want = 500 * (4e12 / timing.H100_EFFECTIVE_FLOPS + timing.H100_STEP_OVERHEAD_S)
    assert timing.h100_seconds(4e12, 500) == pytest.approx(want)
    with pytest.raises(ValueError, match="flops_per_step"):
        timing.h100_seconds(-1.0, 10)


def test_alternating_medians_calls_every_function_in_rounds_after_a_warm_up():
    calls = []
    fns = [lambda: calls.append("a") or jnp.zeros(()), lambda: calls.append("b") or jnp.ones(())]
    out = timing.alternating_medians(fns, repeats=3)
    assert len(out) == 2 and all(t >= 0 for t in out)
    assert calls == ["a", "b"] * 4  # one warm-up each, then 3 alternating rounds
    with pytest.raises(ValueError, match="repeats"):
        timing.alternating_medians(fns, repeats=0)
