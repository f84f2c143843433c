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
# # FML: federated manifold learning under domain shift
#
# *FML: Federated Manifold Learning — Tackling Domain Heterogeneity with Structural Knowledge
# Transfer*, ICML 2026 (poster 60701). See `icml26_jax/fml/`.
#
# Under domain heterogeneity, one prototype per class throws away a class's intra-class
# structure. Clients instead upload *compressed class manifolds* (a few weighted anchors per
# class in feature space); the server lets the domains' manifolds learn from each other with
# an attention-based *Manifold Mutual Learning* (MML) step, and local training pulls features
# onto the fused global manifold. Only the abstract is public, so every FML equation here is a
# reconstruction: the method is **FML (reconstructed from the abstract)**. The data is a
# digits-like domain suite built from scikit-learn's bundled 8 x 8 digits, not the paper's
# benchmarks.
#
# 1. the domain suite: the same base images through four domain transforms;
# 2. what a client uploads: K_m = 4 anchors with masses per class against one prototype;
# 3. MML on the server: beta_m = 0 is the identity, no client attends to its own anchors;
# 4. the experiment at smoke size (`train.run`): FedAvg against FML, per-domain accuracy,
#    claims, figures.

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
import contextlib
import io
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from IPython.display import Image, display

from icml26_jax.core import plotting, results
from icml26_jax.fml import configs, data, manifolds, model, train

WORKDIR = WORKDIR or tempfile.mkdtemp(prefix="fml_")
if SMOKE:
    # At smoke size XLA's optimisation passes cost far more than the programs' run time.
    jax.config.update("jax_disable_most_optimizations", True)

# %% [markdown]
# ## 1. The digits-like domain suite
# 1,797 scikit-learn digits (8 x 8, upsampled to 16 x 16) are split into a train pool and a
# test pool, and every domain is a seeded transform of a base image: `clean` (white on
# black), `thick_noisy` (dilated, blurred, low contrast, grey noise), `colour_texture`
# (random colours on a textured background, polarity flipped half the time) and
# `synthetic_affine` (rotated, scaled, shifted, solid colours with a drop shadow). A domain's
# test set is its transform of the same test-pool images, so each column below is one base
# image seen by the four domains. Four clients, one per domain, hold 100 training images each
# (10 per class): domain skew, no label skew.

# %%
N_CLIENTS = 4
fd = data.make_digits_domains(0, n_clients=N_CLIENTS, domain_counts=(1, 1, 1, 1),
                              per_client=100, test_per_domain=100, val_per_domain=0)
names = list(fd.test)
print("clients' domains:", [fd.domain_names[d] for d in fd.domain], " images per client:",
      fd.n.tolist())
y_test = fd.test["clean"][1]
cols = [int(np.argmax(y_test == c)) for c in range(6)]  # the first test image of classes 0-5
fig, axes = plotting.figure(len(names), len(cols), size=(1.1, 1.1))
for r, name in enumerate(names):
    for k, j in enumerate(cols):
        ax = axes[r, k]
        ax.imshow(np.clip(data.denormalise(fd.test[name][0][j]), 0.0, 1.0))
        ax.set_xticks([])
        ax.set_yticks([])
        if k == 0:
            ax.set_ylabel(name, fontsize=7)
        if r == 0:
            ax.set_title(f"class {y_test[j]}", fontsize=8)
plotting.save(fig, os.path.join(WORKDIR, "domains.png"))
display(Image(os.path.join(WORKDIR, "domains.png")))

# Pixel statistics of each domain's test images (RGB in [0, 1]); "colour spread" is the mean
# over pixels of the standard deviation across R, G, B (0 for a grey domain).
for name in names:
    px = np.asarray(data.denormalise(fd.test[name][0]))  # [M, 16, 16, 3]
    print(f"pixels {name}: mean {px.mean():.3f}, std {px.std():.3f}, "
          f"colour spread {px.std(axis=-1).mean():.3f}")

# %% [markdown]
# ## 2. What a client uploads
# After local training a client computes the features h = f_θ(x) ∈ R^64 of its own images and
# compresses each class's normalised features ĥ with spherical k-means: K_m = 4 unit anchors
# and their masses (cluster fractions). FedProto-style methods upload one class mean instead.
# For the mechanics a freshly initialised CNN is enough (its features already differ by
# domain); section 4 trains it.

# %%
C, K_M, K_G = 10, 4, 8
net = model.CNN(rngs=nnx.Rngs(params=0))
graphdef, params = nnx.split(net, nnx.Param)
n_params = int(sum(a.size for a in jax.tree.leaves(params)))
x, y, mask = jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.mask)
h = jax.jit(jax.vmap(lambda xi: model.features(graphdef, params, xi)))(x)  # [N, n, p]
P = h.shape[-1]
keys = jax.random.split(jax.random.key(0), N_CLIENTS)


