"""Issue 43: no jitted training or evaluation step of the SafeFlowRL run embeds a large constant.

An array a step closes over instead of taking as an argument is baked into its program: the
program grows with the dataset and recompiles for a new one. Each stage's step is built with
``stages``' own ``*_setup`` builders on the smoke config's dataset (untrained critics and
flows: only shapes matter) and only lowered, one step vmapped over the seeds
(``stages.first_step``: the body ``checkpoint.seed_loop`` scans); nothing trains.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.core.testing import MAX_CONSTANT_BYTES, assert_no_large_constant
from icml26_jax.safe_flow_rl import (baselines, configs, data, envs, evaluate, policies,
                                     stages, train)

# Each field of the smoke dataset is under 1 MiB on its own (observations: 20 000 x 11
# float32 = 0.88 MB; a per-transition scalar: 80 kB), so the 1 MiB limit would miss a
# step that closed over them. The steps' own constants are scalars and small vectors: any
# constant over 64 KiB is a dataset field.
LIMIT = 64 << 10
assert LIMIT < MAX_CONSTANT_BYTES


def _check(name, fn, *args):
    assert_no_large_constant(name, fn, *args, limit=LIMIT)


@pytest.fixture(scope="module")
def smoke():
    c = configs.get_config("smoke")
    train.normalise_config(c)
    c.num_seeds = 2  # a real seed axis (smoke trains 1)
    # The smoke run's dataset (load_or_make_dataset(seed 0) is this, cached through TFDS).
    ds = data.make_dataset(envs.EnvParams(), int(c.dataset_size), jax.random.key(int(c.seed)))
    d = stages.device_data(ds)
    assert d["rewards"].nbytes > LIMIT  # the smallest field would be caught
    cg, crit_step = stages.critic_setup(c, d, jax.random.key(1))
    return c, ds, d, cg, crit_step


def _step(name, st):
    fn, args = stages.first_step(st)
    _check(name, fn, *args)


def test_critic_step_and_weights_take_the_dataset_as_arguments(smoke):
    c, _, d, cg, st = smoke
    _step("critic step", st)
    _check("feasibility weights", stages.weights_program(c, cg), st.state.params, d)
    _check("BC-Lag scales", stages.bc_lag_scales(cg), st.state.params, d["observations"],
           d["actions"])


def test_flow_steps_take_the_dataset_as_arguments(smoke):
    c, _, d, _, _ = smoke
    w = np.ones((int(c.num_seeds), d["observations"].shape[0]), np.float32)
    _step("flow step", stages.flow_setup(c, d, w, jax.random.key(2))[1])
    _step("flow step (unweighted)", stages.flow_setup(c, d, None, jax.random.key(2), False)[1])


def test_refiner_steps_take_the_dataset_as_arguments(smoke):
    c, _, d, cg, crit = smoke
    fg, fparams = stages.init_flows(c, d["observations"].shape[1], 2, jax.random.key(2))
    # As train.fit: the sweep's entries and the unweighted-prior entry, flows per entry.
    eps = tuple(c.eps_sweep) + (float(c.latent_budget),)
    per_entry = jax.tree.map(lambda x: np.stack([np.asarray(x)] * len(eps), 1), fparams)
    _, steps = stages.refiner_setup(c, d, eps, (cg, crit.state), (fg, per_entry),
                                    jax.random.key(3), flow_per_entry=True)
    for stage, st in zip((1, 2), steps):
        _step(f"refiner stage {stage} step", st)


def test_actor_steps_take_the_dataset_as_arguments(smoke):
    c, ds, d, cg, crit = smoke
    w = np.ones((int(c.num_seeds), d["observations"].shape[0]), np.float32)
    for kind in baselines.ACTORS:
        _, st = stages.actor_setup(c, kind, d, jax.random.key(4), crit=(cg, crit.state),
                                   weights=w, safe_idx=stages.safe_episode_indices(ds))
        _step(f"actor step ({kind})", st)


def test_evaluation_programs_take_their_data_as_arguments(smoke):
    c, _, d, cg, crit = smoke
    fg, fp = stages.init_flows(c, d["observations"].shape[1], 2, jax.random.key(2))
    fp = jax.tree.map(lambda x: x[0], fp)
    cp = jax.tree.map(lambda x: x[0], crit.state.params)
    rg, rp = stages.init_refiners(c, d["observations"].shape[1], 2, jax.random.key(5), 1)
    rp = jax.tree.map(lambda x: x[0, 0], rp)
    n = 64
    s, z0 = d["observations"][:n], jnp.zeros((n, 2), jnp.float32)
    _check("budget diagnostics", train.candidate_stats((rg, fg, cg)), rp, fp, fp, cp,
           jnp.float32(0.5), s, z0)
    starts, _ = evaluate.eval_starts(jax.random.key(6), 4)
    act = policies.refined_policy(fg, rg, cg, int(c.num_candidates))
    rollout = jax.jit(evaluate.rollout, static_argnums=(0, 4))
    _check("rollout (ours)", rollout, act, (rp, fp, cp, jnp.float32(0.5), jnp.float32(0.0)),
           jax.random.key(7), starts, envs.EnvParams())
    q = evaluate.NN_QUERIES
    _check("NN action distance", evaluate._nn_seeds, d["observations"], d["actions"],
           np.zeros((2, q, d["observations"].shape[1]), np.float32),
           np.zeros((2, q, 2), np.float32), np.ones((2, q), np.float32))
