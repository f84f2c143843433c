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
# # ATC: tracking a mean through many change points
#
# *The Cost of Learning under Multiple Change Points*, ICML 2026 (Gafni, Iyengar, Zeevi).
# The ATC statistic, its threshold constant and the restart rule are reconstructed from the
# abstract; see `icml26_jax/atc_cusum/README.md`.
#
# A learner predicts `mu_t` from `X_1..X_{t-1}`; the mean jumps S times, at unknown times
# and by unknown (possibly tiny) amounts. Anytime Tracking CUSUM keeps the mean of the
# current segment, scans split points with the Gaussian GLR statistic, and restarts only
# when the evidence exceeds `c log t` (no horizon): small shifts are ignored on purpose,
# large ones are caught fast.
#
# 1. one series: ATC's prediction, its alarms, the statistic against the threshold;
# 2. why one-shot (delta-PAC) detectors fail when applied repeatedly;
# 3. the Nile: one alarm, at the break that least squares finds offline;
# 4. the experiment at smoke size (`train.run`: suites, claims, results.json, figures).

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
jax.config.update("jax_enable_x64", True)  # prefix sums over long series need float64

import os
import sys
import tempfile

import jax.numpy as jnp
import numpy as np
from IPython.display import Image, display

from icml26_jax.atc_cusum import atc, baselines, configs, envs, metrics, train
from icml26_jax.core import plotting
from icml26_jax.core.results import claims_table

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="atc_cusum_")

# %% [markdown]
# ## 1. One series
#
# G1: S = 6 changes at uniform times, N(0, 1) jumps (some tiny), sigma = 1. ATC with c = 3
# and the geometric split grid (about 80 candidate splits at T = 16000).

# %%
T, S = 4000, 6
rng = np.random.default_rng(0)
mu = envs.random_jumps(rng, 1, T, S)[0]
x = envs.observe(rng, mu)
p = atc.ATCParams(sigma=1.0, c=3.0)
out = atc.atc_predict(p, jnp.asarray(x))
pred, alarm = np.asarray(out.pred), np.asarray(out.alarm)
jumps = np.flatnonzero(np.diff(mu)) + 2  # 1-based change times
print("true changes at t =", jumps.tolist(), "sizes", np.round(np.diff(mu)[jumps - 2], 2).tolist())
print("ATC alarms at t =", metrics.alarm_times(alarm).tolist())
print(f"regret: ATC {metrics.regret(pred, mu):.1f}, window(100) "
      f"{metrics.regret(np.asarray(baselines.sliding_window(jnp.asarray(x), 100)), mu):.1f}, "
      f"lower-bound order (S+1) log(T/(S+1)) = {metrics.lower_bound_curve(S, T):.1f}")

fig, ax = plotting.figure(size=(8, 3))
ax.plot(x, ".", ms=1, color="0.7", label="X_t")
ax.plot(mu, "k", lw=1, label="mu_t")
ax.plot(pred, "C0", lw=1.5, label="ATC prediction")
for t in metrics.alarm_times(alarm):
    ax.axvline(t, color="r", lw=0.8)
ax.legend(fontsize=7)
display(fig)

# %% [markdown]
# The GLR of the best split in the current segment, against `c log t`: below the threshold
# ATC keeps pooling (a tiny jump is cheaper to ignore than to chase), above it restarts at
# the maximising split, keeping the post-change samples.

# %%
P = np.concatenate([[0.0], np.cumsum(x)])
seg = np.asarray(out.seg_start)
stat = np.zeros(T)
for t in range(2, T + 1):
    r = seg[t - 2]
    s = np.arange(r + 1, t)
    if len(s):
        g = (s - r) * (t - s) / (t - r) * ((P[s] - P[r]) / (s - r) - (P[t] - P[s]) / (t - s)) ** 2
        stat[t - 1] = g.max()
fig, ax = plotting.figure(size=(8, 2.5))
ax.semilogy(np.maximum(stat, 1e-3), lw=0.8, label="max_s G_t(s) (full scan)")
ax.plot(3 * np.log(np.arange(1, T + 1)), "r--", label="3 log t")
ax.legend(fontsize=7)
display(fig)

# %% [markdown]
# ## 2. One-shot detectors, applied again and again
#
# A delta-PAC detector has a constant threshold (`2 log(1/delta)` = 9.21 at delta = 0.01).
# Over a long stream it false-alarms at a constant rate, and each false alarm throws away
# the segment: its regret grows linearly in T even with no change at all. Page's CUSUM
# against an estimated reference has the same problem. ATC's `c log t` grows just enough.

# %%
R = 16
for T_ in (1000, 4000, 16000):
    mu0 = np.zeros((R, T_))
    x0 = envs.observe(np.random.default_rng(T_), mu0)
    row = {}
    for name, spec in (("ATC", ("atc", p)), ("fixed-conf", ("fixed", 1.0, 0.01, "argmax", "geom", 1.25)),
                       ("Page", ("page", 1.0, 0.25, 8.0, "running", 50))):
        row[name] = train.scores(spec, x0, mu0)["regret"].mean()
    print(f"S = 0, T = {T_:5d}: " + ", ".join(f"{k} {v:7.1f}" for k, v in row.items()))

# %% [markdown]
# ## 3. The Nile
#
# Annual flow at Aswan, 1871-1970, with the well-known drop around 1898. Sigma is estimated
# from first differences (median absolute difference, floored), and c = 4 for estimated
# sigma. The exact offline least-squares 1-break fit is the reference.

# %%
years, nile = envs.load_nile()
sig = envs.sigma_hat(nile)
o = atc.atc_predict(atc.ATCParams(sigma=sig, c=4.0), jnp.asarray(nile))
a = np.flatnonzero(np.asarray(o.alarm))
br = metrics.ls_segmentation(nile, 1)
print(f"sigma_hat = {sig:.1f}; ATC alarm after observing {years[a].tolist()}, new segment "
      f"from {years[np.asarray(o.seg_start)[a]].tolist()}; LS break at {years[br].tolist()}")
best = min(min(metrics.one_step_mse(np.asarray(baselines.sliding_window(jnp.asarray(nile), w)), nile)
               for w in configs.REAL_WINDOWS),
           min(metrics.one_step_mse(np.asarray(baselines.discounted_mean(jnp.asarray(nile), g)), nile)
               for g in configs.REAL_GAMMAS))
print(f"one-step MSE: ATC {metrics.one_step_mse(np.asarray(o.pred), nile):.0f}, "
      f"best window / discount in hindsight {best:.0f}")

# %% [markdown]
# ## 4. The experiment at smoke size
#
# `train.run` runs the suites (G1 grid with held-out-tuned baselines and the peers, the
# single-change sweep, staircase, square wave, real series), checkpoints each finished
# suite, evaluates the claims and writes results.json and the figures. The default run is
# `python experiments/atc_cusum.py` (a few minutes on 2 CPU cores).

# %%
c = configs.get_config("smoke")
if SMOKE:  # the notebook test: fewer, shorter suites
    c.suites = ("synthetic", "selective", "real")
    c.synthetic.update(S=(0, 4), T=(500, 1000), runs=8, tune_runs=8, peers_runs=0)
    c.selective.update(T=2000, runs=16)
res = train.run(c, WORKDIR)
print(claims_table(res["claims"]))

# %%
for name in ("regret_vs_logT.png", "nile.png"):
    display(Image(filename=os.path.join(WORKDIR, name)))
