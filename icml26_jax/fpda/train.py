"""The FPDA experiment: data, supervised training (supernet and the two separately trained
baselines), DAPO, and evaluation of every method on every test split (spec §Experiment).

``run(config, workdir)`` -> results dict (also written to ``<workdir>/results.json`` with the
claims of spec §Claims and the figures). Every stage is resumable: the data are cached as
``.npz``, each network trains in orbax-checkpointed chunks, and a killed run restarts where
it stopped.
"""

from __future__ import annotations

import logging
import os
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from icml26_jax.core import checkpoint, distributed, results
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.core import optim
from icml26_jax.fpda import baselines, configs, dapo, metrics, prompts
from icml26_jax.fpda import data as data_lib
from icml26_jax.fpda import model as model_lib

PAPER = "fpda"
TEST_SPLITS = ("test_id", "test_xmanip", "test_robust")
NETS = ("supernet", "no_prompt", "fixed_prompt")


def _log(msg, *args):
    logging.getLogger("absl").info(msg, *args)


def forgery_config(c) -> data_lib.ForgeryConfig:
    return data_lib.ForgeryConfig(img_size=int(c.img_size),
                                  text_reliability=float(c.text_reliability))


def load_data(c, workdir: str | None) -> dict[str, data_lib.Split]:
    """Every split of the run (cached under ``<workdir>/cache``)."""
    sizes = {"train": c.n_train, "val": c.n_val, "test_id": c.n_test,
             "test_xmanip": c.n_test, "test_robust": c.n_test}
    if workdir is None:
        return data_lib.load_splits(sizes, int(c.seed), forgery_config(c), None)
    # Process 0 generates and caches the splits; the other processes then read the cache.
    cache = os.path.join(workdir, "cache")
    return distributed.primary_first(
        lambda: data_lib.load_splits(sizes, int(c.seed), forgery_config(c), cache), "fpda_data")


def net_kwargs(c, name: str) -> dict:
    return {"supernet": baselines.supernet_config, "no_prompt": baselines.no_prompt_config,
            "fixed_prompt": baselines.fixed_prompt_config}[name](c)


def build(c, name: str, seed: int) -> model_lib.FPDANet:
    return model_lib.FPDANet(**net_kwargs(c, name), rngs=nnx.Rngs(seed))


# --------------------------------------------------------------------------- supervised

def sup_optimizer(c) -> optax.GradientTransformation:
    sched = optax.cosine_decay_schedule(float(c.lr), int(c.steps_sup))
    return optim.promotion_safe(optax.adamw(sched, weight_decay=float(c.weight_decay)))


def make_sup_step(graphdef, rest, tx, c, supernet: bool):
    """One supervised step on a random batch drawn inside the program.

    The supernet samples (rho, r) uniformly per image and attaches a description to a
    ``text_fraction`` of the images (the stored, p_rel = 0.7 texts); the baselines use r = 2
    and no text.
    """
    batch, R = int(c.batch), int(c.max_refine)

    def step(carry, i, arrays, key):
        params, opt = carry
        images, masks, labels, text_ids, text_ok = arrays
        k = jax.random.fold_in(key, i)
        k1, k2, k3, k4 = jax.random.split(k, 4)
        idx = jax.random.randint(k1, (batch,), 0, images.shape[0])
        x, mk, y = images[idx], masks[idx], labels[idx]
        if supernet:
            route_idx = jax.random.randint(k2, (batch,), 0, len(prompts.ROUTES))
            r = jax.random.randint(k3, (batch,), 0, R + 1)
            tmask = jax.random.bernoulli(k4, float(c.text_fraction), (batch,))
            tids, tok = text_ids[idx], text_ok[idx]
        else:
            route_idx = jnp.full((batch,), prompts.ALL_ROUTE)
            r = jnp.full((batch,), baselines.BASELINE_R)
            tmask = tids = tok = None
        route = jnp.asarray(prompts.ROUTES)[route_idx]

        def loss_fn(p):
            m = nnx.merge(graphdef, p, rest)
            enc = m.encode(x)
            out = m.decode(enc, route, r, tids, tmask)
            return model_lib.supervised_loss(m, enc, out, mk, y, r, tmask, tok,
                                             gamma=float(c.gamma))

        (loss, parts), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
        u, opt = tx.update(g, opt, params)
        return (optax.apply_updates(params, u), opt), {"loss": loss, **parts}

    return step


