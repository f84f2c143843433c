# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # AdaRoPE: not all attention heads should rotate and scale equally
#
# *Not All Attention Heads Should Rotate and Scale Equally*, ICML 2026 (small-scale
# analogue; the AdaRoPE parameterisation is reconstructed from the abstract, see
# `icml26_jax/adarope/README.md`).
#
# RoPE rotates pair `i` of every head's query and key by `m * theta_i` with one schedule
# `theta_i = b^(-2i/D)` for all heads, and scales every head's logits by `1/sqrt(D)`.
# AdaRoPE gives each (layer, head, pair) a learnable log-frequency `phi` (initialised at
# RoPE, so the model *is* RoPE at step 0) and each head a learnable temperature; for context
# extension it starts from YaRN and learns head-specific interpolation factors.
#
# This notebook walks through `icml26_jax.adarope`:
# 1. frequency tables: RoPE, partial-RoPE, p-RoPE, NTK, YaRN, and the "unseen" pairs;
# 2. the `RotaryPositional` NNX module: equals RoPE/YaRN at init, and its frequencies get
#    gradients;
# 3. the MQAR task (previous-token + retrieval heads);
# 4. the experiment pipeline `train.run` at smoke size (results.json, claims, figures).

# %% tags=["parameters"]
# Parameters (papermill sets them when it runs the notebook). REPO_URL: where to install
# icml26_jax from in a kernel that cannot import it, such as a fresh Colab runtime: its git
# URL, or a wheel or directory pip accepts. SMOKE = True shrinks every size so the notebook
# runs in a minute or two on a CPU; its numbers then mean nothing. WORKDIR: where results
# and figures go (empty: a new temporary directory).
REPO_URL = ""
SMOKE = False
WORKDIR = ""

# %%
# Install icml26_jax if this kernel cannot import it: from the checkout the notebook was
# opened in, else from REPO_URL. The install is not editable, so no restart is needed. On a
# GPU or TPU runtime the matching JAX extra comes with it.
import importlib
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

if importlib.util.find_spec("icml26_jax") is None:
    _here = pathlib.Path.cwd().resolve()
    _checkout = next((p for p in (_here, *_here.parents) if (p / "setup.cfg").is_file()
                      and (p / "icml26_jax" / "__init__.py").is_file()), None)
    _source = str(_checkout) if _checkout else REPO_URL.strip()
    if not _source:
        raise SystemExit("Set REPO_URL in the parameters cell to the icml26_jax git URL "
                         "(or a wheel), then run the notebook again.")
    if _source.startswith(("https://", "http://", "ssh://")) and not _source.endswith(
            (".whl", ".zip", ".tar.gz")):
        _source = "git+" + _source
    _extra = (["jax[cuda12]"] if shutil.which("nvidia-smi") else ["jax[tpu]"]
              if os.path.exists("/dev/accel0") or os.environ.get("TPU_ACCELERATOR_TYPE")
              else [])
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", _source, *_extra],
                   check=True)
    importlib.invalidate_caches()
    importlib.import_module("icml26_jax")  # fails here, not in a later cell, if it did not install

# %%
import jax

jax.config.update("jax_num_cpu_devices", 8)

import math
import os
import sys
import tempfile

import jax.numpy as jnp
import numpy as np
from flax import nnx
from IPython.display import Image, display

from icml26_jax.adarope import configs, rope, train
from icml26_jax.core.results import claims_table, format_table

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="adarope_")
if SMOKE:
    # At smoke size XLA's optimisation passes cost far more than the programs' run time.
    jax.config.update("jax_disable_most_optimizations", True)
print(f"jax {jax.__version__}, {jax.device_count()} {jax.devices()[0].platform} devices")

# %% [markdown]
# ## 1. Frequency tables
#
# Head dim `D = 16` (8 pairs), base `b = 100`, training length `L0 = 64`. A pair is *unseen*
# when its wavelength `2 pi / theta_i` exceeds `L0`: beyond `L0` its phases are out of
# distribution. YaRN extends by `s = 4` with a per-pair factor `lambda_i` (ramp between
# `alpha = 1` and `beta = 32` rotations in the window) and multiplies the logits by
# `(0.1 ln s + 1)^2`.