def compress_all(k_m):
    """Every client's manifold at once: anchors [N, C, k_m, p], mass [N, C, k_m]."""
    return jax.jit(jax.vmap(lambda hi, yi, mi, ki: manifolds.compress(hi, yi, mi, k_m, ki)))(
        h, y, mask, keys)


man4, man1 = compress_all(K_M), compress_all(1)
a4, m4 = np.asarray(man4.anchors), np.asarray(man4.mass)
for c in range(3):
    print(f"client 0 ({fd.domain_names[fd.domain[0]]}), class {c}: masses of the {K_M} anchors "
          f"{[round(float(v), 2) for v in m4[0, c]]}")
print(f"masses per (client, class) sum to 1: max |sum - 1| = {np.abs(m4.sum(-1) - 1).max():.1e}")

# K_m = 1 is the normalised class mean of ĥ: the single-point summary of the C1 ablation.
hn = np.asarray(manifolds.normalise(h))
onehot = np.asarray(jax.nn.one_hot(y, C)) * np.asarray(mask)[..., None]  # [N, n, C]
means = np.asarray(manifolds.normalise(jnp.einsum("nbc,nbp->ncp", onehot, hn)))
print(f"K_m = 1 anchor vs normalised class mean of ĥ: max |diff| = "
      f"{np.abs(np.asarray(man1.anchors)[:, :, 0] - means).max():.1e}")


def fit(anchors, mass):
    """Mean over samples of cos(ĥ, nearest anchor of its own class with mass > 0)."""
    cos = np.einsum("nbp,nbkp->nbk", hn, anchors[np.arange(N_CLIENTS)[:, None], np.asarray(y)])
    cos = np.where(mass[np.arange(N_CLIENTS)[:, None], np.asarray(y)] > 0, cos, -np.inf)
    return cos.max(-1)[np.asarray(mask)].mean()


print(f"mean cos(ĥ, nearest own-class anchor): K_m = {K_M} {fit(a4, m4):.3f}, "
      f"K_m = 1 {fit(np.asarray(man1.anchors), np.asarray(man1.mass)):.3f}")
protos = jnp.einsum("nbc,nbp->ncp", onehot, h) / onehot.sum(1)[..., None]  # FedProto's upload
up_manifold = man4.anchors[0].size + man4.mass[0].size
up_proto = protos[0].size
print(f"upload: manifold {up_manifold} floats, prototype {up_proto} floats "
      f"(C*K_m*(p+1) = {C * K_M * (P + 1)}, C*p = {C * P}; the CNN has {n_params} weights: "
      f"{100 * up_manifold / n_params:.1f} % of them)")

# %% [markdown]
# The features of one class from the four clients (2-D PCA of ĥ), the clients' anchors
# (size ∝ mass) and their prototypes (×). The domains occupy different regions; where a
# domain's features spread over several modes, the anchors keep them apart, while its
# prototype can land between the modes, where no sample lies.

# %%
cls = 3
pts = np.concatenate([hn[i][np.asarray(y[i] == cls) & np.asarray(mask[i])]
                      for i in range(N_CLIENTS)])
mu = pts.mean(0)
basis = np.linalg.svd(pts - mu, full_matrices=False)[2][:2].T  # [p, 2]
fig, ax = plotting.figure(size=(4.8, 3.6))
for i in range(N_CLIENTS):
    sel = np.asarray(y[i] == cls) & np.asarray(mask[i])
    col = f"C{i}"
    ax.scatter(*((hn[i][sel] - mu) @ basis).T, s=8, alpha=0.5, color=col,
               label=fd.domain_names[fd.domain[i]])
    ax.scatter(*((a4[i, cls] - mu) @ basis).T, s=400 * m4[i, cls] + 1, color=col,
               edgecolors="k")
    ax.scatter(*((means[i, cls] - mu) @ basis), marker="x", s=80, color="k")
ax.set_title(f"class {cls}: features, K_m = {K_M} anchors, prototypes (x)", fontsize=9)
ax.set(xlabel="principal direction 1 of the features", ylabel="principal direction 2")
ax.legend(fontsize=7)
plotting.save(fig, os.path.join(WORKDIR, "class_manifolds.png"))
display(Image(os.path.join(WORKDIR, "class_manifolds.png")))

# %% [markdown]
# ## 3. Manifold Mutual Learning on the server
# For client i and class c, each anchor Â_{i,c,k} is a query; the keys (and values) are the
# anchors of every *other* client holding c, with logits ⟨Â_{i,c,k}, Â_{j,c,l}⟩ / τ_a +
# log π_{j,c,l} (j = i masked). The fused anchor is
# normalise((1 − β_m) A_{i,c,k} + β_m Σ softmax(ℓ) A_{j,c,l}), with β_m = 0.5 and τ_a = 0.1.
# Two properties, measured on `manifolds.mml` itself:
# - β_m = 0 returns the input;
# - no client attends to its own anchors. A key's attention weight a moves with its log-mass
#   (∂a/∂ log π = a(1 − a) > 0 whenever a > 0), so client i's fused anchors must not depend
#   on its own masses at all, while they do depend on the other clients' masses. And a client
#   alone (nothing to attend to) keeps its anchors even at β_m = 1.