def sup_setup(c, name: str):
    """A fresh network ``name`` and ``train_net``'s jitted step ``one(carry, i, arrays, key)``:
    returns (graphdef, params, rest, tx, one). The step gets the data as arguments
    (``sup_args``), never as constants closed over: closed over, XLA embeds them in the
    program (2,000 images: 196 MB of HLO, seconds to compile, and a copy per device)."""
    net = build(c, name, int(c.seed))
    graphdef, params, rest = nnx.split(net, nnx.Param, ...)
    tx = sup_optimizer(c)
    step = make_sup_step(graphdef, rest, tx, c, supernet=(name == "supernet"))
    return graphdef, params, rest, tx, jax.jit(step, donate_argnums=(0,))


def sup_args(c, name: str, train: data_lib.Split) -> tuple:
    """The data arguments ``(arrays, key)`` of ``sup_setup``'s step."""
    arrays = tuple(jnp.asarray(a) for a in (train.images, train.masks, train.labels,
                                            train.text_ids, train.text_ok))
    return arrays, jax.random.fold_in(jax.random.key(int(c.seed)), NETS.index(name))


def train_net(c, name: str, train: data_lib.Split, workdir: str):
    """Trains one network for ``steps_sup`` steps; returns (graphdef, params, rest, logs)."""
    graphdef, params, rest, tx, one = sup_setup(c, name)
    args = sup_args(c, name, train)
    steps = int(c.steps_sup)
    logs = {"loss": np.zeros((steps,), np.float32)}

    def advance(carry, lg, start, n):
        # jax.device_put: the carry is the host copy of the previous chunk (see below).
        carry, losses = checkpoint.steps_loop(one, jax.device_put(carry), start, n, "loss",
                                              args, convolutional=True)
        lg["loss"][start:start + n] = losses
        # Every process trains the same network on its first device; the checkpointed
        # state is a host copy (orbax writes it from process 0).
        return jax.device_get(carry), f"loss {float(np.mean(lg['loss'][start:start + n])):.4f}"

    fp = checkpoint.config_fingerprint({"net": name, **_train_fields(c)})
    (params, _), logs = checkpoint.run_chunks(
        os.path.join(workdir, "ckpt", name), fingerprint=fp, state=(params, tx.init(params)),
        logs=logs, steps=steps, chunk=int(c.chunk), advance=advance, name=name)
    return graphdef, params, rest, logs


def _train_fields(c) -> dict:
    keys = ("seed", "img_size", "n_train", "text_reliability", "text_fraction", "width",
            "steps_sup", "batch", "lr", "weight_decay", "max_refine", "gamma")
    return {k: c[k] for k in keys}


# --------------------------------------------------------------------------- forward passes

def _routes(route_idx):
    return jnp.asarray(prompts.ROUTES)[route_idx]


def policy_state_raw(m: model_lib.FPDANet, enc: model_lib.Enc):
    """stopgrad[f_bar, s_bar_1..K, mean pixel entropy of sigmoid(M_0)] with M_0 decoded under
    the all-groups route (one decoder pass): [B, d + K + 1]."""
    b = enc.f_bar.shape[0]
    out = m.decode(enc, _routes(jnp.full((b,), prompts.ALL_ROUTE)), jnp.zeros((b,), jnp.int32),
                   num_steps=0)
    p = jnp.clip(jax.nn.sigmoid(out.mask_logits[:, 0]), 1e-6, 1 - 1e-6)
    ent = -(p * jnp.log(p) + (1 - p) * jnp.log1p(-p)).mean((-2, -1))
    return jax.lax.stop_gradient(jnp.concatenate([enc.f_bar, enc.s_bar, ent[:, None]], -1))


