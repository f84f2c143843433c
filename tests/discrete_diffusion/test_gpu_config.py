"""The ``gpu`` variant (issue 43): the spec's full grid as a valid config, planned at <= 20 min
on one H100 from the FLOPs of its real training chunk, and its largest model trains for 2 steps
on CPU through the run's own chunk program.

The plan is an upper bound from ONE lowering (``core.timing.step_flops`` on
``train._train_chunk_hmm``, one step, lowered, not compiled): every group is charged the
per-replica FLOPs of the largest size (XL) times its replicas, and the steps of a group are
computed from 0.9 x the analytic F_fwd, below the XLA count that sets the real steps
(``test_flops_model`` keeps that count within 10 % of the analytic one), so no group gets fewer
steps here than in the run. Measured per size, the same sum is 408 s (README).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core import timing
from icml26_jax.discrete_diffusion import configs, data, flops, train
from icml26_jax.discrete_diffusion import model as model_lib
from icml26_jax.lm import hmm as hmm_lib
from tests.compile_passes import module_fixture

_few_passes = module_fixture()

# Compiling ~92 training chunk programs, ~25 validation and <= 68 sampler programs (assumed
# ~2 s each on the device: ~6 min), 232 checkpoints, the floor H (2e4 sequences scored on the
# host) and the Pareto sampling (FLOPs < 1 % of training's). An assumption until a device run.
EVAL_ALLOWANCE_S = 8 * 60.0


@pytest.fixture(scope="module")
def gpu():
    c = configs.get_config("gpu")
    train.normalise_config(c)
    return c


def test_gpu_config_is_valid_and_runs_the_full_grid(gpu):
    c = gpu
    train.validate_config(c)
    full, default = configs.get_config("full"), configs.get_config("default")
    train.normalise_config(full)
    for k in ("budgets", "sizes", "families", "mdlm_seeds", "pair_seeds_budget", "pair_seeds",
              "batch", "length", "lr", "min_steps", "val_size", "sample_steps"):
        assert c[k] == full[k], k
    assert len(c.budgets) >= 3 and max(c.budgets) > default.budgets[0]
    assert c.hmm.to_dict() == default.hmm.to_dict() and c.chunk == 1000


def _abstract_chunk(c, size, family, R, n):
    """``(static, abstract args)`` of ``train._train_chunk_hmm`` for R replicas and n steps."""
    K, B, L = train.vocab_size(c), int(c.batch), int(c.length)
    # The unrolled model: XLA's cost analysis counts a scanned layer body once.
    g, p = jax.eval_shape(lambda: model_lib.init(size, family, K, 0, unroll=True))
    static = (family, g, train.hyper(c, 1000), n, B, L)
    stack = lambda x: jax.ShapeDtypeStruct((R,) + x.shape, x.dtype)  # noqa: E731
    params = jax.tree.map(stack, p)
    opt = jax.eval_shape(jax.vmap(lambda q: train._init_opt(static[:3], q)), params)
    lang = jax.tree.map(lambda a: jax.ShapeDtypeStruct((R,) + a.shape, jnp.float32),
                        data.make_language())
    i32, flag = jax.ShapeDtypeStruct((R,), jnp.int32), jax.ShapeDtypeStruct((R,), jnp.bool_)
    return static, (params, opt, i32, flag, i32, lang)


def test_gpu_run_is_planned_within_20_minutes_on_one_h100(gpu):
    c = gpu
    static, args = _abstract_chunk(c, "XL", "mdlm", 2, 1)
    # One step of the MDLM pair at XL (2 replicas vmapped, as one device runs them).
    f_pair = timing.step_flops(jax.vmap(functools.partial(train._train_chunk_hmm, static)),
                               *args)
    f_fwd_xl = flops.analytic_flops(model_lib.model_config("XL", "mdlm", 64, unroll=True), 64)
    # Forward + backward = 3 F_fwd per sequence, within 10 % (the optimiser and sampler add
    # little): the count covers the whole step, every layer.
    assert f_pair == pytest.approx(2 * 3 * f_fwd_xl * int(c.batch), rel=0.1)
    f_replica = f_pair / 2
    low = {s: 0.9 * flops.analytic_flops(model_lib.model_config(s, "mdlm", 64, unroll=True),
                                          int(c.length)) for s in c.sizes}
    groups = train.groups(c, low)
    assert {g.family for g in groups} == {"mdlm", "ar", "duo", "esolm"}
    assert max(len(g.seeds) for g in groups) == 6  # the pair's 3 seeds at 1e12
    train_s = sum(timing.h100_seconds(len(g.seeds) * f_replica, g.steps) for g in groups)
    assert train_s + EVAL_ALLOWANCE_S <= 20 * 60, (train_s, len(groups))


def test_gpu_models_train_two_steps_on_cpu(gpu):
    """Two steps of the MDLM pair (NELBO and low-var objectives, a traced flag) at XL, the
    largest gpu size, batch 2 x 64, through ``train._train_chunk_hmm`` as ``train_group`` runs
    it (batches drawn inside): finite losses and moved parameters (step 0 has learning rate 0
    under the warm-up, step 1 moves them)."""
    c = configs.get_config("gpu")
    c.batch = 2
    K, R = train.vocab_size(c), 2
    ps = [model_lib.init("XL", "mdlm", K, s)[1] for s in (0, 0)]
    graphdef = model_lib.init("XL", "mdlm", K, 0)[0]
    params = jax.tree.map(lambda *x: np.stack([np.asarray(a) for a in x]), *ps)
    static = ("mdlm", graphdef, train.hyper(c, 1000))
    mesh = mesh_lib.runs_mesh(R)
    opt = mesh_lib.map_runs(mesh, train._init_opt, static, params)
    lang = jax.tree.map(lambda a: np.stack([np.asarray(a)] * R),
                        hmm_lib.device_hmm(train.language(c)))
    new, _, loss = mesh_lib.map_runs(
        mesh, train._train_chunk_hmm, static + (2, int(c.batch), int(c.length)), params, opt,
        np.zeros((R,), np.int32), np.array([False, True]), np.zeros((R,), np.int32), lang)
    loss = mesh_lib.to_host(loss, R)
    assert loss.shape == (R, 2) and np.all(np.isfinite(loss))
    # Same init, data and (t, mask): the objectives differ by the weight only (1/t vs 1).
    assert loss[0, 0] != loss[1, 0]
    new = mesh_lib.to_host(new, R)
    moved = [not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(params),
                                                      jax.tree.leaves(new))]
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(new)) and any(moved)
