"""Answer and evidence metrics (spec §Module API ``metrics.py``).

``normalize_answer`` follows the SQuAD / LoCoMo normalisation (lowercase, punctuation and the
articles a / an / the removed, whitespace collapsed) plus "and" removed and a light suffix
stemmer [R], so "Porto." = "porto" and "cats" = "cat". ``token_f1`` is LoCoMo's F1: answers
with commas are split into parts and each gold part is matched to its best predicted part.
"""

from __future__ import annotations

import collections
import re
import string

import jax
import numpy as np

_PUNCT = re.compile("[" + re.escape(string.punctuation) + "]")
_DROP = {"a", "an", "the", "and"}


_IRREGULAR = {"bought": "buy", "gave": "give", "given": "give", "took": "take",
              "taken": "take", "went": "go", "gone": "go", "got": "get", "gotten": "get",
              "found": "find", "ran": "run", "met": "meet", "left": "leave", "made": "make",
              "sold": "sell", "told": "tell", "said": "say", "came": "come", "grew": "grow",
              "flew": "fly", "began": "begin", "brought": "bring", "thought": "think",
              "felt": "feel", "kept": "keep", "won": "win", "wrote": "write", "saw": "see",
              "taught": "teach", "learnt": "learn", "spent": "spend", "built": "build"}


def stem(word: str) -> str:
    """A light suffix stemmer [R]: plurals (``-ies``, ``-sses``, ``-es``, ``-s``), then verb
    endings (``-ing``, ``-ed``) when a vowel remains, then a doubled final consonant and a
    final ``e`` (stems >= 4 letters); common irregular verbs map to their base ("bought" ->
    "buy"). So "moved" = "move" = "moving" -> "mov" and
    "siblings" = "sibling" -> "sibl"."""
    w = _IRREGULAR.get(word, word)
    for suf, rep in (("ies", "y"), ("sses", "ss"), ("es", "e"), ("s", "")):
        if w.endswith(suf) and not w.endswith("ss") and len(w) - len(suf) + len(rep) >= 3:
            w = w[: len(w) - len(suf)] + rep
            break
    for suf in ("ing", "ed"):
        base = w[: -len(suf)]
        if w.endswith(suf) and len(base) >= 3 and re.search("[aeiouy]", base[:-1]):
            w = base
            if len(w) >= 4 and w[-1] == w[-2] and w[-1] not in "aeioulsz":
                w = w[:-1]
            break
    if len(w) >= 4 and w.endswith("e") and not w.endswith("ee"):
        w = w[:-1]
    return w


def normalize_answer(text) -> str:
    """Lowercase, punctuation dropped, articles and "and" dropped, words stemmed."""
    s = _PUNCT.sub(" ", str(text).lower())
    return " ".join(stem(w) for w in s.split() if w not in _DROP)


def exact_match(prediction, gold) -> float:
    """1.0 when the normalised strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def _f1_tokens(pred: list[str], gold: list[str]) -> float:
    common = collections.Counter(pred) & collections.Counter(gold)
    same = sum(common.values())
    if not pred or not gold:
        return float(pred == gold)
    if same == 0:
        return 0.0
    p, r = same / len(pred), same / len(gold)
    return 2 * p * r / (p + r)


def token_f1(prediction, gold) -> float:
    """Token F1 of normalised answers; comma-separated answers are scored part by part.

    With parts, each gold part takes the best F1 over the predicted parts and the result is
    their mean (LoCoMo's multi-answer F1).
    """
    golds = [g for g in str(gold).split(",") if normalize_answer(g)]
    preds = [p for p in str(prediction).split(",") if normalize_answer(p)]
    if len(golds) <= 1:
        return _f1_tokens(normalize_answer(prediction).split(), normalize_answer(gold).split())
    if not preds:
        return 0.0
    return float(np.mean([max(_f1_tokens(normalize_answer(p).split(),
                                         normalize_answer(g).split()) for p in preds)
                          for g in golds]))


def evidence_recall(retrieved_ids, gold_ids) -> float:
    """Share of gold evidence turns among the retrieved ids (sentence ids ``D3:7-2`` count
    for their turn ``D3:7``); 1.0 when there is no gold evidence."""
    gold = {str(g).split("-")[0] for g in gold_ids}
    if not gold:
        return 1.0
    got = {str(r).split("-")[0] for r in retrieved_ids}
    return len(gold & got) / len(gold)


def paired_bootstrap_ci(a, b, key, n: int = 1000, level: float = 0.95) -> tuple[float, float,
                                                                                float]:
    """Mean of ``a - b`` over paired items and its percentile bootstrap CI.

    Args:
      a, b: [n_items] per-item scores of two methods on the same items.
      key: typed ``jax.random.key`` (resampling indices).
      n: bootstrap resamples; level: CI level.

    Returns:
      (mean difference, lower, upper).
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"a and b must be equal-length non-empty 1-D arrays, got shapes "
                         f"{a.shape} and {b.shape}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    d = a - b
    idx = np.asarray(jax.random.randint(key, (int(n), d.size), 0, d.size))
    means = d[idx].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(d.mean()), float(lo), float(hi)
