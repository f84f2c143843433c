r"""Baguan-TS training probes: how fast does the network leave the marginal plateau?

The README's "Exploration" tables come from this script. Two probes, each one training run:

* ``--probe=sinusoid``: pure sinusoids (period U(6, 24), random phase, no noise, no supports,
  K = 0), M = 64, H = 16, Adam at a constant learning rate. The network first learns the
  window's marginal (NLL ~0.9 nats with 256 bars, ~1.1 with 64) and must then find the
  periodic continuation through the patch attention; the step where the loss leaves the
  plateau is the measurement.
* ``--probe=prior``: the real training pipeline (``train.train_stage``: the synthetic prior,
  RBfcst supports, block dropping, AdamW + cosine + clipping) in 3D mode at H = 16, then the
  bar NLL and the MAE of the decoded mean on 10 x 32 held-out prior windows (another bank
  seed, all K supports and again with none), i.e. the ICL gain at equal weights.

    python experiments/baguan_ts_probe.py --probe=sinusoid --bins=256 --batch=16 --loss=nll
    python experiments/baguan_ts_probe.py --probe=prior --batch=16 --loss=nll+crps --steps=800

Prints the loss every 100 steps and writes ``<workdir>/probe.json``.
"""

import json
import os
import tempfile
import time

from absl import app, flags, logging

PROBES = ("sinusoid", "prior")
PROBE = flags.DEFINE_enum("probe", "sinusoid", PROBES, "Which probe to run.")
STEPS = flags.DEFINE_integer("steps", 1000, "Training steps.", lower_bound=1)
BATCH = flags.DEFINE_integer("batch", 16, "Batch size.", lower_bound=1)
BINS = flags.DEFINE_integer("bins", 256, "Output bars.", lower_bound=2)
D = flags.DEFINE_integer("d", 64, "Token width (layers: 3 for d >= 64, else 2; ffn 2d).")
LR = flags.DEFINE_float("lr", -1.0, "Learning rate; < 0: 1e-3 (sinusoid) or the official "
                        "heuristic (prior).")
LOSS = flags.DEFINE_enum("loss", "nll", ("nll", "crps", "nll+crps"), "Training loss.")
SEED = flags.DEFINE_integer("seed", 0, "Seed of the init and the data stream.")
WORKDIR = flags.DEFINE_string("workdir", None, "Where probe.json goes (default: a temp dir).")


def _model_cfg(model_lib):
    d = D.value
    return model_lib.ModelConfig(d=d, heads=4, layers=3 if d >= 64 else 2, ffn=2 * d,
                                 bins=BINS.value, head_hidden=2 * d)


def sinusoid_probe() -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import nnx

    from icml26_jax.baguan_ts import losses
    from icml26_jax.baguan_ts import model as model_lib
    from icml26_jax.baguan_ts.train import loss_of
    from icml26_jax.core.optim import promotion_safe

    B, S, H = BATCH.value, 64, 16
    g, p = nnx.split(model_lib.BaguanTS(_model_cfg(model_lib), rngs=nnx.Rngs(SEED.value)),
                     nnx.Param)
    tx = promotion_safe(optax.adam(LR.value if LR.value > 0 else 1e-3))
    o = tx.init(p)
    borders = losses.bar_borders(BINS.value)

    def batch(key):
        k1, k2 = jax.random.split(key)
        period = jax.random.uniform(k1, (B, 1), minval=6.0, maxval=24.0)
        phase = jax.random.uniform(k2, (B, 1), maxval=100.0)
        y = 1.4 * jnp.sin(2 * jnp.pi * (jnp.arange(S, dtype=jnp.float32)[None] + phase) / period)
        return jnp.zeros((B, 1, S, 0)), y[:, None, :, None], y[:, S - H:]

    @jax.jit
    def step(p, o, key):
        feat, targ, lab = batch(key)

        def lf(p):
            lg = nnx.merge(g, p)(feat, targ, jnp.zeros((B, 1), bool), None, H=H)
            return loss_of(LOSS.value, lg, lab, borders), jnp.mean(
                losses.bar_nll(lg, lab, borders))

        (v, nll), gr = jax.value_and_grad(lf, has_aux=True)(p)
        u, o = tx.update(gr, o, p)
        return optax.apply_updates(p, u), o, nll

    key = jax.random.key(SEED.value)
    nll = np.zeros(STEPS.value)
    for s in range(STEPS.value):
        p, o, v = step(p, o, jax.random.fold_in(key, s))
        nll[s] = float(v)
        if (s + 1) % 100 == 0:
            logging.info("step %d: NLL %.3f", s + 1, nll[s - 99:s + 1].mean())
    per100 = [float(nll[i:i + 100].mean()) for i in range(0, STEPS.value, 100)]
    plateau = float(np.median(nll[100:300])) if STEPS.value >= 300 else float("nan")
    # Left the plateau: the first step whose trailing 50-step mean is 0.1 nats below it.
    smooth = np.convolve(nll, np.ones(50) / 50, mode="valid")  # smooth[i] = mean nll[i:i+50]
    left = np.flatnonzero(smooth[100:] < plateau - 0.1)
    return {"nll_per_100": per100, "plateau_nll": plateau,
            "final_nll": float(nll[-50:].mean()),
            "escape_step": int(100 + left[0] + 49) if left.size else None}