def make_eval_fn(graphdef, rest, c):
    """jitted ``(params, x, route_idx, r, text_ids, text_mask) -> dict`` of the selected mask
    logits M_r, M_0 (same route), y_logit, gate and the raw policy state."""

    @jax.jit
    def fwd(params, x, route_idx, r, text_ids, text_mask):
        m = nnx.merge(graphdef, params, rest)
        enc = m.encode(x)
        out = m.decode(enc, _routes(route_idx), r, text_ids, text_mask)
        m_r = jnp.take_along_axis(out.mask_logits, r[:, None, None, None], 1)[:, 0]
        return {"mask_r": m_r, "mask_0": out.mask_logits[:, 0], "y_logit": out.y_logit,
                "gate": out.gate, "state": policy_state_raw(m, enc) if m.mode == "bank"
                else jnp.zeros((x.shape[0], 1))}

    return fwd


def make_all_actions_fn(graphdef, rest, c):
    """jitted ``(params, x, masks, labels) -> rewards [B, 15, R + 1]`` of every joint action
    (B4's validation search; one decode per route gives every r)."""
    R = int(c.max_refine)

    @jax.jit
    def all_actions(params, x, masks, labels):
        m = nnx.merge(graphdef, params, rest)
        enc = m.encode(x)
        b = x.shape[0]

        def per_route(ridx):
            out = m.decode(enc, _routes(jnp.full((b,), ridx)), jnp.zeros((b,), jnp.int32))
            rs = jnp.arange(R + 1)
            return dapo.reward(out.mask_logits, out.y_all, masks[:, None], labels[:, None],
                               rs[None], float(c.refine_cost))  # [B, R + 1]

        return jax.lax.map(per_route, jnp.arange(len(prompts.ROUTES))).transpose(1, 0, 2)

    return all_actions


# --------------------------------------------------------------------------- DAPO

class Detector:
    """A trained (frozen) network: graphdef, params, rest, and its jitted forward."""

    def __init__(self, c, name, graphdef, params, rest):
        self.name, self.graphdef, self.params, self.rest = name, graphdef, params, rest
        self.fwd = make_eval_fn(graphdef, rest, c)

    def model(self, params=None):
        return nnx.merge(self.graphdef, self.params if params is None else params, self.rest)

    def on(self, mesh) -> "Detector":
        """This detector with its parameters replicated on ``mesh`` (None: unchanged)."""
        if mesh is None:
            return self
        d = object.__new__(Detector)
        d.__dict__.update(self.__dict__)
        d.params, d.rest = jax.tree.map(lambda a: mesh_lib.replicate(np.asarray(a), mesh),
                                        (self.params, self.rest))
        d.mesh = mesh
        return d

    mesh = None


def state_stats(c, det: Detector, train: data_lib.Split):
    """Mean and sd of the raw policy state on (up to) 512 training images; the policy sees
    (state - mean) / sd (fixed before DAPO starts). The images are sharded over every
    device (``core.mesh.data_mesh``)."""
    n = min(512, len(train))
    zeros = np.zeros((n,), np.int32)
    out = run_method(c, det.on(mesh_lib.data_mesh()), train.take(np.arange(n)), zeros, zeros)
    s = out["state"]
    return s.mean(0).astype(np.float32), (s.std(0) + 1e-3).astype(np.float32)


