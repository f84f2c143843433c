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
# # CoF-T2I: a video model as a pure visual reasoner for text-to-image
#
# *CoF-T2I: Video Models as Pure Visual Reasoners for Text-to-Image Generation*, ICML 2026.
# A text-to-video model is fine-tuned to generate a **three-frame trajectory** and the last
# frame is the image: F1 a semantic draft, F2 semantically corrected but visually plain,
# F3 the refined output. Every frame is encoded *independently* by the frozen VAE, and the
# video DiT learns all frames *jointly* with vanilla flow matching.
#
# Here, at laptop scale (`icml26_jax.cof_t2i`): procedural GenEval-schema scenes (shapes,
# colours, counts, relations; 20 % of colour-shape pairs and relation triples held out), a
# conv frame autoencoder (32 x 32 x 3 -> 8 x 8 x 8), a 0.5 M-parameter video DiT with full
# attention over all frame tokens, and a pixel-only GenEval evaluator.

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

import numpy as np
from IPython.display import Image, display

from icml26_jax.cof_t2i import configs, evaluator, scenes, train
from icml26_jax.cof_t2i import trajectories as traj
from icml26_jax.core import plotting, results

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="cof_t2i_")

# %% [markdown]
# ## 1. Prompts, scenes and a Chain-of-Frame trajectory
#
# Prompts follow GenEval's six tags and templates, with GenEval's metadata (`include`,
# `exclude`, `position`). A trajectory is verified on its scene graph: F2 and F3 satisfy the
# prompt, the draft F1 has exactly one error of the prompt's type.

# %%
rng = np.random.default_rng(0)
fig, axes = plotting.figure(len(scenes.TAGS), 3, size=(1.4, 1.4))
for r, tag in enumerate(scenes.TAGS):
    prompt, md = scenes.sample_prompt(tag, rng)
    tr = traj.build(md, traj.sample_mode(rng), rng)
    verdicts = [evaluator.evaluate(f, md)[0] for f in tr.frames]
    print(f"{tag:13s} {prompt!r:45s} mode={tr.mode:13s} evaluator on F1/F2/F3: {verdicts}")
    for f in range(3):
        axes[r, f].imshow(tr.frames[f], interpolation="nearest")
        axes[r, f].set_xticks([])
        axes[r, f].set_yticks([])
    axes[r, 0].set_ylabel(tag, fontsize=6)
for f, name in enumerate(("F1 draft", "F2 corrected", "F3 refined")):
    axes[0, f].set_title(name, fontsize=7)
display(fig)

# %% [markdown]
# ## 2. The evaluator reads pixels only
#
# Colour by hue and chroma, connected components, a shape discriminant fitted once on
# training renders; then GenEval's rules. `refinement_score` is a fixed logistic model on
# background texture, outline contrast and shading (the stand-in for Imagine-Bench).

# %%
rows = train.test_metadata(2 if SMOKE else 5)
ok, rs = {"flat": [], "refined": []}, {"flat": [], "refined": []}
for md in rows:
    scene = scenes.sample_scene(md, rng)
    for style in ("flat", "refined"):
        img = scenes.render(scene, style)
        ok[style].append(evaluator.evaluate(img, md)[0])
        rs[style].append(evaluator.refinement_score(img))
for style in ok:
    print(f"{style:8s}: evaluator accuracy {np.mean(ok[style]):.3f}, mean refinement score "
          f"{np.mean(rs[style]):.3f}")
print("refinement AUC (flat vs refined):", round(train.auc(np.array(rs["flat"]),
                                                            np.array(rs["refined"])), 3))

# %% [markdown]
# ## 3. Train and compare the arms
#
# `cof` learns (F1, F2, F3); `single` learns F3 alone (same width, optimiser, data stream and
# CFG rule); the default config adds `single_3x` (three times the steps, about `cof`'s
# FLOPs) and `repeat` (F3, F3, F3). With `SMOKE = True` this is the smoke config (d=32),
# cut further to 8 steps for the notebook test: the numbers mean nothing; the default config
# takes about 15 minutes on 2 CPU cores.

# %%
config = configs.get_config("smoke" if SMOKE else "default")
if SMOKE:  # the notebook test: still every stage, arm, claim and figure, on less work
    jax.config.update("jax_disable_most_optimizations", True)  # compiling dominates here
    config.update(pool=64, ae_steps=10, steps=8, chunk=8, sample_steps=2, renders_per_prompt=2)
res = train.run(config, WORKDIR)
held = sum(c["holds"] for c in res["claims"])
print(f"{held}/{len(res['claims'])} claims hold at {config.variant} size "
      f"({res['runtime_s']:.0f} s)")

# %%
m = res["metrics"]
for arm, a in m["arms"].items():
    print(f"{arm:10s} Overall {a['geneval']['all']['overall']:.3f}  GFLOPs/step "
          f"{m['flops_per_step'][arm] / 1e9:.2f}")
for f, v in m["arms"]["cof"]["frames"].items():
    print(f"cof {f}: Overall {v['geneval']['all']['overall']:.3f}, refinement "
          f"{v['refinement']:.3f}")
for name in ("cof_trajectories.png", "per_frame_scores.png"):
    display(Image(filename=os.path.join(WORKDIR, name)))
saved = results.load_results(WORKDIR)
print("claims written:", len(saved["claims"]))
