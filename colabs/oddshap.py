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
# # OddSHAP: Shapley values from the odd half of a game
#
# *An Odd Estimator for Shapley Values*, ICML 2026 (Fumagalli, Butler, Kang, Ramchandran,
# Witter). See `icml26_jax/oddshap/README.md`.
#
# 1. the Walsh basis: the Shapley value depends only on the odd component
#    ν_odd(S) = (ν(S) − ν(S^c))/2 — checked on a random game;
# 2. why paired sampling works: paired KernelSHAP is OddSHAP with the singletons as support;
# 3. OddSHAP on a sum of unanimity games with planted 3- and 5-way terms: the oblivious-GBT
#    proxy's exact spectrum picks the odd interactions, and the error falls far below
#    KernelSHAP's at the same budget;
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

jax.config.update("jax_enable_x64", True)  # the Shapley regression and spectra are float64

import os
import tempfile

import jax.numpy as jnp
import numpy as np

from icml26_jax.oddshap import baselines, configs, data, estimator, fourier, games, train

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="oddshap_")
if SMOKE:
    # At smoke size XLA's optimisation passes cost far more than the programs' run time.
    jax.config.update("jax_disable_most_optimizations", True)

# %% [markdown]
# ## 1. The odd component carries the whole Shapley value
# A game on n players is a table of 2ⁿ values. Its Walsh spectrum is one fast Walsh–Hadamard
# transform; the Shapley value of player i is −2 Σ ν̂(T)/|T| over the odd sets T ∋ i.

# %%
n = 8
v = jnp.asarray(np.random.default_rng(0).normal(size=1 << n))
phi = fourier.shapley_from_table(v)
nu_odd, nu_even = fourier.odd_even_split(v)
print("max |phi(Walsh) - phi(enumeration)| =",
      float(np.abs(np.asarray(phi) - baselines.shapley_bruteforce(np.asarray(v))).max()))
print("max |phi(nu_even)| =", float(jnp.abs(fourier.shapley_from_table(nu_even)).max()))
print("max |phi(nu_odd) - phi(nu)| =",
      float(jnp.abs(fourier.shapley_from_table(nu_odd) - phi).max()))

# %% [markdown]
# ## 2. Paired KernelSHAP = OddSHAP on the singletons
# With each coalition sampled together with its complement, the regression's even part
# separates out; the coefficients of the singleton features fit ν_odd alone. Same key, same
# coalitions: the two estimates agree to rounding.

# %%
game = games.table_game(v)
m = 120
single = jax.jit(estimator.make_estimator(n, m, support="singletons"))(jax.random.key(1), game)
lev = jax.jit(baselines.make("leverageshap", n, m))(jax.random.key(1), game)
print("max |OddSHAP(singletons) - LeverageSHAP| =", float(jnp.abs(single.phi - lev.phi).max()))

# %% [markdown]
# ## 3. OddSHAP on a game with planted odd interactions
# `soum30`: 10 unanimity terms of sizes 1, 2, 3, 5 on 30 players (exact Shapley values in
# closed form). The proxy — 100 oblivious trees of depth 6 fitted on the sampled coalitions —
# has an exact Walsh spectrum; its largest odd sets of size ≥ 3 join the singletons in the
# regression support.

# %%
gs = data.load_game_set("soum30", seed=0, explicands=1)
g0 = games.at(gs.game, 0)
keys = jax.random.split(jax.random.key(0), 5)
for m in (600, 1500):
    row, runs = [], {}
    for method in ("oddshap", "kernelshap_paired"):
        est = baselines.make(method, gs.n, m)
        runs[method] = jax.jit(jax.vmap(est, in_axes=(0, None)))(keys, g0)
        mse = np.mean((np.asarray(runs[method].phi) - gs.phi[0]) ** 2)
        row.append(f"{method} {mse:.2e}")
    print(f"m = {m:5d}: MSE " + " | ".join(row))
planted = {tuple(x) for x in gs.planted_odd[0] if x.any()}
r = runs["oddshap"]  # m = 1500, seed 0
chosen = {tuple(np.asarray(x)) for x, ok in zip(r.support[0], r.col_mask[0]) if ok}
print(f"planted odd sets found by the proxy at m = 1500: {len(planted & chosen)}/{len(planted)}")

# %% [markdown]
# ## 4. The experiment at smoke size
# The smoke config runs three games, budgets {10 %, 25 %} of 2ⁿ (or 20n), 3 seeds × 2
# explicands; the default config runs all 9 games × 5 budgets × 5 methods × 10 seeds × 5
# explicands. Under `SMOKE` this walk-through keeps only `soum30` (m = 20n = 600) of the
# smoke run (`tests/oddshap` runs all three games).

# %%
cfg = configs.get_config("smoke" if SMOKE else "default")
if SMOKE:
    cfg.games = ("soum30",)
res = train.run(cfg, WORKDIR)
held = sum(c["holds"] for c in res["claims"])
print(f"{held}/{len(res['claims'])} claims hold at {'smoke' if SMOKE else 'default'} size")

# %%
from IPython.display import Image, display  # noqa: E402

for png in ("mse_vs_budget_soum30.png", "gain_vs_budget.png"):
    display(Image(os.path.join(WORKDIR, png)))