def dapo_setup(c, det: Detector, state_dim: int):
    """A fresh policy on ``state_dim`` normalised state features and ``train_dapo``'s jitted
    step ``one(carry, i, data)``: returns (policy graphdef, params, tx, one). The frozen
    detector's parameters and the training images come in ``data`` (``dapo_args``), never
    closed over (see ``sup_setup``)."""
    R = int(c.max_refine)
    policy = dapo.DualActionPolicy(state_dim, R + 1, rngs=nnx.Rngs(int(c.seed) + 1000))
    pgraph, pparams = nnx.split(policy, nnx.Param)
    lam = float(c.refine_cost)

    def reward_fn(ctx, route_idx, r):
        enc, masks, labels, params = ctx
        m = det.model(params)

        def one(ridx, rr):  # one sampled joint action per image
            out = m.decode(enc, _routes(ridx), rr)
            m_r = jnp.take_along_axis(out.mask_logits, rr[:, None, None, None], 1)[:, 0]
            return dapo.reward(m_r, out.y_logit, masks, labels, rr, lam)

        return jax.vmap(one, in_axes=(1, 1), out_axes=1)(route_idx, r)

    dcfg = dapo.DapoConfig(group_samples=int(c.group_samples), epochs=int(c.dapo_epochs),
                           clip_eps=float(c.clip_eps), ent_coef=float(c.ent_coef),
                           lr=float(c.dapo_lr))
    update, tx = dapo.make_update(pgraph, reward_fn, dcfg)
    batch = int(c.dapo_batch)

    def step(carry, i, data):
        images, masks, labels, key, mu_j, sd_j, params = data
        pp, opt = carry
        k1, k2 = jax.random.split(jax.random.fold_in(key, i))
        idx = jax.random.randint(k1, (batch,), 0, images.shape[0])
        m = det.model(params)
        enc = m.encode(images[idx])
        s = (policy_state_raw(m, enc) - mu_j) / sd_j
        pp, opt, logs = update(pp, opt, s, (enc, masks[idx], labels[idx], params), k2)
        return (pp, opt), logs

    return pgraph, pparams, tx, jax.jit(step, donate_argnums=(0,))


def dapo_args(c, det: Detector, train: data_lib.Split, mu, sd) -> tuple:
    """The data argument ``(data,)`` of ``dapo_setup``'s step: the training images, masks
    and labels, the key, the state normalisation and the detector's parameters."""
    images, masks, labels = (jnp.asarray(a) for a in (train.images, train.masks, train.labels))
    key = jax.random.fold_in(jax.random.key(int(c.seed)), 777)
    return ((images, masks, labels, key, jnp.asarray(mu), jnp.asarray(sd), det.params),)


def train_dapo(c, det: Detector, train: data_lib.Split, workdir: str):
    """DAPO on the frozen supernet: returns (policy graphdef, params, (mu, sd), logs)."""
    mu, sd = state_stats(c, det, train)
    pgraph, pparams, tx, one = dapo_setup(c, det, mu.shape[0])
    args = dapo_args(c, det, train, mu, sd)
    steps = int(c.steps_dapo)
    names = ("reward", "kept", "entropy", "clip_frac")
    logs = {k: np.zeros((steps,), np.float32) for k in names}

    def advance(carry, lg, start, n):
        carry, out = checkpoint.steps_loop(one, jax.device_put(carry), start, n, names,
                                           args, convolutional=True)
        for k in names:
            lg[k][start:start + n] = out[k]
        msg = (f"reward {float(lg['reward'][start:start + n].mean()):.4f} entropy "
               f"{float(lg['entropy'][start + n - 1]):.3f} kept "
               f"{float(lg['kept'][start:start + n].mean()):.2f}")
        return jax.device_get(carry), msg  # a host copy, as in train_net

    fp = checkpoint.config_fingerprint({"net": "dapo", **_train_fields(c),
                                        **{k: c[k] for k in ("steps_dapo", "dapo_batch",
                                                             "group_samples", "dapo_epochs",
                                                             "dapo_lr", "clip_eps", "ent_coef",
                                                             "refine_cost")}})
    (pparams, _), logs = checkpoint.run_chunks(
        os.path.join(workdir, "ckpt", "dapo"), fingerprint=fp, state=(pparams, tx.init(pparams)),
        logs=logs, steps=steps, chunk=max(1, int(c.chunk) // 2), advance=advance, name="dapo")
    return pgraph, pparams, (mu, sd), logs


def make_greedy(pgraph):
    @jax.jit
    def act(pparams, s):
        return dapo.greedy(nnx.merge(pgraph, pparams), s)

    return act


# --------------------------------------------------------------------------- evaluation

def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-np.asarray(v, np.float64)))


