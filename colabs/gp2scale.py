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
# # gp2Scale: exact Gaussian processes from compactly supported kernels
#
# *gp2Scale: A Class of Compactly-Supported Non-Stationary Kernels and Distributed Computing
# for Exact Gaussian Processes on 10 Million Data Points*, ICML 2026 (Noack, Risser, Luo,
# Tekriwal, Pandolfi). See `icml26_jax/gp2scale/README.md`.
#
# The idea: let the *kernel* be exactly zero beyond a (learned) support. The covariance is
# then sparse without any approximation, and the exact GP — solve and log-determinant — costs
# about O(N) when the number of neighbours per point stays bounded.
#
# 1. the Wendland function and the three kernels (PSD, compact support, far-field bumps);
# 2. the sparsity pattern and the BCSR covariance, against the dense kernel;
# 3. the exact log-likelihood: batched CG + stochastic Lanczos quadrature, against dense
#    Cholesky, and its custom-VJP gradient;
# 4. the experiment at smoke size (`train.run`: claims, results.json, figures).

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

jax.config.update("jax_enable_x64", True)  # CG to 1e-8 and SLQ log terms need float64

import os
import tempfile

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from icml26_jax.gp2scale import (configs, data, kernels, likelihood, neighbors, solvers,
                                 sparse_cov, train)

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="gp2scale_")

# %% [markdown]
# ## 1. Kernels
# The Wendland function phi_{3,3}(d) = (1-d)^8 (32 d^3 + 25 d^2 + 8 d + 1) is C^6 and exactly
# zero for d >= 1. Kernel 2 adds two rank-1 "bump" terms f(x) f(x') + g(x) g(x'): points under
# one bump stay correlated however far apart they are (far field), while the matrix stays
# sparse plus rank 2.

# %%
d = jnp.linspace(0, 1.2, 200)
x1 = jnp.linspace(0, 1, 400)[:, None]
rng = np.random.default_rng(0)
pb = kernels.example_params("bump", 1, rng)
fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3))
a1.plot(d, kernels.wendland(d), label="phi_3,3")
a1.plot(d, kernels.wendland(d, 8), label="phi_8,3 (D up to 8)")
a1.set_xlabel("whitened distance d")
a1.legend()
kb = kernels.k_dense("bump", pb, x1, x1)
a2.imshow(np.asarray(kb), cmap="viridis")
a2.set_title("kernel 2 on [0, 1]: local band + far-field blocks")
plt.show()
for kind in kernels.KINDS:
    x = jnp.asarray(rng.uniform(0, 1, (400, 2)))
    ev = np.linalg.eigvalsh(np.asarray(kernels.k_dense(kind, kernels.example_params(
        kind, 2, rng), x, x)))
    print(f"{kind:8s}: min eigenvalue / max = {ev[0] / ev[-1]:.1e}")

# %% [markdown]
# ## 2. Pattern and sparse covariance
# synth2d at N = 4000 (2000 under `SMOKE`) with the scaling benchmark's support (about
# 30 non-zeros per row): Morton order, the pairs within the support (cell list), the BCSR
# matrix.

# %%
n = 2000 if SMOKE else 4000
xs, ys = data.synth2d(n, 0)
perm = neighbors.morton_order(xs)
xs, ys = xs[perm], ys[perm]
ls = data.synth2d_lengthscale(n)
p = kernels.WendlandParams(jnp.asarray(1.0), jnp.asarray([ls, ls]), jnp.asarray(1e-2))
pat = neighbors.build_pattern(xs, ls, method="cells")
a = sparse_cov.assemble("wendland", p, jnp.asarray(xs), pat)
dense = kernels.k_dense("wendland", p, jnp.asarray(xs), jnp.asarray(xs)) + 1e-2 * jnp.eye(n)
print(f"nnz per row {int(pat.nnz) / n:.1f}, density {int(pat.nnz) / n ** 2:.2e}")
print("max |BCSR - dense| =", float(jnp.max(jnp.abs(a.todense() - dense))))
plt.figure(figsize=(4, 4))
plt.spy(np.asarray(a.todense())[:600, :600], markersize=0.3)
plt.title("first 600 rows (Morton order: near-banded)")
plt.show()

