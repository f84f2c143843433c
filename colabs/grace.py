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
# # GRACE: confidence-gated distillation and relational alignment for INT4 VLMs
#
# *Gated Relational Alignment via Confidence-based Distillation for Efficient VLMs*, ICML 2026.
# Quantisation-aware training (group-wise LSQ, INT4) of a student VLM, distilled from a larger
# FP teacher with decoupled KD whose per-token weight is the teacher's confidence
# (g = exp(-H / log V)), centred-kernel alignment of the visual tokens' penultimate features,
# and a Lagrangian controller that moves the distillation weight beta by dual ascent.
#
# 1. the DigitGrid-VQA substitute (questions with multi-token answers about 2x2 digit grids);
# 2. the pieces: an LSQ layer, the confidence gate, CKA, the controller, INT4 packing;
# 3. the experiment (`train.run`: every arm, the INT4 export, claims, figures).

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
from icml26_jax.grace import configs, controller, data, int4, losses, lsq, report, train

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="grace_")

# %% [markdown]
# ## 1. DigitGrid-VQA
# Digits are split by image id (70 / 15 / 15) before the grids are composed. Five question
# templates; answers are several tokens ending in `<eos>`, and the loss falls on the
# positions that predict them.

# %%
splits = data.load_digit_splits(0)
print("split sizes (train, val, test):", np.bincount(splits.split))
d = data.make_vqa(splits, "test", 5, np.random.default_rng(0))
for i in range(5):
    q = data.decode(d.tokens[i, data.N_VISUAL:d.answer_start[i]])
    a = data.decode(data.answers_of(d)[i])
    print(f"grid {d.digits[i].tolist()}: {q} -> {a}")
print("loss positions of question 0:", np.flatnonzero(d.loss_mask[0]).tolist(),
      "answer starts at", int(d.answer_start[0]))

# %% [markdown]
# ## 2. The pieces
# LSQ fake-quantisation puts every weight on the grid s * q, q in [-8, 7]; the packed INT4
# layer holds two codes per byte and f16 scales. The gate is 1 for a confident teacher token
# and 1/e for a uniform one. CKA is 1 for identical features and invariant to rotations.

# %%
w = jax.random.normal(jax.random.key(0), (64, 192)) * 0.1
ls = lsq.mse_init_log_scale(w, 4, 64)
w_hat = lsq.fake_quant(w, ls, 4, 64)
codes = np.asarray(w_hat).T.reshape(192, 1, 64) / np.exp(np.asarray(ls))[..., None]
print("distinct codes of the fake-quantised layer:", np.unique(np.round(codes)).size)
p = int4.pack_int4(np.asarray(w), np.asarray(ls), 64)
print(f"bytes: fp32 {w.size * 4}, packed {p.qweight.nbytes + p.scales.nbytes}")
z = jnp.stack([jnp.full((data.VOCAB_SIZE,), 0.0), jnp.zeros((data.VOCAB_SIZE,)).at[3].set(30.0)])
gate = np.asarray(losses.confidence_gate(z))
print("gate (uniform teacher, confident teacher):", np.round(gate, 4))
F = jax.random.normal(jax.random.key(1), (16, 8))
R = jnp.linalg.qr(jax.random.normal(jax.random.key(2), (8, 8)))[0]
print("CKA(F, F R) =", round(float(losses.cka(losses.gram(F), losses.gram(F @ R))), 6))
cfg = controller.IBConfig(tau=1.0, eta=0.1, qat_steps=10)
s = controller.ib_init(cfg)
for t, g in enumerate([3.0, 3.0, 0.2]):
    s = controller.ib_update(s, jnp.float32(g), t, cfg)
    print(f"step {t}: L_GDKD {g} -> EMA {float(s.ema):.3f}, beta {float(s.beta):.3f}")

# %% [markdown]
# ## 3. The experiment
# Vision tower pre-training, the FP teacher, the FP student (T_s steps, then T_q more), PTQ,
# and the three QAT arms from the T_s checkpoint; GRACE is exported to packed INT4, saved and
# restored with orbax and evaluated. Smoke size here; `python experiments/grace.py` runs the
# default.

# %%
c = configs.get_config("smoke")
if SMOKE:
    c.vision_steps = c.teacher_steps = c.student_steps = c.qat_steps = 20
    c.arms = ("teacher_fp", "student_fp", "ptq_rtn", "grace")
    c.n_test = c.n_val = 200
res = train.run(c, WORKDIR)
print(claims_table(res["claims"]))

# %%
print(report.tables(res["metrics"]))
for name in res["figures"]:
    display(Image(filename=name))
