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
# # Rank-Learner: ranking treatment effects with orthogonal pair labels
#
# *Rank-Learner: Orthogonal Ranking of Treatment Effects*, ICML 2026 (Arno, Frauen, Javurek,
# Demeester, Feuerriegel).
#
# To decide whom to treat first we need the *order* of the effects tau(x), not their size.
# Rank-Learner trains a scorer g on pairs (i, j) with a BCE loss whose label is the
# probability that i's effect exceeds j's. The plug-in label sigmoid((tau_hat_i -
# tau_hat_j)/kappa) inherits the first-order bias of the nuisance models; Rank-Learner adds
# the one-step correction p(1-p)/kappa [(phi_i - tau_hat_i) - (phi_j - tau_hat_j)] with the
# AIPW scores phi, which makes the risk Neyman-orthogonal.
#
# 1. the synthetic DGP and its confounding;
# 2. orthogonality, numerically: the derivative of the pairwise risk along a nuisance error;
# 3. the experiment at smoke size (`train.run`: E1 learned nuisances, E2 perturbed oracles,
#    claims, results.json, figures).

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
from icml26_jax.rank_learner import configs, data, metrics, ranking, train

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="rank_learner_")

# %% [markdown]
# ## 1. The synthetic DGP
# `s` drives both the effect and the treatment, so a model that under-fits `s` makes errors
# that line up with the effect ordering: exactly what biases a plug-in ranker.

# %%
d = data.synthetic(np.random.default_rng(0), n=11000)
print(f"corr(tau, pi) = {np.corrcoef(d.tau, d.pi)[0, 1]:.3f}; pi in [{d.pi.min():.2f}, "
      f"{d.pi.max():.2f}]; sd(tau) = {d.tau.std():.3f}")
print(f"AUTOC of the oracle ranking {float(metrics.autoc(d.tau[:1000], d.tau[:1000])):.4f}; "
      f"of a constant score {float(metrics.autoc(jnp.zeros(1000), d.tau[:1000])):.1f}")

# %% [markdown]
# ## 2. Orthogonality, numerically
# Perturb the outcome models along b(x) by delta (exact propensity, so E[phi | X] = tau).
# The plug-in risk moves at first order in delta; the orthogonal one does not.

# %%
with jax.enable_x64(True):
    sub = data.synthetic(np.random.default_rng(1), n=300)
    f64 = lambda a: jnp.asarray(a, jnp.float64)  # noqa: E731
    x, tau = f64(sub.x), f64(sub.tau)
    b = f64(data.perturbation_direction(np.asarray(sub.x, np.float64)))
    g = jnp.tanh(x @ f64(np.random.default_rng(2).normal(size=10))) + 0.3 * x[:, 0]
    i, j = np.nonzero(~np.eye(300, dtype=bool))

    def risk(delta, orthogonal):
        tau_hat = tau + 1.5 * delta * b  # mu1 + delta b - (mu0 - delta b / 2)
        if orthogonal:
            lab, _ = ranking.orth_labels(tau_hat[i], tau_hat[j], tau[i], tau[j], 0.75, clip=False)
        else:
            lab = ranking.soft_labels(tau_hat[i], tau_hat[j], 0.75)
        return ranking.pairwise_bce(g[i], g[j], lab)

    h = 1e-4
    d_soft = float((risk(h, False) - risk(-h, False)) / (2 * h))
    d_orth = float((risk(h, True) - risk(-h, True)) / (2 * h))
print(f"d risk / d delta at 0: plug-in {d_soft:.2e}, orthogonal {d_orth:.2e}")

# %% [markdown]
# ## 3. The experiment
# E1: nuisance MLPs on their own split, then the T-learner, the DR-learner, the plug-in
# ranker and Rank-Learner on the stage-2 split, all seeds vmapped (and sharded over the
# devices); test AUTOC with ground truth. E2: oracle nuisances perturbed by delta.

# %%
c = configs.get_config("smoke" if SMOKE else "default")
res = train.run(c, WORKDIR)
print(claims_table(res["claims"]))

# %%
for name in ("toc_curves.png", "e2_degradation.png", "paired_diffs.png"):
    display(Image(filename=os.path.join(WORKDIR, name)))
