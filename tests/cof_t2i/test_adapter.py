"""The backbone / evaluator protocols: the protocol-only loss and sampler agree with the
jittable NNX ones, and the local implementations satisfy the protocols."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26_jax.cof_t2i import adapter, dit, evaluator, flow, scenes, vae


def _models():
    ae = vae.FrameAE(8, rngs=nnx.Rngs(0))
    m = dit.VideoDiT(3, d=32, depth=1, heads=4, rngs=nnx.Rngs(1))
    key = jax.random.key(5)
    for _, v in nnx.iter_graph(m):
        if isinstance(v, nnx.Param) and not jnp.any(v[...]):
            key, k = jax.random.split(key)
            v[...] = 0.05 * jax.random.normal(k, v[...].shape)
    return ae, m


def test_local_backbone_loss_and_sampler_match_flow_module():
    ae, m = _models()
    bb = adapter.LocalBackbone(ae, m)
    assert isinstance(bb, adapter.VideoFlowBackbone)
    frames = jax.random.uniform(jax.random.key(0), (2, 3, 32, 32, 3))
    ids = jnp.array([[1, 3, 4, 1, 20, 0, 0, 0, 0, 0, 0, 0]] * 2, jnp.int32)
    key = jax.random.key(7)
    graphdef, params = nnx.split(m)
    z0 = vae.encode_frames(ae, frames)
    ref = flow.loss(graphdef, params, flow.FlowBatch(z0, ids, ids != 0), key, 0.0)
    k_t, k_eps, _ = jax.random.split(key, 3)  # flow.loss's own t and eps
    t = flow.logit_normal_t(k_t, 2)
    eps = jax.random.normal(k_eps, z0.shape)
    direct = flow.flow_loss(bb.velocity(flow.interpolate(z0, eps, t), t,
                                        bb.encode_text(ids, ids != 0)), z0, eps)
    np.testing.assert_allclose(float(direct), float(ref), rtol=1e-5)
    assert np.isfinite(float(adapter.backbone_loss(bb, frames, ids, ids != 0, key)))
    # sampler: the protocol version equals flow.sample + decode of the last frame
    z = flow.sample(graphdef, params, ids, ids != 0, 3, 3, 3.0, 3.0, jax.random.key(2))
    z1 = jax.random.normal(jax.random.key(2), z.shape)
    img = adapter.backbone_sample(bb, ids, ids != 0, z1, 3, 3.0, 3.0)
    np.testing.assert_allclose(np.asarray(img), np.asarray(vae.decode_frames(ae, z)[:, -1]),
                               atol=1e-4)
    allf = adapter.backbone_sample(bb, ids, ids != 0, z1, 3, 3.0, 3.0, decode_all=True)
    assert allf.shape == (2, 3, 32, 32, 3)


def test_evaluators_share_the_geneval_rules():
    rng = np.random.default_rng(0)
    _, md = scenes.sample_prompt("position", rng)
    img = scenes.render(scenes.sample_scene(md, rng), "refined")
    ev = adapter.ProgrammaticEvaluator()
    assert isinstance(ev, adapter.T2IEvaluator)
    assert ev.evaluate(img, md) == evaluator.evaluate(img, md)
    dets = evaluator.detect(img)

    # a stand-in for the official detector that returns the programmatic detections
    def detect_fn(image):
        out = {}
        for d in dets:
            out.setdefault(d.cls, []).append((d.box, np.ones(d.area, bool), 0.9))
        return out

    colors = {d.box: d.color for d in dets}
    g = adapter.GenEvalEvaluator(detect_fn, lambda image, box, mask: colors[tuple(box)])
    assert g.evaluate(img, md)[0] == evaluator.evaluate(img, md)[0]
    strict = adapter.GenEvalEvaluator(detect_fn, lambda *a: "red", threshold=0.95)
    assert not strict.evaluate(img, md)[0]  # every detection under the score threshold
