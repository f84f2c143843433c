"""The Forensic Prompting Module's fixed prompt bank and closed vocabulary (spec §Method [R]).

Prompts come from the closed grammar ``[polarity] [trace] in [domain] domain at [scale]
scale``; nothing is generated, every prompt has a fixed id, and the token ids are golden
(``tests/fpda/test_prompts.py``). Ten "forged" prompts fall into four routable groups
(noise, compression, geometry, blending); the two "authentic" prompts are always present
and never routed. A route is a non-empty subset of the four groups: ``ROUTES[i]`` is the
binary expansion of ``i + 1`` (bit g = group g), so there are 15 routes.

The optional text channel (the stand-in for SID-Set descriptions) uses the same
vocabulary: "the {top|bottom|left|right|center} region looks
{spliced|copied|inpainted|untouched}".
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Prompt(NamedTuple):
    polarity: str  # "forged" | "authentic"
    trace: str
    domain: str
    scale: str
    group: int  # index into GROUPS, or -1 for the authentic prompts (never routed)

    @property
    def text(self) -> str:
        return f"{self.polarity} {self.trace} in {self.domain} domain at {self.scale} scale"


GROUPS = ("noise", "compression", "geometry", "blending")
NOISE, COMPRESSION, GEOMETRY, BLENDING = range(4)

PROMPT_BANK: tuple[Prompt, ...] = (
    Prompt("forged", "noise level inconsistency", "noise", "local", NOISE),
    Prompt("forged", "sensor pattern break", "noise", "region", NOISE),
    Prompt("forged", "jpeg grid misalignment", "frequency", "block", COMPRESSION),
    Prompt("forged", "double quantisation", "frequency", "block", COMPRESSION),
    Prompt("forged", "copy move self similarity", "pixel", "region", GEOMETRY),
    Prompt("forged", "resampling periodicity", "frequency", "local", GEOMETRY),
    Prompt("forged", "boundary seam", "pixel", "edge", BLENDING),
    Prompt("forged", "illumination mismatch", "pixel", "region", BLENDING),
    Prompt("forged", "blur mismatch", "pixel", "edge", BLENDING),
    Prompt("forged", "over smooth texture", "pixel", "local", BLENDING),
    Prompt("authentic", "consistent camera noise", "noise", "global", -1),
    Prompt("authentic", "global recompression", "frequency", "global", -1),
)
NUM_PROMPTS = len(PROMPT_BANK)  # K = 12
PROMPT_GROUP = np.array([p.group for p in PROMPT_BANK], np.int32)  # [K]
AUTHENTIC_IDS = tuple(i for i, p in enumerate(PROMPT_BANK) if p.polarity == "authentic")
FORGED_IDS = tuple(i for i, p in enumerate(PROMPT_BANK) if p.polarity == "forged")
GENERIC_PROMPT = "a tampered image"  # the fixed_prompt baseline's single prompt (B1)

# Every non-empty subset of the four groups: ROUTES[i, g] = bit g of (i + 1).
ROUTES = np.array([[(i >> g) & 1 for g in range(len(GROUPS))] for i in range(1, 16)], np.int32)
ALL_ROUTE = int(np.flatnonzero(ROUTES.sum(1) == len(GROUPS))[0])  # index of {all groups} = 14

TEXT_LOCATIONS = ("top", "bottom", "left", "right", "center")
TEXT_KINDS = ("spliced", "copied", "inpainted", "untouched")

PAD, UNK = 0, 1
MAX_TOKENS = 12

# The closed vocabulary, in a fixed order (ids are positions). Never reorder: ids are golden.
VOCAB: tuple[str, ...] = (
    "<pad>", "<unk>",
    # grammar
    "forged", "authentic", "in", "domain", "at", "scale",
    # traces
    "noise", "level", "inconsistency", "sensor", "pattern", "break", "jpeg", "grid",
    "misalignment", "double", "quantisation", "copy", "move", "self", "similarity",
    "resampling", "periodicity", "boundary", "seam", "illumination", "mismatch", "blur",
    "over", "smooth", "texture", "consistent", "camera", "global", "recompression",
    # domains and scales
    "frequency", "pixel", "local", "region", "block", "edge",
    # generic prompt and text channel
    "a", "tampered", "image", "the", "looks", "top", "bottom", "left", "right", "center",
    "spliced", "copied", "inpainted", "untouched",
    # words users' descriptions commonly carry (kept so real text is not all <unk>)
    "is", "area", "edited", "real", "fake", "object", "face", "background",
)
_IDS = {w: i for i, w in enumerate(VOCAB)}


def tokenize(text: str, max_tokens: int = MAX_TOKENS) -> np.ndarray:
    """Lower-cased whitespace tokens -> ``int32[max_tokens]`` ids (``<unk>`` for unknown
    words, ``<pad>`` = 0 after the end; longer texts are truncated)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    ids = [_IDS.get(w, UNK) for w in text.lower().replace(",", " ").replace(".", " ").split()]
    out = np.full((max_tokens,), PAD, np.int32)
    ids = ids[:max_tokens]
    out[:len(ids)] = ids
    return out


def bank_tokens(max_tokens: int = MAX_TOKENS) -> np.ndarray:
    """``int32[K, max_tokens]``: the tokenised prompt bank."""
    return np.stack([tokenize(p.text, max_tokens) for p in PROMPT_BANK])


def describe(location: str, kind: str) -> str:
    """The text-channel template: ``"the {location} region looks {kind}"``."""
    if location not in TEXT_LOCATIONS:
        raise ValueError(f"location must be one of {TEXT_LOCATIONS}, got {location!r}")
    if kind not in TEXT_KINDS:
        raise ValueError(f"kind must be one of {TEXT_KINDS}, got {kind!r}")
    return f"the {location} region looks {kind}"


def prompt_mask(route: np.ndarray) -> np.ndarray:
    """Per-prompt mask m_k = rho_{group(k)}; the authentic prompts are always on.

    Args:
      route: ``[..., 4]`` in {0, 1} (a row of ``ROUTES``).

    Returns:
      ``[..., K]`` with the same array type (NumPy or JAX) and dtype as ``route``.
    """
    on = route[..., np.maximum(PROMPT_GROUP, 0)]
    # Arithmetic, not indexing assignment, so NumPy and traced JAX arrays both work.
    auth = (PROMPT_GROUP < 0).astype(np.int32)
    return on * (1 - auth).astype(on.dtype) + auth.astype(on.dtype)
