"""No jitted training or evaluation program of the smoke run (and T3's, which draws its
batches from the HMM inside) embeds a large constant: the models, batches and HMM go in as jit
arguments (a closed-over array is baked into the program, which then grows with the data and
recompiles for new data)."""

import jax
import numpy as np

from icml26_jax.adarope import baselines, configs, optim, train
from icml26_jax.core.testing import assert_no_large_constant as _check
from icml26_jax.lm import hmm as hmm_lib


def test_train_and_eval_programs_embed_no_large_constant():
    c = configs.get_config("smoke")
    seeds = [c.seed + i for i in range(c.num_seeds)]
    S = len(seeds)
    # Stage A, as train.run builds it: every arm x seed stacked, one chunk of batches.
    cfgs = [train.rope_config(c, a) for a in c.arms for _ in seeds]
    index = np.array([i % S for i in range(len(cfgs))])
    g, params, rest = train.build(c, cfgs, [seeds[i] for i in index])
    opt = optim.make_optimizer(train.dict_config(c.opt, steps=c.steps), train="all")
    batches = train._pretrain_batches(c, seeds, index)(0, c.chunk)
    _check("stage A _train_program", train._train_program(g, opt, tie_layers=False), params,
           rest, jax.vmap(opt.init)(params), batches)
    # Evaluation at the longest length.
    sets = train.eval_sets(c, list(c.eval_lens))
    data = sets[f"len_{max(c.eval_lens)}"]
    b = {k: data[k][:c.eval_batch] for k in ("tokens", "targets", "mask")}
    _check("_eval_program", train._eval_program(g), params, rest, b)
    # Stage B: the trained extension arms (layer-tied gradients) on the extension batches.
    e = c.extension
    ecfgs = [train.rope_config(c, e.backbone, a) for a in e.arms for _ in seeds]
    eindex = np.array([i % S for i in range(len(ecfgs))])
    eg, eparams, erest = train.build(c, ecfgs, [seeds[i] for i in eindex])
    trained = [i for i, a in enumerate(e.arms) if a in baselines.TRAINED_EXTENSIONS]
    sel = np.array([i * S + s for i in trained for s in range(S)])
    take = lambda t: jax.tree.map(lambda x: x[sel], t)  # noqa: E731
    eopt = optim.make_optimizer(train.dict_config(c.opt, steps=e.steps), train="pe")
    ebatches = train._extension_batches(c, seeds, eindex[sel])(0, e.chunk)
    _check("stage B _train_program", train._train_program(eg, eopt, tie_layers=True),
           take(eparams), take(erest), jax.vmap(eopt.init)(take(eparams)), ebatches)
    # T3 (full, gpu): the LM program draws its batches inside; the HMM is an argument.
    stream = train._lm_batches(train.lm_language(c), seeds, index, c.train_len, c.batch_size,
                               salt=train.LM_PRETRAIN_SALT)
    lg, lparams, lrest = jax.eval_shape(lambda: train.build(
        c, cfgs, [seeds[i] for i in index], vocab_size=c.lm.vocab_size))
    _check("T3 _train_program", train._train_program(
        lg, opt, False, (stream.salt, stream.batch_size, stream.length)), lparams, lrest,
        jax.eval_shape(jax.vmap(opt.init), lparams), stream.seeds,
        hmm_lib.device_hmm(stream.hmm), train.step_indices(0, c.chunk))
