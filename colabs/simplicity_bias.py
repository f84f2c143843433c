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
# # Simplicity bias in diffusion models: pair-wise statistics first, higher-order later
#
# *A theory of learning data statistics in diffusion models, from easy to hard*, ICML 2026
# (Merger, Bardone, Goldt).
#
# The mixed cumulant model (MCM) plants pair-wise structure along a spike u (a covariance
# bump) and higher-order structure along a spike v (unit variance, only a fourth cumulant).
# A single-index denoiser D_w(x_t) = a x_t + w phi(w . x_t) trained by online SGD learns u
# after n ~ d samples but v only after n ~ d^3: the *diffusion information exponent* (the
# lowest power of the overlap in the population loss) is 2 for u and 4 for v. If the latents
# of u and v are correlated, v becomes learnable with n ~ d.
#
# 1. the MCM: v is invisible to second-order statistics;
# 2. the diffusion information exponents from the float64 population loss;
# 3. online SGD: u escapes at n ~ d, v does not at that budget;
# 4. the experiment (`train.run`: claims, results.json, figures).

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

import numpy as np
from IPython.display import Image, display

from icml26_jax.core.results import claims_table
from icml26_jax.simplicity_bias import configs, mcm, online, theory, train

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="simplicity_bias_")

# %% [markdown]
# ## 1. The mixed cumulant model
# x = sqrt(beta_u) lam u + S (sqrt(beta_v) nu v + z) with Rademacher nu and the whitening
# S = I - (1 - 1/sqrt(1 + beta_v)) v v^T, which acts on the noise too: along v the variance
# is exactly 1, so only the fourth cumulant kappa_4(x . v) = -2 (beta_v / (1 + beta_v))^2
# betrays v.

# %%
cfg = mcm.MCMConfig(d=16, beta_u=4.0, beta_v=4.0)
u, v = mcm.spikes(jax.random.key(0), cfg.d)
x = np.asarray(mcm.sample(jax.random.key(1), 200_000, cfg, u, v), np.float64)
for name, e in (("u", np.asarray(u)), ("v", np.asarray(v))):
    p = x @ e
    k4 = np.mean(p ** 4) - 3 * np.mean(p ** 2) ** 2
    print(f"Var(x . {name}) = {p.var():.3f}, kappa_4(x . {name}) = {k4:.3f}")
print(f"theory: Var(x . u) = {1 + cfg.beta_u:.3f}, Var(x . v) = 1, "
      f"kappa_4(x . v) = {mcm.kappa4_along(cfg, 1.0):.3f}")

# %% [markdown]
# ## 2. Diffusion information exponents
# The w-dependent population loss L(m_u, m_v) by Gauss-Hermite / Gauss-Legendre quadrature
# (float64); the exponent is the log-log slope of |L(m) - L(0)| for small m.

# %%
a = b = 1 / math.sqrt(2)
m = np.geomspace(0.02, 0.2, 10)


def exponent(cfg, link, along, m_u=0.0):
    at = (lambda t: (t, 0.0)) if along == "u" else (lambda t: (m_u, t))
    l0 = theory.population_loss(*at(0.0), cfg, link, a, b)
    return theory.fit_exponent(lambda t: theory.population_loss(*at(t), cfg, link, a, b) - l0, m)


k_u = exponent(mcm.MCMConfig(2), "u", "u")
k_v = exponent(mcm.MCMConfig(2, 0.0, 4.0), "v", "v")
k_c = exponent(mcm.MCMConfig(2, latent_corr="nonlinear"), "both", "v", 0.9)
print(f"exponent along u: {k_u:.3f}; along v: {k_v:.3f}; "
      f"along v with correlated latents at m_u = 0.9: {k_c:.3f}")

# %% [markdown]
# ## 3. Online SGD at a linear budget
# Replicas of the denoiser (link both, delta = 1/d, n = 60 d fresh samples), vmapped and
# sharded over the devices: |m_u| leaves the initial 1/sqrt(d) and plateaus near 0.75;
# |m_v| stays at the init level.

# %%
d = 32
oc = online.OnlineConfig(d=d, delta=1 / d, n_steps=60 * d, n_records=60, replicas=16)
r = online.run_online(jax.random.key(0), mcm.MCMConfig(d), oc)
print(f"d = {d}: escape of u at n*/d = {online.escape_time(r.ns, r.m_u, 0.5) / d:.2f}; "
      f"final median |m_u| = {np.median(np.abs(r.m_u[:, -1])):.3f}, "
      f"|m_v| sqrt(d) = {np.median(np.abs(r.m_v[:, -1])) * math.sqrt(d):.2f}")

# %% [markdown]
# ## 4. The experiment
# Pair-wise escape at d = 32..256, the d^3 escape of the fourth-cumulant spike, the linear
# budget, correlated latents, the exponents and the digits clone test (here at a reduced size
# when `SMOKE = True`; `python experiments/simplicity_bias.py` runs the default).

# %%
c = configs.get_config("smoke")
if SMOKE:
    c.parts = ("linear_budget", "exponent")
    c.replicas = 8
    c.linear_budget.dims = (16, 32)
    c.linear_budget.n_over_d = 50
res = train.run(c, WORKDIR)
print(claims_table(res["claims"]))

# %%
for name in res["figures"]:
    display(Image(filename=name))
