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
# # Scaling beyond masked diffusion language models
#
# *Scaling Beyond Masked Diffusion Language Models*, ICML 2026 (Sahoo, Lemercier, Yang,
# Deschenaux, Liu, Thickstun, Jukic): an IsoFLOP study of autoregressive (AR), masked (MDLM),
# uniform-state (Duo) and interpolating (Eso-LM) language models; MDLM trained with a
# low-variance cross-entropy instead of its NELBO is more FLOP-efficient, and perplexity
# misleads across families: Duo has a worse likelihood than MDLM but samples better in few
# steps.
#
# Here every family is trained on an HMM language whose exact likelihood is known, so the
# floor of every loss and the quality of samples (an *oracle* Gen-PPL) are measured exactly.
#
# 1. the HMM language and its floor H;
# 2. the objectives: validation is always the NELBO; the low-var objective has a higher
#    gradient signal-to-noise ratio;
# 3. FLOPs counted by XLA on the unrolled model;
# 4. the experiment (`train.run`: IsoFLOP table, Pareto table, claims, figures).

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

import os
import sys
import tempfile

import jax.numpy as jnp
import numpy as np
from IPython.display import Image, display

from icml26_jax.core.results import claims_table
from icml26_jax.discrete_diffusion import configs, data, flops, losses, metrics, report, train
from icml26_jax.discrete_diffusion import model as model_lib
from icml26_jax.lm import hmm as hmm_lib

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="discrete_diffusion_")
if SMOKE:
    # At smoke size XLA's optimisation passes cost far more than the programs' run time.
    jax.config.update("jax_disable_most_optimizations", True)

# %% [markdown]
# ## 1. The HMM language
# 128 hidden states, each moving to 4 successors and emitting one of 8 of the 64 tokens
# (Dirichlet(0.5) weights). The forward algorithm gives the exact log p(x): the floor
# H = E[-log p(x)] / 64 bounds every family's validation loss (an optimal denoiser's NELBO is
# the true NLL), and the unigram entropy shows how much the hidden state adds.

# %%
lang = data.make_language()
H, se = data.sequence_entropy(lang, 64, 2000 if SMOKE else 20_000)
print(f"floor H = {H:.4f} +- {se:.4f} nats/token; unigram entropy "
      f"{hmm_lib.unigram_entropy(lang):.4f}; log V = {np.log(64):.4f}")
x = data.validation_set(lang, 256)
print(f"oracle Gen-PPL of data samples: {metrics.oracle_gen_ppl(lang, x):.3f} "
      f"(exp H = {np.exp(H):.3f}); invalid tokens: {metrics.invalid_rate(lang, x):.3f}")

# %% [markdown]
# ## 2. The objectives
# MDLM's NELBO weighs the masked-token cross-entropy by 1/t; the low-variance objective uses
# weight 1 (training only: validation always reports the NELBO). On one model and batch, the
# gradient over 64 draws (32 with `SMOKE = True`) of (t, mask) is far less noisy with weight 1.

# %%
g, p = model_lib.init("XS", "mdlm", 64, 0)
xb = jnp.asarray(data.train_batch(lang, 0, 0, 32))
snr = {lv: train.gradient_snr(g, p, xb, 64, low_var=lv, draws=32 if SMOKE else 64)
       for lv in (True, False)}
print(f"gradient SNR: low-var {snr[True]:.4f}, NELBO {snr[False]:.4f}, "
      f"ratio {snr[True] / snr[False]:.2f}")
key, t = jax.random.key(0), jnp.full((32,), 0.5)
nelbo = losses.loss_fn("mdlm_lowvar", p, g, {"tokens": xb}, key, train=False, K=64, t=t)
cross = losses.loss_fn("mdlm_lowvar", p, g, {"tokens": xb}, key, train=True, K=64, t=t)
print(f"at t = 0.5 the NELBO is 2 x the low-var loss: {float(nelbo):.4f} vs "
      f"{float(cross):.4f}")

# %% [markdown]
# ## 3. FLOPs
# XLA counts a scanned layer stack once; the budget uses the count of the unrolled forward,
# which lands within a few percent of 2 N + 4 n_layer L d per token.

# %%
for size in (("XL",) if SMOKE else model_lib.SIZES):  # smoke: the deepest, 5 layers
    gu, pu = model_lib.init(size, "mdlm", 64, 0, unroll=True)
    cfg = model_lib.model_config(size, "mdlm", 64, unroll=True)
    f = flops.forward_flops(gu, pu, 2, 64, cfg)
    gs, ps = model_lib.init(size, "mdlm", 64, 0)
    scanned = flops.compiled_flops(gs, ps, 2, 64) / 2
    print(f"{size}: N = {model_lib.non_embedding_params(size):>6d}, F_fwd = {f:.3e} "
          f"(analytic {flops.analytic_flops(cfg, 64):.3e}), scanned count / unrolled = "
          f"{scanned / f:.2f}, steps at 6e11 = {flops.steps_for_budget(6e11, f, 32)}")

# %% [markdown]
# ## 4. The experiment
# Every family and size trained at one FLOP budget, validated on 256 fixed sequences x 8
# stratified t, then each family's best model sampled at several T (NFE = T + 1 for MDLM and
# Duo, T for Eso-LM, 64 for AR) and scored by the HMM. `python experiments/discrete_diffusion.py`
# runs the default (24 runs, ~12 min on 2 CPU cores); here the smoke variant (XS only, 100
# steps; 20 with `SMOKE = True`).

# %%
c = configs.get_config("smoke")
if SMOKE:
    c.families = ("ar", "mdlm", "mdlm_lowvar", "duo")
    c.steps, c.chunk = 20, 20
    c.num_samples, c.val_size, c.val_times = 8, 32, 2
res = train.run(c, WORKDIR)
print(report.tables(res["metrics"]))
print(claims_table(res["claims"]) if res["claims"] else "the smoke variant evaluates no claim")

# %%
for name in res["figures"]:
    display(Image(filename=name))
