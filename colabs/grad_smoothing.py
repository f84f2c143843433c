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
# # Gradient Smoothing: coupling layer-wise updates along depth
#
# *Gradient Smoothing: Coupling Layer-wise Updates for Improved Optimization*, ICML 2026
# (small-scale analogue; the window operator, alpha and the variants are reconstructed from
# the abstract, see `icml26_jax/grad_smoothing/README.md`).
#
# In a network of L repeated blocks, the base optimiser's update `u_l` of block l (Adam's
# `m/(sqrt(v)+eps)`, Muon's orthogonalised momentum, SGD's momentum) is replaced by a local
# weighted average over neighbouring blocks, `u~ = ((1 - alpha) I + alpha M) u`, before the
# learning rate and weight decay are applied.
#
# This notebook walks through `icml26_jax.grad_smoothing`:
# 1. the depth operator: rows, spectrum, what it does to constant and alternating updates;
# 2. `depth_smoothing` as an optax transformation, and `smoothed_optimizer` == optax at
#    alpha = 0;
# 3. the LM experiment at smoke size (`train.run`: LR selection, paired seeds, permuted
#    control, results.json, claims, figures).

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
import optax
from IPython.display import Image, display

from icml26_jax.core.results import claims_table
from icml26_jax.grad_smoothing import configs, train, transform

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="grad_smoothing_")
if SMOKE:
    # At smoke size XLA's optimisation passes cost far more than the programs' run time.
    jax.config.update("jax_disable_most_optimizations", True)

# %% [markdown]
# ## 1. The depth operator
#
# `M` averages each block with its neighbours (radius 1), renormalised at the two ends;
# `S = (1 - alpha) I + alpha M` is a low-pass filter along depth: a depth-constant update
# passes unchanged, an alternating one shrinks by `1 - 4 alpha / 3` inside and `1 - alpha` at
# the ends. Its eigenvalues are real in `[1 - 4 alpha / 3, 1]`.

# %%
L, ALPHA = 8, 0.2
print(np.round(transform.window_matrix(5), 3))
S = transform.smoothing_matrix(L, ALPHA)
ev = np.sort(np.linalg.eigvals(S).real)
print(f"eigenvalues of S (L={L}, alpha={ALPHA}):", np.round(ev, 4))
print("min eigenvalue of the symmetric part, alpha = 0.75 / 0.8:",
      [round(float(np.linalg.eigvalsh((T + T.T) / 2).min()), 4)
       for T in (transform.smoothing_matrix(L, 0.75), transform.smoothing_matrix(L, 0.8))])
alt = (-1.0) ** np.arange(L)
print("alternating update after S:", np.round(S @ alt / alt, 4))

# %% [markdown]
# ## 2. As an optax transformation
#
# `depth_smoothing` acts on axis 0 of every leaf under `blocks` (the depth axis that NNX
# scan-over-layers gives every block parameter) and leaves the rest alone.
# `smoothed_optimizer` places it after the base optimiser's preconditioning; at alpha = 0 it
# is numerically optax's own optimiser.

# %%
key = jax.random.key(0)
params = {"blocks": {"kernel": jax.random.normal(key, (L, 6, 6))},
          "embed": jax.random.normal(key, (10, 6))}
grads = jax.tree.map(lambda x: jnp.cos(3 * x), params)
ours = transform.smoothed_optimizer("adamw", 1e-2, alpha=0.0, weight_decay=0.1)
ref = optax.adamw(1e-2, b1=0.9, b2=0.95, weight_decay=0.1, mask=transform.default_wd_mask)
with jax.numpy_dtype_promotion("standard"):
    u1, _ = ours.update(grads, ours.init(params), params)
    u2, _ = ref.update(grads, ref.init(params), params)
diff = max(float(jnp.abs(a - b).max()) for a, b in zip(jax.tree.leaves(u1), jax.tree.leaves(u2)))
print(f"max |smoothed(alpha=0) - optax.adamw| update: {diff:.2e}")
sm = transform.smoothed_optimizer("adamw", 1e-2, alpha=ALPHA)
with jax.numpy_dtype_promotion("standard"):
    u3, _ = sm.update(grads, sm.init(params), params)
print("embedding update unchanged by smoothing:",
      bool(jnp.allclose(u3["embed"], u1["embed"])))

# %% [markdown]
# ## 3. The experiment at smoke size
#
# Stage 1 picks each arm's learning rate on a selection seed; stage 2 trains the evaluation
# seeds with base, smoothed and the permuted-depth control (same spectrum, wrong
# neighbours), all replicas in ONE vmapped program. The default run is
# `python experiments/grad_smoothing.py --config=icml26_jax/grad_smoothing/configs.py:default`.

# %%
c = configs.get_config("smoke")
if SMOKE:  # the notebook test: fewer steps (tests/grad_smoothing runs the 40-step smoke)
    c.steps, c.log_every, c.timing_steps = 20, 10, 3
out = train.run(c, WORKDIR)
print(claims_table(out["claims"]))
m = out["metrics"]
for arm in ("base", "smoothed", "permuted"):
    print(f"{arm}: final validation loss {np.mean(m['final_val_loss'][arm]):.4f}")

# %%
for name in ("val_loss.png", "depth_cka.png"):
    display(Image(filename=os.path.join(WORKDIR, name)))
