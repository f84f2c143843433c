"""The two interfaces the flow-matching loss, the sampler and the GenEval summary rely on
(spec §Data "Real-data path"), and their implementations.

* ``VideoFlowBackbone``: ``encode_text``, ``encode_frames(frames, independent=True)``,
  ``velocity(z, t, ctx)``, ``decode_frame``. ``LocalBackbone`` binds this package's frozen
  ``FrameAE`` and a trained ``VideoDiT``; ``WanBackbone`` (optional PyTorch extra) wraps
  diffusers' ``AutoencoderKLWan`` (every frame its own 1-frame clip) and
  ``WanTransformer3DModel`` for users who have Wan2.1 weights.
* ``T2IEvaluator``: ``evaluate(image, metadata) -> (correct, reason)``.
  ``ProgrammaticEvaluator`` is ``evaluator.evaluate`` (pixels only); ``GenEvalEvaluator``
  wraps the official GenEval object detector (mmdet + Mask2Former + CLIP; not on PyPI).

``backbone_loss`` and ``backbone_sample`` are the loss and Euler sampler written against the
protocol only; ``flow.loss`` / ``flow.sample`` are their jittable NNX specialisations (same
equations; a test checks they agree).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from icml26_jax.cof_t2i import evaluator, flow, vae


@runtime_checkable
class VideoFlowBackbone(Protocol):
    def encode_text(self, text_ids, text_mask) -> Any: ...

    def encode_frames(self, frames, independent: bool = True) -> jax.Array: ...

    def velocity(self, z, t, ctx) -> jax.Array: ...

    def decode_frame(self, z) -> jax.Array: ...


@runtime_checkable
class T2IEvaluator(Protocol):
    def evaluate(self, image: np.ndarray, metadata: dict) -> tuple[bool, str]: ...


class LocalBackbone:
    """This package's frozen frame AE + video DiT behind ``VideoFlowBackbone``.

    ``frames`` are ``[B, F, 32, 32, 3]`` in [0, 1]; latents ``[B, F, 8, 8, 8]`` (unit std).
    """

    def __init__(self, ae: vae.FrameAE, dit_model):
        self.ae, self.dit = ae, dit_model

    def encode_text(self, text_ids, text_mask):
        return self.dit.encode_text(text_ids, text_mask)

    def encode_frames(self, frames, independent: bool = True):
        return vae.encode_frames(self.ae, frames, independent)

    def velocity(self, z, t, ctx):
        return self.dit.velocity(z, t, ctx)

    def decode_frame(self, z):
        """``[B, 8, 8, 8]`` scaled latents -> ``[B, 32, 32, 3]`` images in [0, 1]."""
        return vae.decode_frames(self.ae, z[:, None])[:, 0]


def backbone_loss(bb: VideoFlowBackbone, frames, text_ids, text_mask, key) -> jax.Array:
    """Vanilla flow matching through the protocol: frames encoded independently, one t per
    clip for every frame, v* = eps - z0 (no caption dropout: pass empty captions for it)."""
    z0 = bb.encode_frames(frames, independent=True)
    k_t, k_eps = jax.random.split(key)
    t = flow.logit_normal_t(k_t, z0.shape[0])
    eps = jax.random.normal(k_eps, z0.shape, z0.dtype)
    v = bb.velocity(flow.interpolate(z0, eps, t), t, bb.encode_text(text_ids, text_mask))
    return flow.flow_loss(v, z0, eps)


def backbone_sample(bb: VideoFlowBackbone, text_ids, text_mask, z1, steps: int, cfg: float,
                    shift: float, decode_all: bool = False):
    """Joint Euler denoising of every frame from ``z1`` (t = 1) with CFG (conditional and
    empty-caption halves in one batch); returns the decoded last frame ``[B, H, W, 3]``
    (or every frame, ``[B, F, H, W, 3]``)."""
    b = z1.shape[0]
    ctx = bb.encode_text(jnp.concatenate([text_ids, jnp.zeros_like(text_ids)]),
                         jnp.concatenate([jnp.asarray(text_mask, bool),
                                          jnp.zeros(text_mask.shape, bool)]))

    def velocity(z, t):
        v = bb.velocity(jnp.concatenate([z, z]), jnp.full((2 * b,), t, jnp.float32), ctx)
        v_c, v_u = v[:b], v[b:]
        return v_u + cfg * (v_c - v_u)

    z = flow.euler(velocity, z1, steps, shift)
    if decode_all:
        return jnp.stack([bb.decode_frame(z[:, f]) for f in range(z.shape[1])], 1)
    return bb.decode_frame(z[:, -1])


class ProgrammaticEvaluator:
    """GenEval's rules on the programmatic detector (``evaluator.evaluate``)."""

    def evaluate(self, image: np.ndarray, metadata: dict) -> tuple[bool, str]:
        return evaluator.evaluate(image, metadata)