# %%
D, B0, L0, S = 16, 100.0, 64, 4.0
theta = rope.rope_frequencies(D, B0)
lam, mult = rope.yarn_factors(theta, L0, S)
rows = [[i, theta[i], 2 * math.pi / theta[i], 2 * math.pi / theta[i] > L0, lam[i]]
        for i in range(D // 2)]
print(format_table(rows, ["pair", "theta", "wavelength", "unseen", "YaRN lambda"],
                   floatfmt=".4f"))
print(f"YaRN logit multiplier: {mult:.4f}")
print("partial-0.25:", np.round(rope.partial_frequencies(D, B0, 0.25), 4))
print("p-RoPE-0.75: ", np.round(rope.prope_frequencies(D, B0, 0.75), 4))
print(f"NTK base: {B0 * S ** (D / (D - 2)):.3f}")
# The experiment trains at L0 = 32 and uses b = 25 to keep the same regime (3 of 8 pairs
# unseen at L0); see configs.py.
cd = configs.get_config("default")
wl = 2 * math.pi / rope.rope_frequencies(D, cd.base)
print(f"default experiment: L0 = {cd.train_len}, b = {cd.base:g}, unseen pairs:",
      np.nonzero(wl > cd.train_len)[0].tolist())

# %% [markdown]
# ## 2. The module
#
# `RotaryPositional` is the position encoder the shared transformer calls on q and k.
# Every kind has the same parameters (`log_freq [H, P]`, `log_interp [H, P]`, `log_temp
# [H]`, `len_slope [H]`); which ones a kind learns is an array mask, so arms of an
# experiment stack and `vmap`. At init AdaRoPE equals RoPE and AdaRoPE-ext equals YaRN.

# %%
kq, kk = jax.random.split(jax.random.key(0))
q = jax.random.normal(kq, (2, 256, 4, D))
k = jax.random.normal(kk, (2, 256, 4, D))
pos = jnp.broadcast_to(jnp.arange(256), (2, 256))
logits = lambda m: jnp.einsum("bthd,bshd->bhts", *m(q, k, pos))  # noqa: E731
cfg = dict(head_dim=D, num_heads=4, base=B0, train_len=L0)
d_rope = jnp.abs(logits(rope.RotaryPositional(rope.RopeConfig(kind="adarope", **cfg)))
                 - logits(rope.RotaryPositional(rope.RopeConfig(kind="rope", **cfg)))).max()
ext = dict(cfg, kind="rope", ext_factor=S)
d_yarn = jnp.abs(logits(rope.RotaryPositional(rope.RopeConfig(ext="adarope", **ext)))
                 - logits(rope.RotaryPositional(rope.RopeConfig(ext="yarn", **ext)))).max()
print(f"max |AdaRoPE - RoPE| logit at init: {float(d_rope):.2e}")
print(f"max |AdaRoPE-ext - YaRN| logit at init: {float(d_yarn):.2e}")

module = rope.RotaryPositional(rope.RopeConfig(kind="adarope", **cfg))
graphdef, params, rest = nnx.split(module, nnx.Param, ...)
grads = jax.grad(lambda p: jnp.mean(jnp.tanh(
    jnp.einsum("bthd,bshd->bhts", *nnx.merge(graphdef, p, rest)(q, k, pos)))))(params)
print("|d loss / d log_freq| per head:",
      np.round(np.abs(np.asarray(grads["log_freq"][...])).sum(-1), 5))

# %% [markdown]
# ## 3. The task: multi-query associative recall (MQAR)
#
# `k1 v1 ... ? q1 ? q2 ...`: at each query the model must output the value bound to that key.
# Solving it takes a previous-token head (each value learns its key: a precise local offset,
# high frequencies) and a retrieval head (a query finds its key anywhere: distance
# invariant, low frequencies). With 16 keys, L0 = 32 holds 8 pairs, all queried; a longer
# context holds more pairs, whose keys (distractors) are the 8 keys not queried, so every
# query still has one answer.

# %%
c = configs.get_config("smoke")
for T in (c.train_len, 2 * c.train_len):
    b = train._mqar(c, np.random.default_rng(0), 1, T)
    print(f"T = {T}: tokens :", b["tokens"][0].tolist())
    print("  queries at", b["query_pos"][0].tolist(), "-> keys at", b["key_pos"][0].tolist())
    print("  targets:", b["targets"][0, b["query_pos"][0]].tolist())

# %% [markdown]
# ## 4. The experiment at smoke size
#
# `train.run` trains the arms (here rope and adarope, one seed) as ONE vmapped program,
# evaluates them at 1x and 2x the training length, extends the RoPE backbone to 4x with
# YaRN, YaRN-learned-uniform and AdaRoPE-ext (frozen backbone), then writes results.json,
# the claims and the figures. The full experiment is
# `python experiments/adarope.py --config=icml26_jax/adarope/configs.py:default`.

# %%
c = configs.get_config("smoke")
if SMOKE:  # the notebook test: fewer steps, smaller evaluation sets
    c.steps, c.chunk, c.eval_size, c.eval_batch = 40, 40, 32, 32
    c.extension.steps, c.extension.chunk = 5, 5
out = train.run(c, WORKDIR)
print(claims_table(out["claims"]))
m = out["metrics"]
for arm in m["arms"]:
    print(f"{arm}: accuracy at L0 = {c.train_len}: "
          f"{np.mean(m['accuracy'][arm][str(c.train_len)]):.3f}")
print(f"adarope mean |dphi|: {m['adarope_mean_abs_dphi']:.4f}")

# %%
for name in ("acc_vs_length.png", "learned_freqs.png", "extension.png"):
    display(Image(filename=os.path.join(WORKDIR, name)))