def score(split: data_lib.Split, mask_logits, y_logit, route_idx, r, refine_cost: float,
          mask0_logits=None) -> dict:
    """Every metric of one method on one split (conventions in ``metrics.CONVENTIONS``)."""
    prob = _sigmoid(mask_logits).astype(np.float32)
    y = _sigmoid(y_logit)
    lab = split.labels
    rew = np.asarray(dapo.reward(jnp.asarray(mask_logits), jnp.asarray(y_logit),
                                 jnp.asarray(split.masks), jnp.asarray(lab), jnp.asarray(r),
                                 refine_cost))
    joint = np.asarray(route_idx) * 100 + np.asarray(r)
    _, counts = np.unique(joint, return_counts=True)
    p = counts / counts.sum()
    out = {
        "image_auc": metrics.image_auc(y, lab),
        "balanced_acc": metrics.balanced_acc(y, lab),
        "pixel_f1": metrics.pixel_f1(prob, split.masks, lab),
        "iou": metrics.iou(prob, split.masks, lab),
        "pixel_auc": metrics.pixel_auc(prob, split.masks),
        "cc_error": metrics.cc_error(prob, split.masks, lab),
        "boundary_f1": metrics.boundary_f1(prob, split.masks, lab),
        "reward": float(rew.mean()),
        "mean_r": float(np.mean(r)),
        "action_entropy": float(-(p * np.log(p)).sum()),
        "r_hist": np.bincount(np.asarray(r), minlength=4).tolist(),
        "route_hist": np.bincount(np.asarray(route_idx), minlength=len(prompts.ROUTES)).tolist(),
    }
    if mask0_logits is not None:
        out["cc_error_r0"] = metrics.cc_error(_sigmoid(mask0_logits), split.masks, lab)
    return out


def run_method(c, det: Detector, split: data_lib.Split, route_idx, r, text_ids=None,
               text_mask=None):
    """Forward pass of a network on a split with given actions (and optional text)."""
    n, mesh = len(split), det.mesh
    if text_ids is None:
        fn = lambda x, ri, rr: det.fwd(det.params, x, ri, rr, None, None)  # noqa: E731
        return mesh_lib.batched(fn, n, int(c.eval_batch), split.images, route_idx, r, mesh=mesh)
    fn = lambda x, ri, rr, t, tm: det.fwd(det.params, x, ri, rr, t, tm)  # noqa: E731
    return mesh_lib.batched(fn, n, int(c.eval_batch), split.images, route_idx, r, text_ids,
                            text_mask, mesh=mesh)


def policy_actions(c, det: Detector, act, pparams, stats, split: data_lib.Split):
    """FPDA's greedy actions from the policy state of each image."""
    n = len(split)
    zeros = np.zeros((n,), np.int32)
    states = run_method(c, det, split, zeros, zeros)["state"]
    mu, sd = stats
    route, r = act(pparams, jnp.asarray((states - mu) / sd, jnp.float32))
    return np.asarray(route), np.asarray(r)


def best_fixed(c, det: Detector, val: data_lib.Split):
    """B4: every joint action's mean reward on val, and the best one."""
    fn = make_all_actions_fn(det.graphdef, det.rest, c)
    rew = mesh_lib.batched(lambda x, m, y: fn(det.params, x, m, y), len(val),
                           int(c.eval_batch), val.images, val.masks, val.labels, mesh=det.mesh)
    return baselines.best_fixed_action(rew), rew.mean(0)