# %% [markdown]
# ## 3. The exact log-likelihood, sparse
# One batched CG call solves A [alpha, u_1..u_t] = [y, z_1..z_t]; the probe columns' CG
# coefficients are Lanczos tridiagonals, and stochastic Lanczos quadrature turns them into
# log|A|. Against dense Cholesky:

# %%
probes = solvers.rademacher(jax.random.key(0), n, 32)
ll = jax.jit(lambda p, pat, pr: likelihood.log_marglik("wendland", p, jnp.asarray(xs),
                                                       jnp.asarray(ys), pat, pr))
val, aux = ll(p, pat, probes)
ref = likelihood.dense_loglik(dense, jnp.asarray(ys))
print(f"sparse: L = {float(val):.2f} (log|A| {float(aux.logdet):.1f} +- "
      f"{float(aux.logdet_se):.1f}, {int(aux.cg_iters[0])} CG iterations)")
print(f"dense : L = {float(ref):.2f} (log|A| {float(jnp.linalg.slogdet(dense)[1]):.1f})")

# %% [markdown]
# The gradient comes from the same solves (a custom VJP). With the probes sqrt(N) e_i the
# trace is exact, and the gradient equals autodiff through dense Cholesky:

# %%
m = 200
xm, ym = jnp.asarray(xs[:: n // m][:m]), jnp.asarray(ys[:: n // m][:m])
pm = p._replace(ls=jnp.asarray([0.2, 0.15]))
patm = neighbors.build_pattern(np.asarray(xm), [0.2, 0.15])
exact_probes = jnp.sqrt(float(m)) * jnp.eye(m)
g_sparse = jax.jit(jax.grad(lambda q: likelihood.log_marglik(
    "wendland", q, xm, ym, patm, exact_probes, likelihood.SolverConfig(tol=1e-12))[0]))(pm)
g_dense = jax.jit(jax.grad(lambda q: likelihood.dense_loglik(
    kernels.k_dense("wendland", q, xm, xm) + q.noise * jnp.eye(m), ym)))(pm)
for name in ("sigma2", "ls", "noise"):
    print(f"dL/d{name}: custom VJP {np.asarray(getattr(g_sparse, name))}  dense "
          f"{np.asarray(getattr(g_dense, name))}")

# %% [markdown]
# ## 4. The experiment (smoke size)
# Kernel validity, exactness against dense, SLQ, scaling, block adaptive Metropolis on a
# crop of `camera`, and kernel 1 vs kernel 2 on the gaps of synth1d_ns.

# %%
cfg = configs.get_config("smoke" if SMOKE else "default")
if SMOKE:
    # A lighter walk-through than the smoke run (which tests/gp2scale runs and checks): kernel
    # validity in 2-D only, a 6-step chain, 5 Adam steps, no kernel 3.
    cfg.validity_n, cfg.validity_dims, cfg.am_iters, cfg.am_chunk = 400, (2,), 6, 6
    cfg.adam_steps, cfg.ns_k3_steps = 5, 0
res = train.run(cfg, WORKDIR)
held = sum(c["holds"] for c in res["claims"])
print(f"{held}/{len(res['claims'])} claims hold at {cfg.variant} size")
cam = res["metrics"]["camera"]
print(f"camera: learned ls {np.round(np.asarray(cam['ls_px']), 2)} px, full-image density "
      f"{float(cam['full_image_density']):.1e}, RMSE ratio vs dense Matern "
      f"{float(cam['rmse_ratio']):.3f}")

# %%
from IPython.display import Image, display  # noqa: E402

for png in ("time_vs_n.png", "synth1d_ns_gaps.png"):
    display(Image(os.path.join(WORKDIR, png)))
