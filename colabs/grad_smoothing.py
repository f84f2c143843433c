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

# %%
# Colab only: install the package (elsewhere, run the notebook from a checkout of the repo,
# or `pip install -e .` there first).
try:
    import google.colab  # noqa: F401

    IN_COLAB = True
except ImportError:
    IN_COLAB = False

if IN_COLAB:
    import subprocess
    import sys

    # Placeholder: point this at the repository's git URL (or upload a checkout and use
    # `pip install -e /content/icml26_jax`).
    REPO_URL = "https://github.com/<org>/icml26_jax.git"
    subprocess.run(["git", "clone", "--depth=1", REPO_URL, "/content/icml26_jax"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", "/content/icml26_jax"],
                   check=True)

# %%
import jax

jax.config.update("jax_num_cpu_devices", 8)

import os
import sys
import tempfile

try:
    import icml26_jax  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(os.getcwd())))

import jax.numpy as jnp
import numpy as np
import optax
from IPython.display import Image, display

from icml26_jax.core.results import claims_table
from icml26_jax.grad_smoothing import configs, train, transform

SMOKE = os.environ.get("ICML26_SMOKE") == "1"
WORKDIR = os.environ.get("ICML26_WORKDIR") or tempfile.mkdtemp(prefix="grad_smoothing_")
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
