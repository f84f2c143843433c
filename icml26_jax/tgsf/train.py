"""The TGsF experiments (spec §Experiment): ``run(config, workdir)``.

- **E1 representation** (multi-view, photometric only): per scene in ``config.scenes`` one
  arm per Taylor order; per scene in ``config.transient_scenes`` order 2 with and without
  temporal opacity. All arms x ``num_seeds`` seeds train in one vmapped program.
- **E2 TGs-Flow** (monocular, order 2) on ``config.e2_scene``: one arm per supervision and
  label-noise level (photometric only at the first level).
- **E3 feed-forward** (``ff.py``).

Every fit is evaluated on held-out cameras at interpolation (midpoints of the training
frames) and extrapolation times (0.8, 0.9, 1.0); ``report.py`` turns the metrics into the
claims and figures.
"""

from __future__ import annotations

import os
import time

import jax
import numpy as np
from absl import logging

from icml26_jax.core import checkpoint, distributed, results
from icml26_jax.core.flags import as_tuple
from icml26_jax.tgsf import configs
from icml26_jax.tgsf import data as datalib
from icml26_jax.tgsf import evaluate, ff, report, scenes
from icml26_jax.tgsf import fit as fitlib
from icml26_jax.tgsf.gaussians import ORDERS

PAPER = "tgsf"


def normalise_config(c) -> None:
    """Flag strings to tuples (``--config.scenes=S1,S3``, ``--config.orders=1,2``)."""
    for k in ("experiments", "scenes", "transient_scenes", "supervision", "label_noise"):
        c[k] = as_tuple(c[k], lambda v: str(v).strip(), name=k)
    c.orders = as_tuple(c.orders, int, name="orders")
    c.ff_test_clips = as_tuple(c.ff_test_clips, int, name="ff_test_clips")
    c.seeds = as_tuple(c.seeds, int, name="seeds")
    if c.e2_steps < 0:
        c.e2_steps = c.steps


def validate_config(c) -> None:
    """Raises ``ValueError`` naming the field for any invalid setting."""
    def allowed(name, values, options):
        for v in values:
            if v not in options:
                raise ValueError(f"--config.{name}: {v!r} is not allowed; allowed: "
                                 f"{', '.join(map(str, options))}")

    allowed("experiments", c.experiments, configs.EXPERIMENTS)
    allowed("scenes", c.scenes, scenes.KINDS)
    allowed("transient_scenes", c.transient_scenes, scenes.KINDS)
    allowed("e2_scene", (c.e2_scene,), scenes.KINDS)
    allowed("orders", c.orders, ORDERS)
    allowed("supervision", c.supervision, fitlib.SUPERVISIONS)
    allowed("label_noise", c.label_noise, tuple(scenes.NOISE_LEVELS))
    for name in ("image_size", "num_gaussians", "steps", "e2_steps", "num_seeds", "chunk",
                 "ff_image_size", "ff_width", "ff_steps", "ff_batch"):
        if int(c[name]) < 1:
            raise ValueError(f"--config.{name} must be >= 1, got {c[name]!r}")
    if int(c.image_size) < 8:
        raise ValueError(f"--config.image_size must be >= 8, got {c.image_size}")
    if int(c.num_gaussians) < len(datalib.KEYFRAME_TIMES):
        raise ValueError(f"--config.num_gaussians must be >= {len(datalib.KEYFRAME_TIMES)}")
    if int(c.num_gaussians) // len(datalib.KEYFRAME_TIMES) > int(c.image_size) ** 2:
        raise ValueError("--config.num_gaussians / 3 exceeds the pixels of a frame "
                         f"({int(c.image_size) ** 2})")
    if "e2" in c.experiments and not c.supervision:
        raise ValueError("--config.supervision is empty but e2 is requested")
    if "e2" in c.experiments and not c.label_noise:
        raise ValueError("--config.label_noise is empty but e2 is requested")
    if "e1" in c.experiments and not (c.scenes or c.transient_scenes):
        raise ValueError("--config.scenes and --config.transient_scenes are both empty")
    if not float(c.lr_scale) > 0 or not float(c.motion_lr_scale) > 0:
        raise ValueError("--config.lr_scale and --config.motion_lr_scale must be > 0")
    ff.validate_config(c)


def _arm_name(order: int, temporal: bool) -> str:
    return f"order{order}" + ("" if temporal else "_no_temporal")


def e1_arms(c) -> list[tuple[str, str, fitlib.Arm]]:
    """(scene kind, arm name, Arm) of experiment E1."""
    arms = [(s, _arm_name(o, bool(c.temporal_opacity)),
             fitlib.make_arm(o, bool(c.temporal_opacity))) for s in c.scenes for o in c.orders]
    arms += [(s, _arm_name(2, tmp), fitlib.make_arm(2, tmp)) for s in c.transient_scenes
             for tmp in (True, False)]
    return arms


