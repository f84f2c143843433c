"""No compiled training or forecasting step of the smoke run embeds a large constant.

An array a step closes over instead of taking as an argument is baked into its program: the
program grows with the data and recompiles for new data. Each step is lowered (not run) with
the arguments ``train.run`` gives it at the ``smoke`` config, built by the same functions.
"""

import dataclasses

import jax
import pytest

from icml26_jax.baguan_ts import configs, evaluate, predict, prior, train
from icml26_jax.baguan_ts import model as model_lib
from icml26_jax.core.testing import assert_no_large_constant as _check


@pytest.fixture(scope="module")
def smoke():
    c = configs.get_config("smoke")
    train.normalise_config(c)
    train.validate_config(c)
    graphdef, params = train.build(c, False, int(c.seed))
    return c, graphdef, params


def test_train_step_embeds_no_large_constant(smoke):
    c, graphdef, params = smoke
    bank = train.bank_to_device(prior.make_bank(int(c.seed), int(c.bank_size),
                                                train.prior_config(c)))
    steps = int(c.train.trunk_steps)
    tx = train.make_tx(c, steps, model_lib.count_params(params))
    # The trunk's step plans (branch steps are the same function at co_inject_p > 0).
    plans = {train.step_plan(c, s, True) for s in range(steps)}
    plans |= {train.step_plan(c, s, False) for s in range(len(c.train.horizons))}
    for co in sorted({0.0, float(c.co_inject_p)}):
        for H, mode in sorted(plans):
            _check(f"train_step(H={H}, mode={mode}, co_inject_p={co})", train.train_step,
                   graphdef, params, tx.init(params), bank, jax.random.key(0), tx=tx,
                   bcfg=train.batch_config(c, co), H=H, mode=mode, loss=str(c.loss))


def test_forecast_embeds_no_large_constant(smoke):
    c, graphdef, params = smoke
    syn, real = evaluate.eval_sets(c)
    icfg = train.inference_config(c)
    cfgs = {"baguan": icfg} | {name: dataclasses.replace(icfg, **evaluate.ABLATIONS[name])
                               for name in evaluate.SMOKE_ABLATIONS}
    key = jax.random.key(0)
    for name, cfg0 in cfgs.items():
        for tasks in (syn, real):
            for _, series, H, cfg, ms in evaluate.forecast_groups(tasks, cfg0):
                L, args = predict.forecast_inputs(series, H, cfg, key, m=ms)
                _check(f"_forecast_many({name}, L={L}, H={H})", predict._forecast_many,
                       graphdef, params, *args, L=L, H=int(H), icfg=cfg)
