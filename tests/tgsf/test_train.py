"""Per-scene fitting: the TGs-Flow loss, arms as masks, vmapped arms == separate runs,
determinism, data layout and config validation (spec §Tests)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.tgsf import camera as C
from icml26_jax.tgsf import configs, evaluate, fit, render, report, scenes, train
from icml26_jax.tgsf import data as D
from icml26_jax.tgsf import gaussians as G

SIZE = 16


@pytest.fixture(scope="module")
def mono():
    sc = scenes.make_scene("S1", 0)
    views = D.scene_views(sc, "monocular", SIZE, flows=True)
    return sc, views, D.fit_data(views, "default", 0)


def _gaussians(key, n=24):
    k = jax.random.split(key, 4)
    return G.TaylorGaussians(
        mean=jax.random.uniform(k[0], (n, 3), minval=-0.8, maxval=0.8),
        vel=0.5 * jax.random.normal(k[1], (n, 3)), acc=jax.random.normal(k[2], (n, 3)),
        t_anchor=jnp.full((n,), 0.3), log_tscale=jnp.zeros((n,)),
        log_scale=jnp.full((n, 3), -1.6), quat=jnp.tile(jnp.array([1.0, 0, 0, 0]), (n, 1)),
        opacity_logit=jnp.full((n,), 1.0), rgb=jax.random.uniform(k[3], (n, 3)))


def test_data_layout_times_horizons_and_invalid_targets(mono):
    _, views, fd = mono
    t = D.train_times()
    np.testing.assert_allclose(t[[0, -1]], [0.0, 0.7])
    np.testing.assert_allclose(D.interp_times(), 0.5 * (t[1:] + t[:-1]))
    assert D.keyframe_indices() == (0, 5, 11)
    V = len(t)
    assert fd.flow.shape == (V, len(D.HORIZONS), SIZE, SIZE, 2)
    # Horizon -1 of the first frame and +1, +2 of the last ones do not exist: fully masked.
    assert float(fd.flow_valid[0, 0].sum()) == 0.0
    assert float(fd.flow_valid[-1, 1].sum()) == 0.0 and float(fd.flow_valid[-2, 2].sum()) == 0
    assert float(fd.flow_valid[5, 1].mean()) > 0.5
    np.testing.assert_allclose(fd.times2[5], t[[4, 6, 7]], atol=1e-6)
    # Monocular: one view per time, the camera moves along its arc.
    np.testing.assert_allclose(C.center(C.index(fd.cams, 3)),
                               C.center(D.monocular_camera(t[3], SIZE)), atol=1e-5)
    exact = D.fit_data(views, "none", 0)
    np.testing.assert_allclose(exact.depth, views["depth"])
    assert not np.allclose(fd.depth, views["depth"])
    with pytest.raises(ValueError, match="monocular"):
        D.scene_views(scenes.make_scene("S4", 0), "multiview", SIZE, flows=True)
    with pytest.raises(ValueError, match="rig"):
        D.rig("stereo", SIZE, t)


def test_one_rasterisation_gives_the_rendered_flow_and_displacement(mono):
    _, _, fd = mono
    g = _gaussians(jax.random.key(0))
    v = 5
    cam, t = C.index(fd.cams, v), fd.times[v]
    feats = [g.rgb]
    pos = G.positions_at(g, t, 2)
    uv, _ = C.project(pos, cam)
    for z in range(3):
        cam2 = C.index(C.index(fd.cams2, v), z)
        p2 = G.positions_at(g, fd.times2[v, z], 2)
        feats += [C.project(p2, cam2)[0] - uv, p2 - pos]
    out = render.rasterize(pos, G.covariances(g), G.opacity_at(g, t), jnp.concatenate(feats, -1),
                           cam, jnp.zeros((18,)))
    inv = 1.0 / jnp.maximum(out["alpha"], render.EPS)[..., None]
    for z in range(3):
        cam2 = C.index(C.index(fd.cams2, v), z)
        flow, _ = render.render_flow(g, cam, t, cam2, fd.times2[v, z])
        disp, _ = render.render_displacement3d(g, cam, t, fd.times2[v, z])
        np.testing.assert_allclose(out["feats"][..., 3 + 5 * z:5 + 5 * z] * inv, flow,
                                   atol=1e-4)
        np.testing.assert_allclose(out["feats"][..., 5 + 5 * z:8 + 5 * z] * inv, disp,
                                   atol=1e-5)


def test_arms_are_masks():
    g = _gaussians(jax.random.key(1))
    o1 = fit.apply_arm(g, fit.make_arm(1))
    np.testing.assert_allclose(G.positions_at(o1, 0.9, 2), G.positions_at(g, 0.9, 1))
    o0 = fit.apply_arm(g, fit.make_arm(0))
    np.testing.assert_allclose(G.positions_at(o0, 0.9, 2), g.mean)
    nt = fit.apply_arm(g, fit.make_arm(2, temporal=False))
    np.testing.assert_array_equal(G.opacity_at(nt, 1.0), jax.nn.sigmoid(g.opacity_logit))
    arm = fit.make_arm(1, supervision="decoupled")
    assert float(arm.w_flow) == pytest.approx(fit.LAMBDA_FLOW) and float(arm.w_sceneflow) == 0.0
    assert float(fit.make_arm(2, supervision="coupled3d").w_sceneflow) == pytest.approx(
        fit.LAMBDA_FLOW)
    assert float(fit.make_arm(2).w_depth) == 0.0
    # The masked acceleration gets no gradient from the loss of an order-1 arm.
    grad = jax.grad(lambda x: jnp.sum(G.positions_at(fit.apply_arm(x, fit.make_arm(1)), 0.9)))(g)
    np.testing.assert_array_equal(grad.acc, 0.0)
    with pytest.raises(ValueError, match="order"):
        fit.make_arm(3)
    with pytest.raises(ValueError, match="supervision"):
        fit.make_arm(2, supervision="lidar")


def test_vmapped_arms_equal_separate_runs_and_same_seed_same_numbers(mono):
    _, views, fd = mono
    arms = [fit.make_arm(1, True, "decoupled"), fit.make_arm(2, False, "coupled3d")]
    kf = D.keyframe_views(views, "monocular")
    g0 = fit.init_fits(D.stack([fd]), kf, 30, jax.random.key(0)[None])
    g0 = jax.tree.map(lambda x: x[0, 0], g0)
    tx = fit.optimizer(motion_scale=30.0)
    state = fit.FitState(g0, tx.init(g0))
    key = jax.random.key(3)
    step = jax.jit(lambda st, a: fit.train_step(st, fd, a, key, jnp.int32(0), tx=tx,
                                                coupled=True, pixel_chunk=256))
    vstep = jax.jit(jax.vmap(lambda st, a: fit.train_step(st, fd, a, key, jnp.int32(0), tx=tx,
                                                          coupled=True, pixel_chunk=256)))
    both = jax.tree.map(lambda x: jnp.stack([x, x]), state)
    vs, vterms = vstep(both, D.stack(arms))
    for i, arm in enumerate(arms):
        s, terms = step(state, arm)
        for a, b in zip(jax.tree.leaves(s.g), jax.tree.leaves(vs.g)):
            np.testing.assert_allclose(a, b[i], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(terms["loss"], vterms["loss"][i], rtol=1e-5)
    again, _ = step(state, arms[0])
    first, _ = step(state, arms[0])
    for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(first)):
        np.testing.assert_array_equal(a, b)
    assert float(vterms["sceneflow"][1]) > 0.0 and float(vterms["flow"][0]) > 0.0


def test_config_validation_names_the_field():
    for field, value, match in (("scenes", ("S1", "S9"), "scenes"), ("orders", (1, 3), "orders"),
                                ("supervision", ("photo", "lidar"), "supervision"),
                                ("label_noise", ("loud",), "label_noise"),
                                ("ff_image_size", 15, "ff_image_size"),
                                ("experiments", ("e4",), "experiments"),
                                ("steps", 0, "steps")):
        c = configs.get_config("smoke")
        c[field] = value
        train.normalise_config(c)
        with pytest.raises(ValueError, match=field):
            train.validate_config(c)
    with pytest.raises(ValueError, match="variant"):
        configs.get_config("huge")
    c = configs.get_config("smoke")
    c.scenes = ("S1,S4",)  # how a --config.scenes=S1,S4 flag arrives
    c.orders = ("0,2",)
    train.normalise_config(c)
    train.validate_config(c)
    assert c.scenes == ("S1", "S4") and c.orders == (0, 2)
    assert [n for _, n, _ in train.e1_arms(c)] == ["order0", "order2", "order0", "order2"]


def test_e2_arms_skip_photometric_at_extra_noise_levels():
    c = configs.get_config("default")
    train.normalise_config(c)
    names = [n for _, n, _ in train.e2_arms(c)]
    assert names == ["photo:default", "coupled3d:default", "decoupled:default",
                     "coupled3d:none", "decoupled:none"]


def _arm_metrics(extrap, interp=20.0, gap_t=None, acc_err=(0.1, 0.2), fg_acc=(1.0, 1.0)):
    t = list(D.interp_times()) + list(D.EXTRAP_TIMES)
    per_t = [interp] * 11 + (list(gap_t) if gap_t else [extrap] * 3)
    return {"times": t, "masked_psnr_t": per_t, "masked_psnr_extrap": float(np.mean(per_t[11:])),
            "psnr_extrap": float(np.mean(per_t[11:])) - 1.0, "masked_psnr_interp": interp,
            "masked_psnr_all": float(np.mean(per_t)), "acc_rel_error": list(acc_err),
            "fg_acc_norm": list(fg_acc)}


def test_claims_are_computed_from_the_metrics():
    e1 = {"S1:order1": _arm_metrics(15.0, gap_t=(16.0, 15.0, 14.0)),
          "S1:order2": _arm_metrics(19.0, interp=20.5, gap_t=(18.0, 19.0, 20.0)),
          "S4:order1": _arm_metrics(20.0), "S4:order2": _arm_metrics(20.1, fg_acc=(0.05, 0.05))}
    cl = {c.name: c for c in report.e1_claims(e1)}
    assert cl["order2_beats_order1_extrapolation"].measured == pytest.approx(4.0)
    assert cl["order2_beats_order1_extrapolation"].holds
    assert cl["order2_gap_grows_with_horizon"].measured == pytest.approx(6.0 - 2.0)
    assert cl["order2_interpolation_gain"].measured == pytest.approx(0.5)
    assert cl["acceleration_recovered"].measured == pytest.approx(0.15)
    assert cl["order2_harmless_on_constant_velocity"].holds
    assert "order2_helps_non_polynomial" not in cl  # S3 did not run
    e2 = {"photo:default": {"masked_psnr_extrap": 14.0},
          "decoupled:default": {"masked_psnr_extrap": 16.0, "motion_epe": 0.1},
          "coupled3d:default": {"masked_psnr_extrap": 15.0, "motion_epe": 0.2}}
    cl = {c.name: c for c in report.e2_claims(e2)}
    assert cl["decoupled_beats_photometric"].measured == pytest.approx(2.0)
    assert cl["decoupled_beats_coupled"].holds
    assert "coupled_matches_with_clean_labels" not in cl


def test_acceleration_stats_find_the_object_gaussians():
    sc = scenes.make_scene("S1", 0)
    c0 = scenes.center_at(sc, 0.35)[0]
    g = _gaussians(jax.random.key(2), n=4)
    mean = np.array([c0, c0 + 0.1, [0.0, 0.0, 2.0], [0.0, 0.5, 2.0]], np.float32)
    acc = np.array([[0, -3, 0], [0, -2, 0], [0, 0, 0], [0, 1, 0]], np.float32)
    g = g._replace(mean=jnp.asarray(mean), acc=jnp.asarray(acc), t_anchor=jnp.full((4,), 0.35))
    g = jax.tree.map(lambda x: x[None], g)
    s = evaluate.acceleration_stats(g, 1.0, sc)
    true = np.linalg.norm(scenes.acceleration_at(sc, 0.35)[0])
    want = np.median([np.linalg.norm(acc[i] - scenes.acceleration_at(sc, 0.35)[0]) / true
                      for i in (0, 1)])
    np.testing.assert_allclose(s["acc_rel_error"], [want], rtol=1e-5)
    np.testing.assert_allclose(s["fg_acc_norm"], [2.5], rtol=1e-6)
    np.testing.assert_allclose(s["bg_acc_norm"], [0.5], rtol=1e-6)


@pytest.mark.slow
def test_killed_fit_resumes_to_the_same_numbers(mono, tmp_path, monkeypatch):
    from icml26_jax.core import checkpoint

    _, views, fd = mono
    kw = dict(keyframes=D.keyframe_views(views, "monocular"), num_gaussians=30, num_seeds=1,
              steps=2, key=jax.random.key(4), fingerprint=5, chunk=1, coupled=False,
              pixel_chunk=256)
    datas, arms = D.stack([fd]), D.stack([fit.make_arm(2, True, "decoupled")])
    whole, logs_whole = fit.fit(datas, arms, directory=str(tmp_path / "a"), **kw)
    real = checkpoint.run_chunks

    def killed_after_one_chunk(directory, **k):
        advance, calls = k["advance"], []

        def once(state, logs, start, n):
            if calls:
                raise RuntimeError("killed")
            calls.append(start)
            return advance(state, logs, start, n)

        return real(directory, **{**k, "advance": once})

    monkeypatch.setattr(checkpoint, "run_chunks", killed_after_one_chunk)
    with pytest.raises(RuntimeError, match="killed"):
        fit.fit(datas, arms, directory=str(tmp_path / "b"), **kw)
    monkeypatch.setattr(checkpoint, "run_chunks", real)
    resumed, logs_resumed = fit.fit(datas, arms, directory=str(tmp_path / "b"), **kw)
    for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(resumed)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(logs_whole["loss"], logs_resumed["loss"])
    with pytest.raises(ValueError, match="different config"):
        fit.fit(datas, arms, directory=str(tmp_path / "b"), **{**kw, "fingerprint": 6})


@pytest.mark.slow
def test_fit_scene_applies_its_arm(tmp_path):
    sc = scenes.make_scene("S4", 1)
    cfg = {"image_size": SIZE, "num_gaussians": 30, "steps": 2, "order": 1,
           "supervision": "photo", "workdir": str(tmp_path)}
    g, m = fit.fit_scene(sc, cfg, jax.random.key(0))
    assert g.mean.shape == (1, 30, 3) and m["loss"].shape == (2, 1)
    np.testing.assert_array_equal(g.acc, 0.0)  # order 1
    assert float(jnp.abs(g.vel).max()) > 0.0  # one Adam step moved v
    assert np.all(np.isfinite(m["loss"]))


def test_baselines_are_named_masks():
    from icml26_jax.tgsf import baselines

    assert float(baselines.arm("order0").vel_on) == 0.0
    assert float(baselines.arm("ff_order1").acc_on) == 0.0
    assert float(baselines.arm("ff_no_temporal").temporal) == 0.0
    assert float(baselines.arm("coupled3d").w_sceneflow) > 0 == float(
        baselines.arm("coupled3d").w_flow)
    with pytest.raises(ValueError, match="unknown method"):
        baselines.arm("nerf")


def _toy_step(inner, state, args, key, step):
    noise = jax.random.normal(jax.random.fold_in(key, step), (2,))
    state = state * inner + args * noise
    return state, {"norm": jnp.linalg.norm(state)}


def test_replicas_sharded_over_every_device_equal_one_device(tmp_path):
    # 3 replicas on the 8 devices (padded to 8, the padding dropped) == the same 3 on one
    # device (the resume from a padded checkpoint: test_killed_fit_resumes_to_the_same_numbers).
    from icml26_jax.core import checkpoint
    from icml26_jax.core import mesh as mesh_lib

    assert jax.device_count() == 8
    state, args = np.arange(6.0, dtype=np.float32).reshape(3, 2), np.float32([1.0, 2.0, 3.0])
    keys = checkpoint.per_seed_keys(jax.random.key(5), 3)
    kw = dict(steps=5, chunk=2, fingerprint=1, name="toy", message=lambda m: "")
    one_dev = mesh_lib.make_mesh((1,), (mesh_lib.RUNS,))
    s1, l1 = checkpoint.seed_loop(state, args, _toy_step, keys, mesh=one_dev, inner=0.9,
                                  directory=str(tmp_path / "a"), **kw)
    s8, l8 = checkpoint.seed_loop(state, args, _toy_step, keys, inner=0.9,
                                  directory=str(tmp_path / "b"), **kw)
    assert s8.shape == (3, 2) and l8["norm"].shape == (5, 3)
    np.testing.assert_array_equal(s1, s8)
    np.testing.assert_array_equal(l1["norm"], l8["norm"])