# %%
mml = jax.jit(manifolds.mml, static_argnames="iters")  # beta_m, tau_a traced: one compile
fused = mml(man4.anchors, man4.mass, 0.5, 0.1)
ident = mml(man4.anchors, man4.mass, 0.0, 0.1)
print(f"beta_m = 0: max |mml - input| = {float(jnp.abs(ident - man4.anchors).max()):.1e}")
jac = jax.jit(jax.jacfwd(lambda m: mml(man4.anchors, m, 0.5, 0.1)))(man4.mass)
sens = np.abs(np.asarray(jac)).max(axis=(1, 2, 3, 5, 6))  # [N_i, N_j]
off = ~np.eye(N_CLIENTS, dtype=bool)
print(f"own-anchor attention: max |d fused_i / d mass_i| = {np.diag(sens).max():.1e}; "
      f"other clients: min over j != i of max |d fused_i / d mass_j| = {sens[off].min():.1e}")
alone = mml(man4.anchors[:1], man4.mass[:1], 1.0, 0.1)
print(f"one client alone, beta_m = 1: max |mml - input| = "
      f"{float(jnp.abs(alone - man4.anchors[:1]).max()):.1e}")


def agreement(anchors):
    """Mean over held anchors of the best cosine to another client's held anchor (same class)."""
    cos = np.einsum("ickp,jclp->icjkl", anchors, a4)  # [N_i, C, N_j, K, K]
    ok = (m4[None] > 0).transpose(0, 2, 1, 3)[:, :, :, None, :] & off[:, None, :, None, None]
    best = np.where(ok, cos, -np.inf).max(axis=(2, 4))  # [N, C, K]
    return best[m4 > 0].mean()


print(f"cross-domain agreement (mean best cos to another client's anchor): before MML "
      f"{agreement(a4):.3f}, after MML {agreement(np.asarray(fused)):.3f}")
g = jax.jit(manifolds.recompress, static_argnames="k_g")(fused, man4.mass, K_G,
                                                         jax.random.key(1))
print(f"global target: {K_G} anchors per class, class 0 masses "
      f"{[round(float(v), 2) for v in g.mass[0]]}; download {g.anchors.size + g.mass.size} "
      f"floats (C*K_g*(p+1) = {C * K_G * (P + 1)})")

# %% [markdown]
# ## 4. The experiment at smoke size
# `train.run` trains every method from the same data, initialisation and round keys: E local
# epochs of SGD per round, vmapped over clients (and seeds), FedAvg aggregation, then the
# method's server step; the global model is evaluated on every domain's test set every
# `eval_every` rounds, and the final accuracy is the mean of the last `final_evals`
# evaluations. FML adds L_app (a soft nearest-anchor pull onto the own-class global manifold)
# and L_sep (own-class anchors against all anchors) from round 2 on. The smoke config has 4
# clients, FedAvg and FML, 10 rounds; with `SMOKE = True` this notebook runs a lighter
# version of it (4 rounds of 2 local epochs), so its accuracies say nothing about the claims.
# Claims that need a method this run does not train (FedProx, FedProto, FPL, the ablations)
# show "-" and count as not holding. The default run (`python experiments/fml.py`: 7 methods,
# 10 clients, 3 seeds, 40 rounds) is what the claims are about.

# %%
cfg = configs.get_config("smoke" if SMOKE else "default")
if SMOKE:
    cfg.rounds, cfg.eval_every, cfg.final_evals, cfg.local_epochs = 4, 2, 1, 2
    cfg.test_per_domain = 100
with contextlib.redirect_stdout(io.StringIO()):  # run() prints the tables printed below
    res = train.run(cfg, WORKDIR)
meths = res["metrics"]["methods"]
for name, r in meths.items():
    print(f"final accuracy {name}: AVG {r['avg']:.3f} | " + ", ".join(
        f"{d} {r['per_domain'][d]:.3f}" for d in res["metrics"]["domains"]))
b = meths["fml"]["bytes"]
print(f"bytes per round ({cfg.n_clients} clients): weights up {b['weights_up']}, "
      f"FML summary up {b['summary_up']}")
print(results.claims_table(res["claims"]))
held = sum(c["holds"] for c in res["claims"])
print(f"{held}/{len(res['claims'])} claims hold at {'lightened smoke' if SMOKE else 'default'} "
      f"size (run: {res['runtime_s']:.1f} s)")
for png in ("accuracy_vs_round.png", "per_domain.png"):
    display(Image(os.path.join(WORKDIR, png)))
