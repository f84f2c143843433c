"""The real-data path (spec §Data, Real-data path): the paper's COCO retrieval episodes and a
real multimodal model behind the same :class:`adapter.RetrievalScorer` protocol.

* :func:`load_jsonl` reads episodes in the official repository's layout (one JSON object per
  line with ``caption``, ``image_ids`` [N] and ``gt``, 0-based), e.g. the COCO val2014
  Random / Adversarial sets the repository builds (CLIP hard negatives).
* :class:`CocoImages` serves those images by COCO id from a user-prepared
  ``tfds.data_source("coco_captions")`` (no download happens here).
* :class:`HFRetrievalScorer` (extra ``[hf]``: torch + transformers, imported lazily) runs
  Qwen2.5-VL / LLaVA-OV / InternVL with eager attention; forward hooks on the ``self_attn``
  modules of the requested layers keep the attention row of the last prompt token, image
  spans are found from the vision start / end tokens, and the candidate log-probabilities are
  those of the index tokens "1".."N" restricted to the N candidates (one pass per episode).
* :func:`evaluate` runs calibration, vanilla, PriDe and LAD on any scorer.

The digit substitute (``data.Episodes``) and :class:`CaptionEpisodes` share the episode
operations (``data.shuffle``, ``data.cyclic_variants``), which reorder every per-candidate
field and move the ground truth with its image.
"""

from __future__ import annotations

import json
import os
from typing import Callable, NamedTuple

import numpy as np

from icml26_jax.lad import agd, baselines, data, metrics

MAX_SINGLE_TOKEN_N = 9  # "1".."9" are one token in every tokenizer of the paper's models


class CaptionEpisodes(NamedTuple):
    """E real episodes: image_ids [E, N] (int64 COCO ids), caption [E] (object array of str),
    gt [E] int32 (0-based position of the matching image)."""

    image_ids: np.ndarray
    caption: np.ndarray
    gt: np.ndarray


def load_jsonl(path: str, limit: int | None = None) -> CaptionEpisodes:
    """Episodes from a JSONL file (fields ``caption``, ``image_ids``, ``gt``); all episodes must
    have the same N. Raises ``ValueError`` naming the line of a malformed record."""
    if not os.path.exists(path):
        raise ValueError(f"episode file {path!r} does not exist")
    ids, caps, gts = [], [], []
    with open(path) as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line_no}: not JSON ({e})") from None
            missing = {"caption", "image_ids", "gt"} - set(rec)
            if missing:
                raise ValueError(f"{path}:{line_no}: missing field(s) {sorted(missing)}; "
                                 "each line needs caption, image_ids, gt")
            n = len(rec["image_ids"])
            if ids and n != len(ids[0]):
                raise ValueError(f"{path}:{line_no}: {n} images, but earlier episodes have "
                                 f"{len(ids[0])} (one N per file)")
            if not (isinstance(rec["gt"], int) and 0 <= rec["gt"] < n):
                raise ValueError(f"{path}:{line_no}: gt must be an int in [0, {n}), got "
                                 f"{rec['gt']!r}")
            ids.append([int(i) for i in rec["image_ids"]])
            caps.append(str(rec["caption"]))
            gts.append(rec["gt"])
            if limit is not None and len(ids) >= limit:
                break
    if not ids:
        raise ValueError(f"episode file {path!r} has no episodes")
    return CaptionEpisodes(np.asarray(ids, np.int64), np.asarray(caps, object),
                           np.asarray(gts, np.int32))


