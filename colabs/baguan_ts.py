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
# # Baguan-TS: in-context forecasting on raw windows with covariates
#
# *Baguan-TS: A Sequence-Native In-Context Learning Model for Time Series Forecasting with
# Covariates*, ICML 2026. A 3D transformer attends over time (patches), over variables
# (covariates + target) and over contexts: K support windows retrieved from the series' own
# history by target-space similarity (RBfcst), plus the query window whose last H steps are
# the forecast slots. The head outputs a distribution over 256 bars per step.
#
# 1. retrieval: RBfcst picks supports whose recent shape matches the query's;
# 2. the pieces: the bar distribution, the anti-symmetric ensemble;
# 3. the experiment at smoke size (`train.run`: pretraining on the prior, evaluation, claims);
# 4. a user's view: reload the saved forecaster with orbax and forecast a new series.

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
from flax import nnx
from IPython.display import Image, display

from icml26_jax.baguan_ts import configs, data_real, losses, metrics, model, predict, report
from icml26_jax.baguan_ts import retrieval, train
from icml26_jax.core.results import claims_table

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="baguan_ts_")
if SMOKE:
    # At smoke size XLA's optimisation passes cost far more than the programs' run time.
    jax.config.update("jax_disable_most_optimizations", True)

# %% [markdown]
# ## 1. Retrieval (RBfcst, "Y-space" local calibration)
# Candidates are all windows that end before the origin. Each is scored against the query's
# last M - H observed steps by the mean of a z-normalised inner product, a cosine and
# tanh(-L2); one candidate per floor(s / period) group survives and the best K are kept. On a
# pure sinusoid every selected start sits a whole number of periods from the query's start.

# %%
period, L, M, H, K = 12, 160, 64, 16, 6
t = np.arange(L + H, dtype=np.float32)
y = np.sin(2 * np.pi * t / period).astype(np.float32)
ctx = retrieval.rbfcst(jnp.asarray(y), jnp.zeros((L + H, 0)), L, M, H, K, 5)
q0 = L - M + H  # the query window's first step
print("query starts at", q0, "; supports start at", np.asarray(ctx.starts).tolist())
print("(start - query start) mod period:", sorted({int(s - q0) % period
                                                   for s in np.asarray(ctx.starts)}))
print("every support ends before the origin:", bool(np.all(np.asarray(ctx.starts) + M <= L)))

# %% [markdown]
# ## 2. The pieces
# The head gives a categorical over bars in normalised space; the density is flat inside a bar
# and half-normal on the two outer bars, so it integrates to one. The forecaster runs mF
# masked repeats, each on y and on -y with the same mask, and pairs them anti-symmetrically:
# forecasting -y gives exactly minus the forecast of y.

# %%
borders = losses.bar_borders(64)
logits = jax.random.normal(jax.random.key(0), (64,))
h = float(borders[1] - borders[0]) / 1000  # midpoint rule; no node on a bar border
grid = -40.0 + h * (np.arange(int(round(80.0 / h))) + 0.5)
dens = jax.vmap(lambda v: losses.bar_log_density(logits, v, borders))(jnp.asarray(grid))
print(f"bar density integrates to {np.exp(np.asarray(dens, np.float64)).sum() * h:.4f}")
print("decoded quantiles (q10..q90):",
      np.round(np.asarray(losses.decode_quantiles(logits[None], borders))[0], 2))

cfg_small = model.ModelConfig(d=32, heads=4, layers=2, ffn=64, bins=64, head_hidden=64)
g0, p0 = nnx.split(model.BaguanTS(cfg_small, rngs=nnx.Rngs(0)), nnx.Param)
icfg = predict.InferenceConfig(M=64, K=4, mF=2)
series = (np.sin(2 * np.pi * t[:L] / period) + 0.01 * t[:L]).astype(np.float32)
Xtr, Xte = np.zeros((L, 0), np.float32), np.zeros((H, 0), np.float32)
m_pos, q_pos = predict.forecast(g0, p0, Xtr, series, Xte, icfg, jax.random.key(1))
m_neg, q_neg = predict.forecast(g0, p0, Xtr, -series, Xte, icfg, jax.random.key(1))
print("max |f(-y) + f(y)| (mean, quantiles):", float(np.max(np.abs(m_neg + m_pos))),
      float(np.max(np.abs(q_neg + q_pos[:, ::-1]))))

# %% [markdown]
# ## 3. The experiment (smoke size)
# Pretraining on the smoke "mini prior" (a sinusoid plus one GP covariate), then the
# evaluation of the model, its inference ablations (K = 0, recent and random contexts) and
# the baselines on held-out mini-prior tasks and the `nile` series; the claims that the spec
# marks for smoke are computed with their smoke thresholds. `python experiments/baguan_ts.py`
# runs the default (pretraining ~10 minutes on 2 CPU cores).

# %%
c = configs.get_config("smoke")
if SMOKE:
    c.train.trunk_steps = 30
    c.n_synthetic = 3
res = train.run(c, WORKDIR)
print(claims_table(res["claims"]))
print(report.tables(res["metrics"]))

# %%
for name in res["figures"]:
    display(Image(filename=name))

# %% [markdown]
# ## 4. Reload the forecaster and forecast a new series
# `train.run` saved the pretrained model with orbax (`<workdir>/model`). A user reloads it and
# forecasts any series with its known future covariates; nothing is retrained. Point
# `MODEL_DIR` at the workdir of a default run (`runs/baguan_ts`) to use the real model.

# %%
MODEL_DIR = os.environ.get("BAGUAN_MODEL_DIR", WORKDIR)
graphdef, params, mcfg = train.load_model(MODEL_DIR)
print(f"reloaded: d={mcfg.d}, layers={mcfg.layers}, bins={mcfg.bins}, "
      f"{model.count_params(params):,} parameters")
task = data_real.load_task("elnino")
L0 = task.origins[-1]
y_tr, X_tr = task.y[:L0], task.X[:L0]
X_te, y_te = task.X[L0:L0 + task.H], task.y[L0:L0 + task.H]
icfg = train.inference_config(c)
mean, q = predict.forecast(graphdef, params, X_tr, y_tr, X_te, icfg, jax.random.key(0),
                           m=task.m)
print("elnino, last origin: WQL", round(metrics.wql(y_te, q), 3), "| coverage of [q10, q90]",
      round(metrics.coverage(y_te, q[:, 0], q[:, -1]), 2))
print("forecast:", np.round(mean, 2).tolist())
print("truth:   ", np.round(y_te, 2).tolist())
