"""No compiled round, server step or evaluation of the smoke run embeds a large constant.

An array a step closes over instead of taking as an argument is baked into its program: the
program grows with the data and recompiles for new data. Each step is lowered (not run) with
the arguments ``train.run`` gives it at the ``smoke`` config, built by the same functions.
"""

import jax
import jax.numpy as jnp

from icml26_jax.core.testing import assert_no_large_constant as _check
from icml26_jax.fml import configs, train


def test_steps_embed_no_large_constant():
    c = configs.get_config("smoke")
    train.normalise_config(c)
    configs.validate(c)
    arrays = train.stack_clients(train.make_data(c), int(c.batch))
    graphdef, params0 = train.init_params(c)
    placed, mesh = train.place(c, {k: arrays[k] for k in ("x", "y", "mask", "n")})
    rows = placed["x"].shape[0]
    put = train.replicated(mesh)
    for method in c.methods:
        spec, round_jit, server_jit, evaluate = train.make_steps(c, method, graphdef, mesh)
        args = (jax.tree.map(put, params0), jax.tree.map(put, train.initial_target(c, spec)),
                jnp.float32(1.0), placed["x"], placed["y"], placed["mask"], placed["seed"],
                placed["n"], train.place_keys(train.round_keys(c, 0, int(c.n_clients)), mesh,
                                              rows))
        _check(f"{method} round", round_jit, *args)
        if spec.kind in ("proto", "fml"):
            summaries = jax.eval_shape(round_jit, *args)[1]
            _check(f"{method} server", server_jit, summaries,
                   train.place_keys(train.server_keys(c, 0), mesh))
        # Every domain's test set has one shape: one program evaluates them all.
        shapes = {(x.shape, y.shape): d for d, (x, y) in arrays["test"].items()}
        for d in shapes.values():
            x, y = arrays["test"][d]
            _check(f"{method} evaluate({d})", evaluate, args[0], put(x), put(y))