class GenEvalEvaluator:
    """The official GenEval scorer (``evaluation/evaluate_images.py`` of
    github.com/djghosh13/geneval) behind ``T2IEvaluator``.

    ``detect_fn(image) -> {class: [(box, mask, score)]}`` and ``color_fn(image, box, mask)
    -> colour name`` are the official Mask2Former detector and CLIP colour classifier
    (neither installs from PyPI, so they are passed in); the scoring rules are this
    package's restatement of GenEval's (``evaluator.evaluate``), applied to their output.
    """

    def __init__(self, detect_fn, color_fn, threshold: float = 0.3):
        self.detect_fn, self.color_fn, self.threshold = detect_fn, color_fn, threshold

    def detections(self, image: np.ndarray) -> list[evaluator.Detection]:
        out = []
        for cls, found in self.detect_fn(image).items():
            for box, mask, score in found:
                if score >= self.threshold:
                    out.append(evaluator.Detection(cls, self.color_fn(image, box, mask),
                                                   tuple(float(v) for v in box), float(score),
                                                   int(np.sum(mask))))
        return out

    def evaluate(self, image: np.ndarray, metadata: dict) -> tuple[bool, str]:
        return evaluator.evaluate_detections(self.detections(image), metadata)


class WanBackbone:
    """Wan2.1-T2V behind ``VideoFlowBackbone`` via diffusers (optional: ``pip install torch
    diffusers transformers`` and the weights). Each frame is encoded as its own 1-frame clip
    (CoF-T2I's independent encoding); the transformer sees the frames on its time axis.
    Arrays cross the JAX / PyTorch boundary as NumPy."""

    def __init__(self, model_id: str = "Wan-AI/Wan2.1-T2V-14B-Diffusers", device: str = "cuda"):
        try:
            import torch
            from diffusers import AutoencoderKLWan, WanTransformer3DModel
            from transformers import AutoTokenizer, UMT5EncoderModel
        except ImportError as e:
            raise ImportError("WanBackbone needs the optional PyTorch extra: pip install torch "
                              "diffusers transformers") from e
        self.torch, self.device = torch, device
        self.vae = AutoencoderKLWan.from_pretrained(model_id, subfolder="vae").to(device)
        self.transformer = WanTransformer3DModel.from_pretrained(
            model_id, subfolder="transformer").to(device)
        self.tokenizer = AutoTokenizer.from_pretrained(model_id, subfolder="tokenizer")
        self.text_encoder = UMT5EncoderModel.from_pretrained(
            model_id, subfolder="text_encoder").to(device)

    def encode_text(self, prompts, text_mask=None):
        """``prompts``: a list of strings (the ids of this package's vocabulary do not apply)."""
        tok = self.tokenizer(list(prompts), padding="max_length", max_length=512,
                             truncation=True, return_tensors="pt").to(self.device)
        with self.torch.no_grad():
            return self.text_encoder(tok.input_ids, tok.attention_mask).last_hidden_state

    def encode_frames(self, frames, independent: bool = True):
        """``[B, F, H, W, 3]`` in [0, 1] -> latents ``[B, C, F, h, w]`` (diffusers layout),
        one 1-frame clip per frame when ``independent``."""
        x = self.torch.as_tensor(np.asarray(frames), device=self.device)
        x = x.permute(0, 4, 1, 2, 3) * 2 - 1  # [B, 3, F, H, W]
        with self.torch.no_grad():
            if independent:
                zs = [self.vae.encode(x[:, :, f:f + 1]).latent_dist.mode()
                      for f in range(x.shape[2])]
                return self.torch.cat(zs, 2)
            return self.vae.encode(x).latent_dist.mode()

    def velocity(self, z, t, ctx):
        with self.torch.no_grad():
            ts = self.torch.as_tensor(np.asarray(t) * 1000.0, device=self.device)
            return self.transformer(hidden_states=z, timestep=ts,
                                    encoder_hidden_states=ctx).sample

    def decode_frame(self, z):
        """One latent frame ``[B, C, 1, h, w]`` -> ``[B, H, W, 3]`` in [0, 1]."""
        with self.torch.no_grad():
            x = self.vae.decode(z).sample[:, :, 0]
        return ((x.permute(0, 2, 3, 1).clamp(-1, 1) + 1) / 2).cpu().numpy()