class CocoImages:
    """COCO images by id from ``tfds.data_source("coco_captions", data_dir=...)``.

    The id -> record index is built once (one pass over the split) and cached as
    ``<data_dir>/lad_coco_index_<split>.npz``.
    """

    def __init__(self, data_dir: str, split: str = "validation"):
        try:
            import tensorflow_datasets as tfds
        except ImportError as e:  # pragma: no cover - a dependency of the package
            raise ImportError("CocoImages needs tensorflow-datasets") from e
        self.source = tfds.data_source("coco_captions", split=split, data_dir=data_dir,
                                       download=False)
        cache = os.path.join(data_dir, f"lad_coco_index_{split}.npz")
        if os.path.exists(cache):
            z = np.load(cache)
            keys, rows = z["ids"], z["rows"]
        else:
            keys = np.asarray([int(self.source[i]["image/id"]) for i in range(len(self.source))])
            rows = np.arange(len(keys))
            np.savez(cache, ids=keys, rows=rows)
        self.index = dict(zip(keys.tolist(), rows.tolist()))

    def __call__(self, image_id: int) -> np.ndarray:
        if int(image_id) not in self.index:
            raise KeyError(f"COCO image id {image_id} is not in this split")
        return np.asarray(self.source[self.index[int(image_id)]]["image"])


def find_spans(input_ids, start_id: int, end_id: int, n: int) -> np.ndarray:
    """[n, 2] (start, end) spans of the n images in one prompt, delimiters included (end is
    exclusive: the token after the end delimiter). ``ValueError`` unless exactly n balanced
    start / end pairs are present."""
    ids = np.asarray(input_ids).reshape(-1)
    starts, ends = np.flatnonzero(ids == start_id), np.flatnonzero(ids == end_id)
    if len(starts) != n or len(ends) != n or np.any(ends <= starts):
        raise ValueError(f"expected {n} image spans delimited by token ids {start_id}/{end_id}, "
                         f"found {len(starts)} starts and {len(ends)} ends")
    return np.stack([starts, ends + 1], 1).astype(np.int32)


def _import_hf():
    try:
        import torch
        import transformers
    except ImportError as e:
        raise ImportError("HFRetrievalScorer needs the [hf] extra: "
                          "pip install 'icml26_jax[hf]' (torch, transformers)") from e
    return torch, transformers


def _decoder_layers(model, num_layers: int):
    """The language model's decoder layers (the first ModuleList named ``layers`` of the right
    length, which covers Qwen2.5-VL, LLaVA-OneVision and InternVL)."""
    for name, mod in model.named_modules():
        if name.split(".")[-1] == "layers" and len(mod) == num_layers:
            return mod
    raise ValueError(f"no ModuleList 'layers' of length {num_layers} in {type(model).__name__}")


DEFAULT_PROMPT = ('Which image matches the caption "{caption}"? '
                  "Answer with the image number (1-{n}) only.")