def e2_arms(c) -> list[tuple[str, str, fitlib.Arm]]:
    """(label noise, arm name "supervision:noise", Arm) of experiment E2."""
    out = []
    for i, noise in enumerate(c.label_noise):
        for sup in c.supervision:
            if sup == "photo" and i > 0:
                continue  # the photometric arm does not read the labels
            out.append((noise, f"{sup}:{noise}", fitlib.make_arm(2, True, sup)))
    return out


def _test_times():
    return np.concatenate([datalib.interp_times(), np.asarray(datalib.EXTRAP_TIMES,
                                                              np.float32)])


def _scene(c, kind: str) -> scenes.SceneSpec:
    return scenes.make_scene(kind, int(c.seed) + int(c.scene_seed_offset), "train")


def _fit_arms(c, workdir: str, name: str, datas, arms, keyframes, steps: int, coupled: bool):
    fp = checkpoint.config_fingerprint({
        "stage": name, "steps": int(steps), "size": int(c.image_size), "seed": int(c.seed),
        "n": int(c.num_gaussians), "seeds": int(c.num_seeds), "lr": float(c.lr_scale),
        "mlr": float(c.motion_lr_scale), "arms": np.asarray(jax.tree.leaves(arms)).tolist(),
        "scenes": list(c.scenes), "transient": list(c.transient_scenes),
        "e2": c.e2_scene, "offset": int(c.scene_seed_offset)})
    return fitlib.fit(datalib.stack(datas), datalib.stack(arms), keyframes=keyframes,
                      num_gaussians=int(c.num_gaussians), num_seeds=int(c.num_seeds),
                      steps=int(steps), key=jax.random.fold_in(jax.random.key(int(c.seed)),
                                                              len(name)),
                      directory=os.path.join(workdir, "ckpt", name), fingerprint=fp,
                      chunk=int(c.chunk), coupled=coupled, lr_scale=float(c.lr_scale),
                      motion_lr_scale=float(c.motion_lr_scale), name=name)


def _score(g, arms, test_cams, gt, times) -> dict:
    """Per-arm image metrics: {metric: [A, S, C, T]}."""
    rgb = evaluate.render_grid(g, datalib.stack(arms), datalib.stack_cameras(test_cams), times)
    return evaluate.image_metrics(rgb, gt["rgb"][None, None], gt["fg"][None, None]), rgb


def _summarise_arm(metrics: dict, a: int, times) -> dict:
    """Means over seeds and cameras per time, and the interp / extrap / all means."""
    n_interp = len(times) - len(datalib.EXTRAP_TIMES)
    out = {"times": [float(t) for t in times]}
    for k, v in metrics.items():
        per_t = np.nanmean(v[a], axis=(0, 1))  # [T]
        per_seed = np.nanmean(v[a], axis=1)  # [S, T]
        out[f"{k}_t"] = per_t.tolist()
        out[f"{k}_interp"] = float(np.mean(per_t[:n_interp]))
        out[f"{k}_extrap"] = float(np.mean(per_t[n_interp:]))
        out[f"{k}_all"] = float(np.mean(per_t))
        out[f"{k}_extrap_per_seed"] = np.mean(per_seed[:, n_interp:], -1).tolist()
    return out


def run_e1(c, workdir: str) -> tuple[dict, dict]:
    """E1: returns (metrics {"scene:arm": {...}}, artefacts for the figures)."""
    arms = e1_arms(c)
    size = int(c.image_size)
    views, datas, tests, kf = {}, [], {}, None
    times = _test_times()
    _, held = datalib.rig("multiview", size, datalib.train_times())
    for kind in dict.fromkeys(s for s, _, _ in arms):
        sc = _scene(c, kind)
        views[kind] = datalib.scene_views(sc, "multiview", size, flows=False)
        tests[kind] = (sc, datalib.test_views(sc, held, times))
        kf = datalib.keyframe_views(views[kind], "multiview")
    fds = {k: datalib.fit_data(v, "default", int(c.seed)) for k, v in views.items()}
    datas = [fds[s] for s, _, _ in arms]
    t0 = time.time()
    g, logs = _fit_arms(c, workdir, "e1", datas, [a for _, _, a in arms], kf, int(c.steps),
                        coupled=False)
    fit_s = time.time() - t0
    out, renders = {}, {}
    for kind in tests:
        idx = [i for i, (s, _, _) in enumerate(arms) if s == kind]
        sub = jax.tree.map(lambda x: x[np.asarray(idx)], g)
        sc, gt = tests[kind]
        m, rgb = _score(sub, [arms[i][2] for i in idx], held, gt, times)
        for j, i in enumerate(idx):
            name = f"{kind}:{arms[i][1]}"
            arm = arms[i][2]
            gi = jax.tree.map(lambda x: x[i], g)
            s = _summarise_arm(m, j, times)
            s.update({k: v.tolist() for k, v in
                      evaluate.acceleration_stats(gi, float(arm.acc_on), sc).items()})
            s["opacity_factor_t1"] = evaluate.opacity_factor(gi, arm, 1.0).tolist()
            s["final_photo_loss"] = float(np.mean(logs["photo"][-20:, i]))
            out[name] = s
            renders[name] = np.asarray(rgb[j, 0, 0, -1])  # seed 0, camera 0, t = 1.0
        renders[f"{kind}:gt"] = np.asarray(gt["rgb"][0, -1])
    out["_fit_s"] = fit_s
    return out, {"renders": renders, "logs": {k: v.tolist() for k, v in logs.items()}}


