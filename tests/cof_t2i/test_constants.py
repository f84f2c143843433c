"""Issue 43: no jitted training or evaluation step of the CoF-T2I run embeds a large constant.

An array a step closes over instead of taking as an argument is baked into its program: the
program grows with the pool and recompiles for a new one. Each step ``train.run`` uses is
built with ``train``'s own builders on the smoke config's pool and only lowered (nothing
trains).
"""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from icml26_jax.cof_t2i import baselines, configs, train, vae
from icml26_jax.core.testing import assert_no_large_constant as _check


@pytest.fixture(scope="module")
def smoke():
    c = configs.get_config("smoke")
    train.normalise_config(c)
    pool = train.make_pool(int(c.pool), int(c.seed))
    ae = vae.FrameAE(int(c.ae_width), rngs=nnx.Rngs(int(c.seed)))  # untrained: shapes matter
    return c, pool, ae


def test_ae_step_takes_the_pool_as_an_argument(smoke):
    c, pool, ae = smoke
    _, params, _, tx, one = train.ae_setup(c, ae, vae.ae_loss, 101)
    images = pool["frames"].reshape((-1,) + pool["frames"].shape[2:])  # as train_ae
    _check("AE step", one, (params, tx.init(params)), jnp.int32(0), images)


def test_arm_steps_and_samplers_take_their_data_as_arguments(smoke):
    c, pool, ae = smoke
    latents = jnp.asarray(train.encode_pool(ae, pool["frames"]))
    text_ids = jnp.asarray(pool["text_ids"])
    rows = train.test_metadata(int(c.prompts_per_tag))
    ids, mask = (a[: int(c.eval_batch)] for a in train.tokenize_all(rows))
    for name in c.arms:
        graphdef, params, tx, one, _ = train.arm_setup(c, name)
        _check(f"train step ({name})", one, (params, tx.init(params), params), jnp.int32(0),
               latents, text_ids)
        fn = train.make_sampler(c, graphdef, baselines.arm(name).num_frames, ae,
                                float(configs.cfg_value(c)),
                                name in train.ALL_FRAME_ARMS)
        _check(f"sampler ({name})", fn, params, ids, mask, jax.random.key(0))