def evaluate(c, dets: dict, policy, splits: dict) -> dict:
    """Every method on every test split, the text arms on test_id, and B4's search."""
    methods = tuple(c.methods)
    lam = float(c.refine_cost)
    R = int(c.max_refine)
    mesh = mesh_lib.data_mesh(int(c.eval_batch))
    dets = {k: d.on(mesh) for k, d in dets.items()}
    sup = dets.get("supernet")
    out = {s: {} for s in TEST_SPLITS}
    extra = {}
    if "best_fixed_action" in methods and sup is not None:
        (b4_route, b4_r), val_mean = best_fixed(c, sup, splits["val"])
        extra["best_fixed_action"] = {"route": b4_route, "r": b4_r,
                                      "route_groups": prompts.ROUTES[b4_route].tolist(),
                                      "val_reward": float(val_mean[b4_route, b4_r]),
                                      "val_reward_table": val_mean.tolist()}
    for sname in TEST_SPLITS:
        split = splits[sname]
        n = len(split)
        for meth in methods:
            t0 = time.time()
            if meth == "noise_variance_map":
                mlog, slog = mesh_lib.batched(jax.jit(baselines.noise_variance_map), n,
                                              int(c.eval_batch), split.images, mesh=mesh)
                zeros = np.zeros((n,), np.int32)
                out[sname][meth] = score(split, mlog, slog, zeros, zeros, 0.0)
                continue
            if meth in ("no_prompt", "fixed_prompt"):
                det, (route, r) = dets[meth], baselines.all_routes(n)
            elif meth == "fpda":
                det = sup
                act, pparams, stats = policy
                route, r = policy_actions(c, sup, act, pparams, stats, split)
            elif meth == "all_routes":
                det, (route, r) = sup, baselines.all_routes(n)
            elif meth == "random_policy":
                det, (route, r) = sup, baselines.random_policy(n, R + 1, int(c.seed))
            else:  # best_fixed_action
                det = sup
                b4 = extra["best_fixed_action"]
                route, r = np.full((n,), b4["route"], np.int32), np.full((n,), b4["r"], np.int32)
            res = run_method(c, det, split, route, r)
            out[sname][meth] = score(split, res["mask_r"], res["y_logit"], route, r, lam,
                                     res["mask_0"] if meth == "fpda" else None)
            if meth == "fpda" and sname == "test_id":
                extra["fpda_actions"] = {"route": route, "r": r}
                extra["fpda_test_id"] = res
            _log("eval %s %s: F1 %.3f AUC %.3f reward %.3f (%.1f s)", sname, meth,
                 out[sname][meth]["pixel_f1"], out[sname][meth]["image_auc"],
                 out[sname][meth]["reward"], time.time() - t0)
    if "fpda" in methods:
        extra["text"] = text_arms(c, sup, splits["test_id"], extra["fpda_actions"])
    return {"splits": out, **extra}


def text_arms(c, det: Detector, split: data_lib.Split, actions) -> dict:
    """Gated text with p_rel in TEXT_ARMS on test_id (FPDA's actions), against no text."""
    lam = float(c.refine_cost)
    route, r = actions["route"], actions["r"]
    arms = {}
    for p_rel in configs.TEXT_ARMS:
        ids, ok = data_lib.with_text(split, p_rel, int(c.seed) + 1)
        res = run_method(c, det, split, route, r, ids, np.ones((len(split),), np.float32))
        s = score(split, res["mask_r"], res["y_logit"], route, r, lam)
        g = res["gate"]
        s["gate_mean_correct"] = float(g[ok].mean()) if ok.any() else float("nan")
        s["gate_mean_wrong"] = float(g[~ok].mean()) if (~ok).any() else float("nan")
        if ok.any() and (~ok).any():
            s["gate_auc"] = metrics.auc(g, ok)
        arms[f"p_rel={p_rel}"] = s
        arms[f"p_rel={p_rel}"]["gate"] = g.tolist() if p_rel == 0.7 else None
        arms[f"p_rel={p_rel}"]["text_ok"] = ok.tolist() if p_rel == 0.7 else None
    return arms


# --------------------------------------------------------------------------- run

