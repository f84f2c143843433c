"""FPDANet: forensic encoder, Forensic Prompting Module, mask decoder, refiner and detection
head (spec §Method; all of it is [R], reconstructed from the abstract and CLIP-IFDL).

Data flow for images x [B, S, S, 3] (h = S / 4, d = width, K = 12 prompts)::

    x -> RGB stream, SRM stream (conv3x3/2 -> conv3x3/2)      -> [B, h, h, d] each
      -> concat, 1x1 conv, ++ upsampled 8x8 block-DCT map, 1x1 conv, 2 residual blocks
      -> F [B, h, h, d], f_bar = mean_u F(u)                   (``encode``: action-free)
    bank tokens -> PromptTextEncoder -> e_k;  W_t e_k [K, d]
    S_k(u) = cos(W_v F(u), W_t e_k) / tau_s; s_bar_k = mean_u S_k(u)
    route rho (4 bits) -> m_k = rho_group(k) (authentic prompts always 1)
    c = sum_k m_k softmax_{k: m_k = 1}(s_bar)_k W_t e_k  (+ g W_t e_t with text)
    FiLM(F; c) ++ m_k S_k -> 2 conv blocks -> 1x1 -> M_0 [B, h, h]
    M_{j+1} = M_j + R_psi([M_j, Sobel(sigmoid M_j), F -> 8 ch, avgpool(x)]), j < r
    y_logit = MLP([f_bar; c; mean top-1% sigmoid(M_r) at S x S; max_k s_bar_k])

Routing is masking (never a Python branch), so one compiled program serves every route.
``mode`` selects the baselines on the same code: ``"bank"`` (FPDA supernet), ``"fixed"`` (B1:
one generic prompt gives c and one evidence map) and ``"none"`` (B0: c = 0, no maps). The
refiner's output layer starts at zero, so every M_j equals M_0 at initialisation.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26_jax.fpda import filters, prompts

TAU_S = 0.07  # evidence-map temperature
SRM_GAIN = 10.0  # SRM residuals of [0, 1] images are ~0.01-0.1: bring them to O(1)
DCT_SCALE = 0.1  # log1p block energies are ~0-12 on the 0..255 scale
TOP_FRACTION = 0.01  # detection pools the top 1 % of the refined mask
REFINE_WIDTH = 16
REFINE_FEATURES = 8
MODES = ("bank", "fixed", "none")


class Enc(NamedTuple):
    """Action-independent part of the forward pass (``FPDANet.encode``)."""
    feats: jax.Array  # F [B, h, h, d]
    f_bar: jax.Array  # [B, d]
    maps: jax.Array  # S_k [B, h, h, K] (K = 0 for mode "none")
    s_bar: jax.Array  # [B, K]
    prompt_emb: jax.Array  # W_t e_k [K, d]
    pooled_x: jax.Array  # x average-pooled to [B, h, h, 3]

    def take(self, idx) -> "Enc":
        """The images ``idx`` of the batch (``prompt_emb`` is shared, not batched)."""
        return self._replace(feats=self.feats[idx], f_bar=self.f_bar[idx], maps=self.maps[idx],
                             s_bar=self.s_bar[idx], pooled_x=self.pooled_x[idx])

    @staticmethod
    def concat(encs: list["Enc"]) -> "Enc":
        """Batches of the same network, concatenated along the batch axis."""
        cat = lambda f: jnp.concatenate([getattr(e, f) for e in encs])  # noqa: E731
        return encs[0]._replace(feats=cat("feats"), f_bar=cat("f_bar"), maps=cat("maps"),
                                s_bar=cat("s_bar"), pooled_x=cat("pooled_x"))


class Out(NamedTuple):
    mask_logits: jax.Array  # [B, R + 1, S, S]: M_0 .. M_R, bilinear-upsampled
    y_logit: jax.Array  # [B]
    gate: jax.Array  # [B] (0 where no text)
    s_bar: jax.Array  # [B, K]
    f_bar: jax.Array  # [B, d]
    context: jax.Array  # c [B, d]
    y_all: jax.Array  # [B, steps + 1]: the detection logit read from every M_j


def _groups(d: int) -> int:
    return max(1, d // 4)


class ResBlock(nnx.Module):
    """x + GN(conv(GELU(GN(conv(x))))), then GELU."""

    def __init__(self, d: int, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(d, d, (3, 3), rngs=rngs)
        self.norm1 = nnx.GroupNorm(d, num_groups=_groups(d), rngs=rngs)
        self.conv2 = nnx.Conv(d, d, (3, 3), rngs=rngs)
        self.norm2 = nnx.GroupNorm(d, num_groups=_groups(d), rngs=rngs)

    def __call__(self, x):
        y = self.norm2(self.conv2(jax.nn.gelu(self.norm1(self.conv1(x)))))
        return jax.nn.gelu(x + y)


class ConvBlock(nnx.Module):
    """conv3x3 -> GroupNorm -> GELU."""

    def __init__(self, cin: int, cout: int, *, rngs: nnx.Rngs):
        self.conv = nnx.Conv(cin, cout, (3, 3), rngs=rngs)
        self.norm = nnx.GroupNorm(cout, num_groups=_groups(cout), rngs=rngs)

    def __call__(self, x):
        return jax.nn.gelu(self.norm(self.conv(x)))


class ForensicEncoder(nnx.Module):
    """Two-stream (RGB, SRM) encoder with the block-DCT map: x -> F [B, S/4, S/4, d]."""

    def __init__(self, d: int, *, rngs: nnx.Rngs):
        half = max(1, d // 2)
        self.rgb1 = nnx.Conv(3, half, (3, 3), strides=2, rngs=rngs)
        self.rgb2 = nnx.Conv(half, d, (3, 3), strides=2, rngs=rngs)
        self.srm1 = nnx.Conv(3, half, (3, 3), strides=2, rngs=rngs)
        self.srm2 = nnx.Conv(half, d, (3, 3), strides=2, rngs=rngs)
        self.fuse = nnx.Conv(2 * d, d, (1, 1), rngs=rngs)
        self.mix = nnx.Conv(d + 1, d, (1, 1), rngs=rngs)
        self.res1 = ResBlock(d, rngs=rngs)
        self.res2 = ResBlock(d, rngs=rngs)

    def __call__(self, x):
        b, s = x.shape[0], x.shape[1]
        h = s // 4
        srm = filters.srm_residual(x) * SRM_GAIN
        a = self.rgb2(jax.nn.gelu(self.rgb1(x * 2.0 - 1.0)))
        z = self.srm2(jax.nn.gelu(self.srm1(srm)))
        f = self.fuse(jax.nn.gelu(jnp.concatenate([a, z], -1)))
        dct = filters.block_dct_energy(x) * DCT_SCALE  # [B, S/8, S/8]
        dct = jax.image.resize(dct, (b, h, h), "nearest")[..., None]
        f = self.mix(jnp.concatenate([f, dct], -1))
        return self.res2(self.res1(f))


class PromptTextEncoder(nnx.Module):
    """Token embeddings + positions, one pre-LN transformer layer (4 heads), mean-pooled over
    the non-pad tokens: ids [N, L] -> e [N, d]."""

    def __init__(self, d: int, heads: int = 4, *, rngs: nnx.Rngs):
        self.embed = nnx.Embed(len(prompts.VOCAB), d, rngs=rngs)
        self.pos = nnx.Param(0.02 * jax.random.normal(rngs.params(), (prompts.MAX_TOKENS, d)))
        self.norm1 = nnx.LayerNorm(d, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=heads, in_features=d, decode=False,
                                           rngs=rngs)
        self.norm2 = nnx.LayerNorm(d, rngs=rngs)
        self.fc1 = nnx.Linear(d, 2 * d, rngs=rngs)
        self.fc2 = nnx.Linear(2 * d, d, rngs=rngs)

    def __call__(self, ids):
        valid = ids != prompts.PAD  # [N, L]
        x = self.embed(ids) + self.pos[...][: ids.shape[-1]]
        mask = (valid[:, None, None, :] & valid[:, None, :, None])
        x = x + self.attn(self.norm1(x), mask=mask)
        x = x + self.fc2(jax.nn.gelu(self.fc1(self.norm2(x))))
        w = valid.astype(x.dtype)[..., None]
        return jnp.sum(x * w, 1) / jnp.maximum(jnp.sum(w, 1), 1.0)


def _cos(a, b, eps=1e-6):
    """Cosine similarity along the last axis, broadcasting."""
    a = a / jnp.sqrt(jnp.sum(a * a, -1, keepdims=True) + eps)
    b = b / jnp.sqrt(jnp.sum(b * b, -1, keepdims=True) + eps)
    return jnp.sum(a * b, -1)


def sobel(m):
    """Sobel gradients of [B, h, h] (edge-replicated borders) -> [B, h, h, 2]."""
    kx = jnp.array([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]], m.dtype) / 8.0
    p = jnp.pad(m, ((0, 0), (1, 1), (1, 1)), mode="edge")[..., None]
    k = jnp.stack([kx, kx.T], -1)[:, :, None, :]  # HWIO [3, 3, 1, 2]
    return jax.lax.conv_general_dilated(p, k, (1, 1), "VALID",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


class Refiner(nnx.Module):
    """R_psi: [M_j, Sobel(sigmoid M_j), F -> 8 ch, pooled x] -> 2 convs (width 16) -> dM."""

    def __init__(self, d: int, *, rngs: nnx.Rngs):
        self.reduce = nnx.Conv(d, REFINE_FEATURES, (1, 1), rngs=rngs)
        self.conv1 = nnx.Conv(1 + 2 + REFINE_FEATURES + 3, REFINE_WIDTH, (3, 3), rngs=rngs)
        self.conv2 = nnx.Conv(REFINE_WIDTH, 1, (3, 3), kernel_init=nnx.initializers.zeros,
                              rngs=rngs)

    def __call__(self, m, feats8, pooled_x):
        z = jnp.concatenate([m[..., None], sobel(jax.nn.sigmoid(m)), feats8, pooled_x], -1)
        return m + self.conv2(jax.nn.gelu(self.conv1(z)))[..., 0]


def _host(v):
    """``v`` as a NumPy array, or None inside a trace (values unknown until run time)."""
    try:
        return np.asarray(v)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def check_actions(route, r, num_steps: int) -> None:
    """Raises ``ValueError`` for an empty route or r outside [0, num_steps] (concrete inputs
    only; inside jit the values are not known and are clipped)."""
    rv = _host(route)
    if rv is not None:
        if rv.ndim != 2 or rv.shape[-1] != len(prompts.GROUPS):
            raise ValueError(f"route must be [B, {len(prompts.GROUPS)}] group bits, got shape "
                             f"{rv.shape}")
        if (rv.sum(-1) < 1).any():
            raise ValueError("route must route at least one prompt group (an empty route is "
                             "not one of the 15 actions)")
    r_host = _host(r)
    if r_host is not None and ((r_host < 0).any() or (r_host > num_steps).any()):
        raise ValueError(f"r must be in [0, {num_steps}] (max_refine / num_steps), got "
                         f"values in [{r_host.min()}, {r_host.max()}]")


class FPDANet(nnx.Module):
    """The FPDA network (module docstring). ``encode`` once per image; ``decode`` per action."""

    def __init__(self, width: int = 32, *, img_size: int = 64, max_refine: int = 3,
                 mode: str = "bank", rngs: nnx.Rngs):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if img_size < 16 or img_size % 16:
            raise ValueError(f"img_size must be a positive multiple of 16, got {img_size}")
        if width < 4 or width % 4:
            raise ValueError(f"width must be a positive multiple of 4, got {width}")
        if max_refine < 0:
            raise ValueError(f"max_refine must be >= 0, got {max_refine}")
        d = int(width)
        self.mode, self.width, self.img_size, self.max_refine = mode, d, img_size, max_refine
        self.num_maps = {"bank": prompts.NUM_PROMPTS, "fixed": 1, "none": 0}[mode]
        self.encoder = ForensicEncoder(d, rngs=rngs)
        self.text = PromptTextEncoder(d, rngs=rngs)
        self.w_v = nnx.Linear(d, d, rngs=rngs)
        self.w_t = nnx.Linear(d, d, rngs=rngs)
        self.gate1 = nnx.Linear(2 * d + 2, d, rngs=rngs)
        self.gate2 = nnx.Linear(d, 1, rngs=rngs)
        self.film = nnx.Linear(d, 2 * d, kernel_init=nnx.initializers.zeros, rngs=rngs)
        self.dec1 = ConvBlock(d + self.num_maps, d, rngs=rngs)
        self.dec2 = ConvBlock(d, d, rngs=rngs)
        self.dec_out = nnx.Conv(d, 1, (1, 1), rngs=rngs)
        self.refiner = Refiner(d, rngs=rngs)
        self.det1 = nnx.Linear(2 * d + 2, d, rngs=rngs)
        self.det2 = nnx.Linear(d, 1, rngs=rngs)

    # ------------------------------------------------------------------ parts

    def bank_tokens(self) -> np.ndarray:
        if self.mode == "fixed":
            return prompts.tokenize(prompts.GENERIC_PROMPT)[None]
        return prompts.bank_tokens()

    def encode(self, x) -> Enc:
        """The action-independent part: features, evidence maps and their means."""
        chex_shape = (self.img_size, self.img_size, 3)
        if x.ndim != 4 or x.shape[1:] != chex_shape:
            raise ValueError(f"x must be [B, {self.img_size}, {self.img_size}, 3] (img_size), "
                             f"got shape {x.shape}")
        feats = self.encoder(x)  # [B, h, h, d]
        b, h = feats.shape[0], feats.shape[1]
        f_bar = feats.mean((1, 2))
        pooled = jax.image.resize(x, (b, h, h, 3), "linear", antialias=True)
        if self.mode == "none":
            empty = jnp.zeros((b, h, h, 0), feats.dtype)
            return Enc(feats, f_bar, empty, jnp.zeros((b, 0), feats.dtype),
                       jnp.zeros((0, self.width), feats.dtype), pooled)
        emb = self.w_t(self.text(jnp.asarray(self.bank_tokens())))  # [K, d]
        maps = _cos(self.w_v(feats)[..., None, :], emb) / TAU_S  # [B, h, h, K]
        return Enc(feats, f_bar, maps, maps.mean((1, 2)), emb, pooled)

    def gate(self, enc: Enc, text_ids, text_mask):
        """Reliability gate g in (0, 1) where text is present, 0 elsewhere; and W_t e_t."""
        b = enc.f_bar.shape[0]
        if text_ids is None:
            return jnp.zeros((b,), enc.f_bar.dtype), jnp.zeros_like(enc.f_bar)
        t = self.w_t(self.text(text_ids))  # [B, d]
        smax = (jnp.max(enc.s_bar, -1, keepdims=True) if self.num_maps
                else jnp.zeros((b, 1), t.dtype))
        z = jnp.concatenate([enc.f_bar, t, _cos(enc.f_bar, t)[:, None], smax], -1)
        g = jax.nn.sigmoid(self.gate2(jax.nn.gelu(self.gate1(z)))[:, 0])
        present = (jnp.ones((b,), g.dtype) if text_mask is None
                   else jnp.asarray(text_mask).astype(g.dtype))
        return g * present, t

    def decode(self, enc: Enc, route, r, text_ids=None, text_mask=None,
               num_steps: int | None = None) -> Out:
        """Everything that depends on the actions (route [B, 4], r [B] int).

        ``num_steps`` (static, default ``max_refine``) is how many refinement steps are
        computed; ``r`` must not exceed it. Fewer steps really save compute (the benchmark
        buckets images by r).
        """
        steps = self.max_refine if num_steps is None else int(num_steps)
        if not 0 <= steps <= self.max_refine:
            raise ValueError(f"num_steps must be in [0, max_refine={self.max_refine}], got "
                             f"{steps}")
        check_actions(route, r, steps)
        b = enc.f_bar.shape[0]
        dt = enc.f_bar.dtype
        if self.mode == "bank":
            m = prompts.prompt_mask(jnp.asarray(route)).astype(dt)  # [B, K]
        else:
            m = jnp.ones((b, self.num_maps), dt)
        if self.num_maps:
            logits = jnp.where(m > 0, enc.s_bar, -jnp.inf)
            p = jax.nn.softmax(logits, -1) * m
            c = p @ enc.prompt_emb  # [B, d]
        else:
            c = jnp.zeros_like(enc.f_bar)
        g, t = self.gate(enc, text_ids, text_mask)
        c = c + g[:, None] * t
        gamma, beta = jnp.split(self.film(c), 2, -1)
        x = enc.feats * (1.0 + gamma[:, None, None, :]) + beta[:, None, None, :]
        x = jnp.concatenate([x, enc.maps * m[:, None, None, :]], -1)
        m0 = self.dec_out(self.dec2(self.dec1(x)))[..., 0]  # [B, h, h]
        feats8 = self.refiner.reduce(enc.feats)
        ms = [m0]
        for _ in range(steps):
            ms.append(self.refiner(ms[-1], feats8, enc.pooled_x))
        s = self.img_size
        stack = jnp.stack(ms, 1)  # [B, steps + 1, h, h]
        up = jax.image.resize(stack, (b, steps + 1, s, s), "linear")
        # The detection head reads M_r; it is evaluated on every M_j (a small MLP), so one
        # decode gives the score of every r (B4's search, the reward of every sampled r).
        prob = jax.nn.sigmoid(up).reshape(b, steps + 1, -1)
        k = max(1, int(round(TOP_FRACTION * s * s)))
        top = jax.lax.top_k(prob, k)[0].mean(-1)[..., None]  # [B, steps + 1, 1]
        smax = (jnp.max(enc.s_bar, -1, keepdims=True) if self.num_maps
                else jnp.zeros((b, 1), dt))
        rep = lambda v: jnp.broadcast_to(v[:, None], (b, steps + 1, v.shape[-1]))  # noqa: E731
        z = jnp.concatenate([rep(enc.f_bar), rep(c), top, rep(smax)], -1)
        y_all = self.det2(jax.nn.gelu(self.det1(z)))[..., 0]  # [B, steps + 1]
        r = jnp.clip(jnp.asarray(r, jnp.int32), 0, steps)
        y = jnp.take_along_axis(y_all, r[:, None], 1)[:, 0]
        return Out(up, y, g, enc.s_bar, enc.f_bar, c, y_all)

    def __call__(self, x, route, r, text_ids=None, text_mask=None,
                 num_steps: int | None = None) -> Out:
        return self.decode(self.encode(x), route, r, text_ids, text_mask, num_steps)


# --------------------------------------------------------------------------- losses

def refine_weights(r, num_outputs: int, gamma: float = 0.8):
    """Deep-supervision weights ``gamma^(r - j)`` for j <= r, else 0: [B, num_outputs]."""
    j = jnp.arange(num_outputs)
    r = jnp.asarray(r)[:, None]
    return jnp.where(j[None] <= r, gamma ** jnp.maximum(r - j[None], 0).astype(jnp.float32),
                     0.0)


def _bce_logits(logits, target):
    return jnp.maximum(logits, 0) - logits * target + jnp.log1p(jnp.exp(-jnp.abs(logits)))


def dice_loss(logits, masks, eps: float = 1.0):
    """1 - soft Dice per image: logits [..., S, S], masks [..., S, S] -> [...]."""
    p = jax.nn.sigmoid(logits)
    inter = jnp.sum(p * masks, (-2, -1))
    return 1.0 - (2.0 * inter + eps) / (jnp.sum(p, (-2, -1)) + jnp.sum(masks, (-2, -1)) + eps)


def align_logits(model: FPDANet, enc: Enc):
    """cos(W_v f_bar, {mean authentic, mean forged prompt embedding}) / tau_s: [B, 2]."""
    emb = enc.prompt_emb
    auth = emb[jnp.asarray(prompts.AUTHENTIC_IDS)].mean(0)
    forged = emb[jnp.asarray(prompts.FORGED_IDS)].mean(0)
    v = model.w_v(enc.f_bar)
    return jnp.stack([_cos(v, auth), _cos(v, forged)], -1) / TAU_S


def supervised_loss(model: FPDANet, enc: Enc, out: Out, masks, labels, r, text_mask=None,
                    text_ok=None, gamma: float = 0.8, w_align: float = 0.1,
                    w_gate: float = 0.1):
    """L = BCE(y) + sum_j gamma^(r-j) [BCE(M_j) + Dice(M_j)] + 0.1 L_align + 0.1 L_gate.

    Dice counts on forged images only; L_align exists for the prompt bank only; L_gate is
    the BCE of g against ``text_ok`` where text is present. Returns (loss, parts dict).
    """
    y = jnp.asarray(labels, jnp.float32)
    mk = jnp.asarray(masks, jnp.float32)[:, None]
    l_det = _bce_logits(out.y_logit, y).mean()
    n_out = out.mask_logits.shape[1]
    w = refine_weights(r, n_out, gamma)  # [B, R + 1]
    bce = _bce_logits(out.mask_logits, mk).mean((-2, -1))
    dice = dice_loss(out.mask_logits, mk) * y[:, None]
    l_mask = jnp.mean(jnp.sum(w * (bce + dice), -1))
    loss = l_det + l_mask
    parts = {"det": l_det, "mask": l_mask}
    if model.mode == "bank":
        al = align_logits(model, enc)
        l_align = jnp.mean(jax.nn.logsumexp(al, -1) - jnp.take_along_axis(
            al, jnp.asarray(labels, jnp.int32)[:, None], -1)[:, 0])
        loss = loss + w_align * l_align
        parts["align"] = l_align
    if text_mask is not None:
        tm = jnp.asarray(text_mask, jnp.float32)
        g = jnp.clip(out.gate, 1e-6, 1 - 1e-6)
        ok = jnp.asarray(text_ok, jnp.float32)
        l_gate = jnp.sum(-(ok * jnp.log(g) + (1 - ok) * jnp.log1p(-g)) * tm) / jnp.maximum(
            tm.sum(), 1.0)
        loss = loss + w_gate * l_gate
        parts["gate"] = l_gate
    return loss, parts