def run_e2(c, workdir: str) -> tuple[dict, dict]:
    """E2 (monocular TGs-Flow): returns (metrics {"supervision:noise": {...}}, artefacts)."""
    arms = e2_arms(c)
    size = int(c.image_size)
    sc = _scene(c, c.e2_scene)
    views = datalib.scene_views(sc, "monocular", size, flows=True)
    fds = {n: datalib.fit_data(views, n, int(c.seed)) for n in c.label_noise}
    kf = datalib.keyframe_views(views, "monocular")
    times = _test_times()
    _, held = datalib.rig("monocular", size, datalib.train_times())
    gt = datalib.test_views(sc, held, times)
    coupled = any(float(a.w_sceneflow) > 0 for _, _, a in arms)
    t0 = time.time()
    g, logs = _fit_arms(c, workdir, "e2", [fds[n] for n, _, _ in arms],
                        [a for _, _, a in arms], kf, int(c.e2_steps), coupled=coupled)
    fit_s = time.time() - t0
    arm_stack = datalib.stack([a for _, _, a in arms])
    m, rgb = _score(g, [a for _, _, a in arms], held, gt, times)
    epe = evaluate.displacement_epe(g, arm_stack, sc, held, datalib.train_times()[::3])
    out, renders = {}, {}
    for i, (_, name, arm) in enumerate(arms):
        gi = jax.tree.map(lambda x: x[i], g)
        s = _summarise_arm(m, i, times)
        s["motion_epe"] = float(np.nanmean(epe[i]))
        s["motion_epe_per_seed"] = epe[i].tolist()
        s.update({k: v.tolist() for k, v in
                  evaluate.acceleration_stats(gi, float(arm.acc_on), sc).items()})
        s["opacity_factor_t1"] = evaluate.opacity_factor(gi, arm, 1.0).tolist()
        out[name] = s
        renders[name] = np.asarray(rgb[i, 0, 0, -1])
    renders["gt"] = np.asarray(gt["rgb"][0, -1])
    out["_fit_s"] = fit_s
    flow_fig = report.flow_example(views, fds[c.label_noise[0]], g, arms, sc)
    return out, {"renders": renders, "flow": flow_fig,
                 "logs": {k: v.tolist() for k, v in logs.items()}}


def run(c, workdir: str) -> dict:
    """Runs the experiments of config ``c`` in ``workdir``; returns the results dict."""
    normalise_config(c)
    validate_config(c)
    t_start = time.time()
    if distributed.is_primary():  # the only writer (results.json, figures)
        os.makedirs(workdir, exist_ok=True)
    m, art, stage_s = {}, {}, {}
    for name, stage in (("e1", run_e1), ("e2", run_e2), ("e3", ff.run_e3)):
        if name in c.experiments:
            t0 = time.time()
            m[name], art[name] = stage(c, workdir)
            stage_s[name] = time.time() - t0
            logging.info("%s done in %.1f s", name, stage_s[name])
    claims = report.claims(c, m)
    m["stage_s"] = stage_s
    figures = []
    if distributed.is_primary():
        figures = report.plots(c, workdir, m, art)
    runtime = time.time() - t_start
    path = results.write_results(workdir, paper=PAPER, variant=c.variant, seed=c.seed, config=c,
                                 metrics=m, claims=claims, runtime_s=runtime, figures=figures)
    if distributed.is_primary():
        print(report.summary(c, m, claims))
    return {"paper": PAPER, "variant": c.variant, "seed": c.seed, "metrics": m,
            "claims": [cl.to_dict() for cl in claims], "runtime_s": runtime,
            "results_path": path}
