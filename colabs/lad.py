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
# # Logit-Attention Divergence: attention-guided calibration of position bias
#
# *Logit-Attention Divergence: Mitigating Position Bias in Multi-Image Retrieval via
# Attention-Guided Calibration*, ICML 2026. A model asked "which of these N images matches the
# caption?" answers with a position-biased index token while its attention may still look at
# the right image. LAD calibrates on 5 episodes (each under its N cyclic shifts) a
# *conditional* bias matrix B[i, j] and a static attention prior; at test time the model's own
# attention gives a posterior pi over the ground-truth position and the logits are corrected
# by pi @ B, in the same single forward pass.
#
# 1. digit retrieval episodes (the offline substitute of the COCO benchmarks);
# 2. one episode through the model: logits, attention per layer, pi, corrected scores;
# 3. the experiment (`train.run`: every method, claims, figures).

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

import numpy as np
from IPython.display import Image, display

from icml26_jax.core.results import claims_table
from icml26_jax.lad import adapter, agd, configs, data, report, train

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="lad_")

# %% [markdown]
# ## 1. Episodes
# 1797 digits split by image id (train / calibration / test). An episode is N candidates and
# the caption "find digit c"; the training ground-truth position is skewed (the source of
# the bias), the test one uniform. Cyclic variants move the images and the ground truth
# together, so the ground truth visits every position once.

# %%
pool = data.load_pool(0)
print("split sizes (train, cal, test):", np.bincount(pool.split))
print("training position distribution, N = 4:", data.position_probs(4))
ep = data.make_episodes(pool, "test", 4, 2, "adversarial", np.full(4, 0.25),
                        np.random.default_rng(0))
print("query classes", ep.query, "ground truth", ep.gt, "candidate classes",
      pool.labels[ep.image_ids].tolist())
cyc = data.cyclic_variants(ep)
print("ground truth of the 4 cyclic variants of episode 0:", cyc.gt[:4])
b = data.tokenize(ep)
print("tokens of episode 0:", b.tokens[0, :data.seq_len(4)].tolist())
print("image spans (with delimiters):", b.spans.tolist())

# %% [markdown]
# ## 2. The experiment
# Train the retrieval transformer on skewed positions (smoke size here), freeze it, then
# calibrate on 5 episodes and evaluate vanilla, PriDe, permutation averaging, the attention
# readouts and LAD. `python experiments/lad.py` runs the default.

# %%
c = configs.get_config("smoke")
if SMOKE:
    c.train_steps, c.chunk, c.n_test, c.n_cal_sweep = 40, 20, 40, 10
res = train.run(c, WORKDIR)
print(claims_table(res["claims"]))

# %% [markdown]
# ## 3. One episode through LAD
# The trained model returns the answer logits and the attention row of the answering token
# at every layer from one pass; the candidate layers' image scores (Eq. 6) against the
# calibrated prior give pi (Eqs. 8-12), and the corrected scores subtract pi @ B.

# %%
g, p, _ = train.train(c, pool, os.path.join(WORKDIR, "ckpt", "train"))  # restored
scorer = adapter.FlaxRetrievalScorer(g, p)
layers = train.candidate_layers(c)
cal_ep = data.make_episodes(pool, "cal", 4, 5, "random", np.full(4, 0.25),
                            np.random.default_rng(1))
cal = agd.calibrate(scorer, cal_ep, layers)
B, log_gamma = agd.bias_matrix(cal.l_obs)
print(f"calibration: {cal.n_forward} forward passes, log gamma {float(log_gamma):.3f}")
print("bias matrix B (rows: ground truth, columns: prediction):\n", np.round(np.asarray(B), 2))
logp, sc = scorer.score(ep, layers)
pi = agd.attention_posterior(sc, cal.a_prior)
lad = agd.lad_scores(logp, sc, B, cal.a_prior)
for e in range(2):
    print(f"episode {e} (ground truth {ep.gt[e] + 1}): P = {np.round(np.exp(logp[e]), 3)}, "
          f"pi = {np.round(np.asarray(pi[e]), 3)}, LAD picks {int(np.argmax(lad[e])) + 1}")
print(f"test forward passes: {scorer.n_forward - cal.n_forward} for 2 episodes")

# %%
print(report.tables(res["metrics"]))
for name in res["figures"]:
    display(Image(filename=name))
