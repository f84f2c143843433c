r"""AdaRoPE benchmark: learnable, recomputed angles vs RoPE with a precomputed cos/sin table.

    python benchmarks/adarope.py            # T in {64, 256, 1024}, batch 32, median of 50
    python benchmarks/adarope.py --quick    # T in {64, 256}, median of 5, < 60 s

Measured side by side in one process on the same inputs (spec adarope.md, "Benchmark"):

1. One attention layer (``lm.transformer.Attention``, d = 64, 4 heads x 16), forward +
   backward w.r.t. all its parameters, jitted: AdaRoPE (``adarope.RotaryPositional``: angles
   ``positions * exp(φ)`` recomputed every call, per-head temperature) vs standard RoPE whose
   cos/sin table ``[T, P]`` is computed once outside the step and passed in (the usual
   cached implementation). Time = median of ``--repeats`` calls after a warm-up; peak
   memory = XLA's temp + argument + output bytes of the compiled program. Target ratio
   AdaRoPE/RoPE <= 1.15 at T = 256, reported for every T.
2. Whole-model training step (the default experiment's model, batch 32, T = its L0):
   adarope vs rope arm, same optimiser. Target <= 1.10.

Prints a table and writes ``benchmarks/results/adarope.json`` (``adarope_quick.json`` with
``--quick``). Ratios are what to read; absolute times on shared CPUs are noise.
"""

import json
import os
import platform
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402
from flax import nnx  # noqa: E402

from icml26_jax.adarope import configs, optim, rope, train  # noqa: E402
from icml26_jax.core import results, timing  # noqa: E402
from icml26_jax.lm import train as lm_train  # noqa: E402
from icml26_jax.lm.transformer import Attention, TransformerConfig  # noqa: E402

QUICK = flags.DEFINE_bool("quick", False, "T in {64, 256}, 5 repeats: a < 60 s smoke run.")
REPEATS = flags.DEFINE_integer("repeats", 50, "Timed calls per case (median reported).")


class CachedRope(nnx.Module):
    """RoPE reading a precomputed ``(cos, sin)`` table ``[T, P]`` (no parameters)."""

    def __init__(self, table):
        # Non-trainable state: passed to the jitted step as an input, computed once.
        self.cos, self.sin = nnx.Variable(table[0]), nnx.Variable(table[1])

    def __call__(self, q, k, positions):
        cos, sin = self.cos[...], self.sin[...]
        angles_cos, angles_sin = cos[positions][:, :, None], sin[positions][:, :, None]

        def rot(x):
            xf = x.reshape(*x.shape[:-1], -1, 2)
            x1, x2 = xf[..., 0], xf[..., 1]
            out = jnp.stack([x1 * angles_cos - x2 * angles_sin,
                             x1 * angles_sin + x2 * angles_cos], -1)
            return out.reshape(x.shape)

        return rot(q), rot(k)


def _peak_bytes(fn, args) -> int:
    mem = fn.lower(*args).compile().memory_analysis()
    if mem is None:
        return -1
    return int(mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes)


def attention_case(T: int, repeats: int, B: int = 32) -> dict:
    cfg = TransformerConfig(vocab_size=64, d_model=64, num_layers=2, num_heads=4)
    x = jax.random.normal(jax.random.key(0), (B, T, 64))
    pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    inv = 100.0 ** (-jnp.arange(0, 16, 2, dtype=jnp.float32) / 16)
    ang = jnp.arange(T, dtype=jnp.float32)[:, None] * inv
    table = (jnp.cos(ang), jnp.sin(ang))
    rc = rope.RopeConfig(kind="adarope", head_dim=16, num_heads=4, base=100.0, train_len=64)
    out = {}
    for name, factory in (("adarope", rope.make_factory(rc)),
                          ("rope_cached", lambda rngs: CachedRope(table))):
        layer = Attention(cfg, rngs=nnx.Rngs(0), position_encoder_factory=factory)
        g, params, rest = nnx.split(layer, nnx.Param, ...)

        def loss(p, rest, x, g=g):
            y, _ = nnx.merge(g, p, rest)(x, pos, None)
            return jnp.mean(jnp.square(y))

        fn = jax.jit(jax.value_and_grad(loss))
        args = (params, rest, x)
        if name == "adarope":  # the PE parameters really get gradients
            gr = fn(*args)[1]["pos"]["log_freq"][...]
            assert float(jnp.abs(gr).max()) > 0
        out[name] = {"time_s": timing.median_seconds(fn, *args, repeats=repeats),
                     "peak_bytes": _peak_bytes(fn, args)}
    out["ratio"] = out["adarope"]["time_s"] / out["rope_cached"]["time_s"]
    out["memory_ratio"] = out["adarope"]["peak_bytes"] / max(out["rope_cached"]["peak_bytes"], 1)
    return out


def model_step_case(repeats: int) -> dict:
    c = configs.get_config("default")
    out = {}
    for arm in ("adarope", "rope"):
        g, p, r = train.build(c, [train.rope_config(c, arm)], [0])
        p, r = jax.tree.map(lambda x: x[0], p), jax.tree.map(lambda x: x[0], r)
        opt = optim.make_optimizer(train.dict_config(c.opt, steps=c.steps))
        step = jax.jit(lm_train.make_train_step(g, opt))
        o = opt.init(p)
        b = train._mqar(c, np.random.default_rng(0), c.batch_size, c.train_len)
        b = {k: b[k] for k in ("tokens", "targets", "mask")}
        out[arm] = {"time_s": timing.median_seconds(lambda p, o: step(p, r, o, b), p, o,
                                                    repeats=repeats)}
    out["ratio"] = out["adarope"]["time_s"] / out["rope"]["time_s"]
    out["length"] = c.train_len
    return out


def main(argv):
    del argv
    quick = QUICK.value
    repeats = 5 if quick else REPEATS.value
    lens = (64, 256) if quick else (64, 256, 1024)
    res = {"attention": {}, "config": {"batch": 32, "repeats": repeats, "lens": list(lens)}}
    rows = []
    for T in lens:
        r = attention_case(T, repeats)
        res["attention"][str(T)] = r
        rows.append([T, 1e3 * r["adarope"]["time_s"], 1e3 * r["rope_cached"]["time_s"],
                     r["ratio"], r["memory_ratio"]])
    print(results.format_table(rows, ["T", "adarope ms", "rope(cached) ms", "time ratio",
                                      "memory ratio"],
                               title="One attention layer, fwd + bwd, batch 32", floatfmt=".3f"))
    res["model_step"] = model_step_case(repeats)
    ms = res["model_step"]
    print(f"\nWhole-model train step (batch 32, T = {ms['length']}): adarope "
          f"{1e3 * ms['adarope']['time_s']:.2f} ms, rope {1e3 * ms['rope']['time_s']:.2f} ms, "
          f"ratio {ms['ratio']:.3f} (target <= 1.10)")
    r256 = res["attention"]["256"]["ratio"]
    res["targets"] = {"attention_ratio_at_256": {"measured": r256, "target": "<= 1.15",
                                                 "holds": r256 <= 1.15},
                      "model_step_ratio": {"measured": ms["ratio"], "target": "<= 1.10",
                                           "holds": ms["ratio"] <= 1.10}}
    res["machine"] = {"platform": platform.platform(), "jax": jax.__version__,
                      "devices": str(jax.devices()[0]), "cpus": os.cpu_count()}
    path = os.path.join(REPO_ROOT, "benchmarks", "results",
                        "adarope_quick.json" if quick else "adarope.json")
    with open(path, "w") as f:
        json.dump(results.to_jsonable(res), f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    app.run(main)