def prior_probe() -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from icml26_jax.baguan_ts import batches, configs, losses, prior, train

    c = configs.get_config("default")
    train.normalise_config(c)
    c.train.frac_2d, c.train.batch, c.model.bins = 0.0, BATCH.value, BINS.value
    c.model.d, c.model.ffn, c.model.head_hidden = D.value, 2 * D.value, 2 * D.value
    c.model.layers = 3 if D.value >= 64 else 2
    c.train.lr, c.loss, c.train.horizons = LR.value, LOSS.value, (16,)
    c.train.trunk_steps = c.train.chunk = STEPS.value
    bank = train.bank_to_device(prior.make_bank(3, 1024, train.prior_config(c)))
    vbank = train.bank_to_device(prior.make_bank(99, 256, train.prior_config(c)))
    g, p = train.build(c, False, SEED.value)
    n = sum(int(np.size(x)) for x in jax.tree.leaves(p))
    p, loss = train.train_stage(c, "trunk", tempfile.mkdtemp(), bank, p, g, steps=STEPS.value,
                                trunk=True, co_inject_p=0.0,
                                key_base=jax.random.key(SEED.value), n_params=n)
    bcfg = batches.BatchConfig(batch=32, M=int(c.M), K=int(c.K), period=int(c.period),
                               context_len=int(c.context_len), drop_p=0.0, p_k0=0.0)
    borders = losses.bar_borders(BINS.value)

    @jax.jit
    def ev(p, key):
        b = batches.make_batch(key, vbank, bcfg, 16)
        m = nnx.merge(g, p)
        out = []
        for sm in (b.support_mask, jnp.zeros_like(b.support_mask)):
            lg = m(b.feat, b.targ, sm, b.sims, H=16, feat_mask=b.feat_mask)
            out += [jnp.mean(losses.bar_nll(lg, b.labels, borders)),
                    jnp.mean(jnp.abs(losses.decode_mean(lg, borders) - b.labels))]
        return jnp.stack(out)

    r = np.mean([np.asarray(ev(p, jax.random.key(5000 + i))) for i in range(10)], axis=0)
    return {"loss_per_100": [float(loss[i:i + 100].mean()) for i in range(0, STEPS.value, 100)],
            "val_nll_K": float(r[0]), "val_mae_K": float(r[1]), "val_nll_K0": float(r[2]),
            "val_mae_K0": float(r[3])}


def main(argv):
    if len(argv) > 1:
        raise ValueError(f"unexpected positional arguments {argv[1:]}: every option is a --flag")
    import jax

    jax.config.update("jax_num_cpu_devices", 1)
    t0 = time.time()
    out = sinusoid_probe() if PROBE.value == "sinusoid" else prior_probe()
    out.update(probe=PROBE.value, steps=STEPS.value, batch=BATCH.value, bins=BINS.value,
               d=D.value, lr=LR.value, loss=LOSS.value, seed=SEED.value,
               seconds=time.time() - t0)
    workdir = WORKDIR.value or tempfile.mkdtemp(prefix="baguan_probe_")
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "probe.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out))


if __name__ == "__main__":
    app.run(main)
