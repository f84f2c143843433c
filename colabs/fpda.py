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
# # FPDA: forensic prompting and a dual-action policy for forgery localisation
#
# *Forensic Prompting with Dual-Action Policy Optimization for Vision-Language Forgery
# Detection and Localization*, ICML 2026. No full text or code is public, so the method in
# `icml26_jax.fpda` is a reconstruction from the abstract and the closest published designs:
#
# 1. **Forensic Prompting Module (FPM)**: a fixed bank of 12 structured prompts
#    (`[polarity] [trace] in [domain] domain at [scale] scale`) in four routable groups
#    (noise, compression, geometry, blending) plus two authentic prompts. A small text
#    encoder embeds them; cosine similarities with the image's patch features are evidence
#    maps; a *route* (a non-empty subset of groups) masks which prompts reach the decoder.
#    Optional free text enters through a **reliability gate**.
# 2. **Dual-Action Policy Optimization (DAPO)**: a per-image policy picks the route and the
#    number of mask-refinement steps r, trained with group-relative advantages and PPO-clip on
#    a reward of mask F1 + detection accuracy - a refinement cost.
#
# The data are ForgeBench-S: real photos shipped inside scikit-image / scikit-learn, with
# splices, copy-moves and inpaintings under exact masks, and one post-processing chain for
# authentic and forged images alike.

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
import tempfile

import jax.numpy as jnp
import numpy as np
from IPython.display import Image, display

from icml26_jax.core import plotting, results
from icml26_jax.fpda import configs, filters, prompts, train
from icml26_jax.fpda import data as fdata

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="fpda_")
if SMOKE:
    # At smoke size XLA's optimisation passes cost far more than the programs' run time.
    jax.config.update("jax_disable_most_optimizations", True)

# %% [markdown]
# ## 1. ForgeBench-S
#
# Each image is a random rescaled crop of a bundled photo. Half get an edit with an exact
# mask; all go through the same chain (resize, blur, noise, JPEG), so the chain cannot give
# the label away. The SRM residual and the 8x8 block-DCT energy are the fixed forensic
# filters the encoder sees beside the RGB image.

# %%
split = fdata.make_split("train", 12, 0, fdata.ForgeryConfig(img_size=64))
x = jnp.asarray(split.images)
srm = np.asarray(filters.srm_residual(x))
dct = np.asarray(filters.block_dct_energy(x))
show = [i for i in range(12) if split.labels[i]][:4]
fig, axes = plotting.figure(4, len(show), size=(1.8, 1.8))
for j, i in enumerate(show):
    axes[0, j].imshow(split.images[i])
    axes[0, j].set_title(fdata.KINDS[split.kind[i]], fontsize=8)
    axes[1, j].imshow(split.masks[i], cmap="gray")
    axes[2, j].imshow(np.abs(srm[i, ..., 0]), cmap="magma")
    axes[3, j].imshow(dct[i], cmap="viridis")
for ax in axes.ravel():
    ax.axis("off")
display(fig)
print(f"forged share {split.labels.mean():.2f}; mask area of forged images "
      f"{split.masks[split.labels > 0].mean(axis=(1, 2)).round(3).tolist()}")
print("example description:", " ".join(prompts.VOCAB[t] for t in split.true_text_ids[show[0]]
                                         if t))

# %% [markdown]
# ## 2. The prompt bank and the 15 routes
#
# Prompts are fixed token sequences; a route is a bit per group. Routing masks the prompts
# (never a Python branch), so one compiled program serves all 15 routes.

# %%
for i, p in enumerate(prompts.PROMPT_BANK):
    group = prompts.GROUPS[p.group] if p.group >= 0 else "always on"
    print(f"{i:2d} [{group:11s}] {p.text}")
print("route 5 =", prompts.ROUTES[5].tolist(), "-> prompt mask",
      prompts.prompt_mask(prompts.ROUTES[5]).tolist())

# %% [markdown]
# ## 3. The experiment
#
# Supernet (random routes and r during training, descriptions on half the images at
# reliability 0.7), the two separately trained baselines (no prompt, one generic prompt),
# DAPO on the frozen supernet, then every method on the in-distribution, cross-manipulation
# (inpainting, never trained on) and robustness (JPEG 50-70, x0.5 resize) test splits. With
# `SMOKE = True` this is the smoke config (32 x 32, 40 steps: the numbers mean nothing)
# without the generic-prompt baseline (one network less to train; `tests/fpda` runs the whole
# smoke config); the default config takes about 10 minutes on 2 CPU cores.

# %%
config = configs.get_config("smoke" if SMOKE else "default")
if SMOKE:
    config.methods = tuple(m for m in config.methods if m != "fixed_prompt")
res = train.run(config, WORKDIR)
ok = sum(c["holds"] for c in res["claims"])
print(f"{ok}/{len(res['claims'])} claims hold at {config.variant} size "
      f"({res['runtime_s']:.0f} s)")

# %%
for name in ("masks_grid.png", "action_hist.png", "gate_hist.png"):
    display(Image(filename=os.path.join(WORKDIR, name)))

# %% [markdown]
# ## 4. What the policy chose
#
# DAPO's greedy actions on the in-distribution test split: a histogram over routes and r.
# A per-image policy spreads its choices; a collapsed one is a fixed action in disguise.

# %%
f = res["metrics"]["splits"]["test_id"]["fpda"]
print("r histogram:", f["r_hist"], "mean r", round(f["mean_r"], 2))
top = np.argsort(f["route_hist"])[::-1][:3]
for t in top:
    groups = [g for g, on in zip(prompts.GROUPS, prompts.ROUTES[t]) if on]
    print(f"route {t:2d} {groups}: {f['route_hist'][t]} images")
print("action entropy (nats):", round(f["action_entropy"], 3))
saved = results.load_results(WORKDIR)
print("claims written:", len(saved["claims"]))