class HFRetrievalScorer:
    """A :class:`adapter.RetrievalScorer` of a Hugging Face multimodal model (optional).

    Args:
      model_id: a local path or hub id of Qwen2.5-VL / LLaVA-OV / InternVL (weights must
        already be on disk where there is no network).
      images: image id -> HxWx3 uint8 array (e.g. :class:`CocoImages`).
      vision_tokens: the (start, end) delimiter strings of an image, e.g. Qwen's
        ``("<|vision_start|>", "<|vision_end|>")``.
      prompt: the question, formatted with ``caption`` and ``n``.
    """

    def __init__(self, model_id: str, images: Callable[[int], np.ndarray], *,
                 vision_tokens=("<|vision_start|>", "<|vision_end|>"), prompt=DEFAULT_PROMPT,
                 device: str = "cuda", dtype: str = "bfloat16"):
        torch, transformers = _import_hf()
        self.torch = torch
        self.processor = transformers.AutoProcessor.from_pretrained(model_id)
        self.model = transformers.AutoModelForImageTextToText.from_pretrained(
            model_id, torch_dtype=getattr(torch, dtype), attn_implementation="eager"
        ).to(device).eval()
        cfg = getattr(self.model.config, "text_config", self.model.config)
        self.num_layers = int(cfg.num_hidden_layers)
        self.layers_module = _decoder_layers(self.model, self.num_layers)
        tok = self.processor.tokenizer
        self.vision_ids = tuple(int(tok.convert_tokens_to_ids(t)) for t in vision_tokens)
        self.images, self.prompt, self.device = images, prompt, device
        self.n_forward = 0

    def _index_ids(self, n: int) -> list[int]:
        if n > MAX_SINGLE_TOKEN_N:
            raise ValueError(f"N={n}: index tokens beyond {MAX_SINGLE_TOKEN_N} span several "
                             "tokens (the joint probability with EOS is not implemented)")
        tok = self.processor.tokenizer
        ids = [tok.encode(str(k + 1), add_special_tokens=False) for k in range(n)]
        if any(len(i) != 1 for i in ids):
            raise ValueError(f"index tokens are not single tokens in this tokenizer: {ids}")
        return [i[0] for i in ids]

    def score(self, episodes: CaptionEpisodes, layers):
        torch = self.torch
        layers = tuple(int(x) for x in layers)
        if not layers or not all(0 <= x < self.num_layers for x in layers):
            raise ValueError(f"layers must be a non-empty subset of 0..{self.num_layers - 1}")
        E, N = episodes.image_ids.shape
        index_ids = self._index_ids(N)
        rows = {}

        def hook(layer):
            def f(_module, _args, output):
                w = output[1] if isinstance(output, tuple) and len(output) > 1 else None
                if w is None:
                    raise RuntimeError("attention weights are not returned: load the model "
                                       "with attn_implementation='eager'")
                rows[layer] = w[0, :, -1, :].float().mean(0).cpu().numpy()  # heads averaged
            return f

        handles = [self.layers_module[ly].self_attn.register_forward_hook(hook(ly))
                   for ly in layers]
        logp = np.zeros((E, N), np.float32)
        scores = np.zeros((E, len(layers), N), np.float32)
        try:
            for e in range(E):
                content = [{"type": "image"} for _ in range(N)]
                content.append({"type": "text", "text": self.prompt.format(
                    caption=episodes.caption[e], n=N)})
                text = self.processor.apply_chat_template(
                    [{"role": "user", "content": content}], add_generation_prompt=True)
                imgs = [self.images(int(i)) for i in episodes.image_ids[e]]
                inputs = self.processor(text=[text], images=imgs, return_tensors="pt").to(
                    self.device)
                with torch.no_grad():
                    out = self.model(**inputs)
                logits = out.logits[0, -1, index_ids].float()
                logp[e] = torch.log_softmax(logits, -1).cpu().numpy()
                sp = find_spans(inputs["input_ids"][0].cpu().numpy(), *self.vision_ids, N)
                for li, ly in enumerate(layers):
                    a = np.maximum(rows[ly], 0.0)
                    scores[e, li] = [a[s:t].sum() for s, t in sp]
        finally:
            for h in handles:
                h.remove()
        self.n_forward += E
        return logp, scores


def evaluate(scorer, cal_episodes, test_episodes, *, layers, num_shuffles: int = 5,
             seed: int = 0, topk: int = 2, tau: float = 5.0) -> dict:
    """Vanilla, PriDe and LAD (code forms) on any scorer and episode type: calibrates on
    ``cal_episodes`` (N |D_cal| passes), scores ``test_episodes`` under ``num_shuffles``
    shuffles (one pass each) and returns ``{method: metrics.summary}``."""
    layers = tuple(int(x) for x in layers)
    if not 1 <= topk <= len(layers):
        raise ValueError(f"topk must be in [1, {len(layers)}] (the candidate layers), got {topk}")
    E, N = test_episodes.image_ids.shape
    if cal_episodes.image_ids.shape[1] != N:
        raise ValueError(f"calibration episodes have N={cal_episodes.image_ids.shape[1]}, "
                         f"test episodes N={N}")
    cal = agd.calibrate(scorer, cal_episodes, layers)
    sh = data.shuffle(test_episodes, num_shuffles, np.random.default_rng(seed))
    logp, sc = scorer.score(sh, layers)
    B = agd.bias_matrix(cal.l_obs)[0]
    out = {"vanilla": logp,
           "pride": baselines.pride_scores(logp, baselines.pride_log_prior(cal.cyclic_logp)),
           "lad": agd.lad_scores(logp, sc, B, cal.a_prior, topk, tau)}
    gt = sh.gt.reshape(E, num_shuffles)
    ids = sh.image_ids.reshape(E, num_shuffles, N)
    return {m: metrics.summary(np.argmax(np.asarray(s), 1).reshape(E, num_shuffles), gt, ids, N)
            for m, s in out.items()}
