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
# # SafeFlowRL: geometric control of out-of-distribution shift in safe offline RL
#
# *Geometric Control of Out-of-Distribution Shift in Safe Offline RL*, ICML 2026. A policy is
# a **conditional normalizing flow** a = f(z; s), z ~ N(0, I). Because f is a bijection, a
# change of the base distribution carries over to the policy with known bounds: the TV and KL
# between the refined and the prior policy equal those of the latents (P1), and the
# Wasserstein distance is at most L_f times the latent one (P2). So the method
#
# 1. trains HJ-reachability and reward critics on the offline data (FISOR's critics),
# 2. fits a **flow prior** with FISOR's feasibility weights, so that the core of N(0, I) maps to
#    feasible, high-advantage actions,
# 3. trains a **latent refiner** that moves each base sample by at most eps in latent space,
#    first for safety (g_h), then for reward (g_r), and
# 4. deploys by sampling 16 refined candidates and picking by the learned Q_h / Q_r.
#
# Everything runs on PointRobotHazard, a JAX reach-avoid task (FISOR's PointRobot dynamics),
# with an offline dataset the package generates. No paper numbers exist to compare with: the
# claims are relative to baselines trained on the same data.

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
from flax import nnx
from IPython.display import Image, display

from icml26_jax.safe_flow_rl import bounds, configs, data, envs, train
from icml26_jax.safe_flow_rl.model import ConditionalRealNVP

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="safe_flow_rl_")
if SMOKE:
    # At smoke size XLA's optimisation passes cost far more than the programs' run time.
    jax.config.update("jax_disable_most_optimizations", True)

# %% [markdown]
# ## 1. The task and its analytic feasible set
#
# A unicycle (x, y, v, theta) accelerates and turns with u in [-1, 1]^2 (Euler, dt = 0.05,
# 300 steps) towards a goal disc at (2.2, 2.2), past two hazard discs; h(s) = 0.8 - the
# distance to the nearest hazard centre, and h > 0 is a violation. `avoidable` brakes at full
# deceleration while turning either way: a state is avoidable if one of the two paths never
# enters a hazard. At speed 2 heading north-east, a band in front of each hazard is already
# lost.

# %%
params = envs.EnvParams()
X, Y, mask = envs.feasible_grid(params, n=100, v=2.0, theta=float(np.pi / 4))
print(f"avoidable share of the arena at v = 2, theta = pi/4: {float(mask.mean()):.3f}")
obs, st = envs.reset(jax.random.key(0), params)
_, st1, r, h, done, info = envs.step(jax.random.key(0), st, jnp.array([1.0, -0.5]), params)
print(f"start (x, y, v) = ({float(st.x):.2f}, {float(st.y):.2f}, {float(st.v):.2f}); "
      f"one step: reward {float(r):+.4f}, h {float(h):+.3f}, obs dim {obs.shape[0]}")

# %% [markdown]
# ## 2. The offline data
#
# Four behaviours (30 % reckless goal-seekers that cut through a hazard, 30 % cautious PD
# experts with a hazard repulsion, 20 % noisy experts, 20 % random) rolled out with one
# jitted `vmap` of a `lax.scan`. Imitation is unsafe here: many episodes violate, and most of
# the best-return ones do.

# %%
cfg = configs.get_config("smoke")
if SMOKE:  # the notebook test: fewer steps still exercise every stage (claims 1, 11, 12 hold)
    cfg.critic_steps, cfg.flow_steps, cfg.refiner_steps, cfg.actor_steps = 40, 40, 20, 20
    cfg.chunk, cfg.eval_episodes, cfg.val_episodes = 40, 4, 4
    cfg.select_margins_sd = (0.0, 0.3)
    cfg.eps_sweep = (0.5, float("inf"))  # ours (latent_budget) and the unbounded refiner
ds, info = data.load_or_make_dataset(params, cfg.dataset_size, cfg.seed, WORKDIR)
summ = data.dataset_summary(ds)
print(f"{len(ds['rewards'])} transitions, {summ['num_episodes']} episodes; violating: "
      f"{summ['violation_fraction']:.2f}, among the top-decile returns: "
      f"{summ['top_violation_fraction']:.2f}")
for b in data.BEHAVIOURS:
    print(f"  {b:9s} violation rate {summ[b + '_violation']:.2f}")

# %% [markdown]
# ## 3. The geometry, on a small random flow
#
# P1: shifting the latents by delta moves the policy by exactly KL = ||delta||^2 / 2, whatever
# the flow. The Monte-Carlo estimate below uses only the flow's forward map, inverse and
# log-determinants, so a wrong inverse or log-det would show. P2: the action-space W2 of a
# latent move of size <= eps is at most L_f * eps, with L_f estimated by `jax.jacfwd` + SVD.

# %%
flow = ConditionalRealNVP(2, 11, (32, 32), 6, 2.0, rngs=nnx.Rngs(0))
g, p = nnx.split(flow, nnx.Param)
p = jax.tree.map(lambda x: x + 0.3 * jax.random.normal(jax.random.key(1), x.shape), p)
flow = nnx.merge(g, p)  # conditioners start at zero (f = tanh); perturb them
s = jnp.asarray(obs)
delta = jnp.array([0.3, -0.4])
est, se = bounds.mc_kl_through_flow(flow, s, delta, jax.random.key(2), 10_000)
print(f"KL through the flow: {float(est):.4f} +- {float(se):.4f}  (closed form "
      f"{float(delta @ delta) / 2:.4f})")
z0 = jax.random.normal(jax.random.key(3), (2048, 2))
z2 = z0 + 0.5 * jnp.array([0.6, 0.8])  # a latent move of norm exactly 0.5
lip, _ = bounds.lipschitz_estimate(flow, s, jnp.concatenate([
    bounds.latent_ball(jax.random.key(4), 512, 2, 3.5), z0[:512], z2[:512]]))
w2 = bounds.coupling_w2(flow, s, z0, z2)
print(f"W2 through the flow <= {float(w2):.3f}; bound L_f * eps = {float(lip) * 0.5:.3f}")

# %% [markdown]
# ## 4. The experiment at smoke size
#
# `train.run` trains everything for one seed (critics, weighted and unweighted flows, the
# refiner at eps in {0.1, 0.25, 0.5, 1, inf}, BC-All, BC-Safe, BC-Lag, FISOR-lite), evaluates
# every policy from the same 20 starts, and evaluates the smoke claims (1, 11, 12). The
# default config (3 seeds, 100k transitions, 12k critic steps, 100 episodes) adds the other
# eleven claims; its table is in the package README.

# %%
out = train.run(cfg, WORKDIR)
for c in out["claims"]:
    print(f"claim {c['name']}: {c['measured']:.3f} ({c['threshold']}) "
          f"{'holds' if c['holds'] else 'FAILS'}")
for name in ("feasible_region", "eps_sweep", "trajectories", "bound_tightness"):
    display(Image(os.path.join(WORKDIR, name + ".png")))