def normalise_config(c) -> None:
    """Flag strings to tuples (``--config.methods=fpda,no_prompt``, ``--config.seeds=0,1``)."""
    from icml26_jax.core.flags import as_tuple

    c.methods = as_tuple(c.methods, lambda v: str(v).strip(), name="methods")
    c.seeds = as_tuple(c.seeds, int, name="seeds")


def needed_nets(methods) -> tuple[str, ...]:
    nets = []
    if set(methods) & {"fpda", "all_routes", "random_policy", "best_fixed_action"}:
        nets.append("supernet")
    nets += [m for m in ("no_prompt", "fixed_prompt") if m in methods]
    return tuple(nets)


def run(c: ml_collections.ConfigDict, workdir: str) -> dict:
    """Data -> supervised nets -> DAPO -> evaluation -> claims, results.json and figures."""
    from icml26_jax.fpda import report

    normalise_config(c)
    configs.validate(c)
    t_start = time.time()
    if distributed.is_primary():  # the only writer of the workdir's own files
        os.makedirs(workdir, exist_ok=True)
    stage_s = {}
    t0 = time.time()
    splits = load_data(c, workdir)
    stage_s["data"] = time.time() - t0
    _log("data: %s in %.1f s", {k: len(v) for k, v in splits.items()}, stage_s["data"])
    dets, train_logs = {}, {}
    for name in needed_nets(c.methods):
        t0 = time.time()
        graphdef, params, rest, logs = train_net(c, name, splits["train"], workdir)
        dets[name] = Detector(c, name, graphdef, params, rest)
        stage_s[name] = time.time() - t0
        train_logs[name] = {"final_loss": float(np.mean(logs["loss"][-50:])),
                            "loss_curve": logs["loss"][:: max(1, len(logs["loss"]) // 50)]}
    policy, dapo_logs = None, {}
    if "fpda" in c.methods:
        t0 = time.time()
        pgraph, pparams, stats, dlogs = train_dapo(c, dets["supernet"], splits["train"], workdir)
        policy = (make_greedy(pgraph), pparams, stats)
        stage_s["dapo"] = time.time() - t0
        dapo_logs = {k: v[:: max(1, len(v) // 50)] for k, v in dlogs.items()}
        dapo_logs["final_reward"] = float(np.mean(dlogs["reward"][-20:]))
    t0 = time.time()
    ev = evaluate(c, dets, policy, splits)
    stage_s["eval"] = time.time() - t0
    cl = report.claims(ev) if "fpda" in c.methods else []
    figures = []
    if distributed.is_primary() and "fpda" in c.methods:
        tid = splits["test_id"]
        preds = {}
        for meth in ("no_prompt", "all_routes"):
            if meth in dets or meth == "all_routes":
                det = dets["supernet" if meth == "all_routes" else meth]
                route, r = baselines.all_routes(len(tid))
                preds[meth] = _sigmoid(run_method(c, det, tid, route, r)["mask_r"])
        preds["fpda"] = _sigmoid(ev["fpda_test_id"]["mask_r"])
        figures = report.figures(workdir, ev, tid, preds)
    metrics_out = {
        "splits": ev["splits"],
        "text": {k: {kk: vv for kk, vv in v.items() if kk not in ("gate", "text_ok")}
                 for k, v in ev.get("text", {}).items()},
        "best_fixed_action": ev.get("best_fixed_action"),
        "train": train_logs, "dapo": dapo_logs, "stage_s": stage_s,
        "conventions": metrics.CONVENTIONS,
        "data_sizes": {k: len(v) for k, v in splits.items()},
    }
    runtime = time.time() - t_start
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=c.seed, config=c,
                                 metrics=metrics_out, claims=cl, runtime_s=runtime,
                                 figures=figures)
    if distributed.is_primary():
        print(report.methods_table(ev))
        if "text" in ev:
            print(report.text_table(ev))
        if cl:
            print(results.claims_table(cl))
    return {"paper": PAPER, "variant": c.variant, "seed": c.seed, "metrics": metrics_out,
            "claims": [x.to_dict() for x in cl], "runtime_s": runtime, "results_path": path}
