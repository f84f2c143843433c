"""DigitGrid-VQA: the offline substitute of the paper's VQA benchmarks (spec §Data).

An image is a 16x16 grid of 2x2 handwritten digits (8x8 each, ``sklearn.datasets.load_digits``,
shipped inside scikit-learn, no download), in reading order top-left, top-right, bottom-left,
bottom-right; its grid classes are ``digits[4]`` in that order. The 1797 digit images are split
70/15/15 by image id (seeded) *before* grids are composed, so no digit crosses splits. Real
handwriting keeps some genuine ambiguity (3/5/8, 4/9, 1/7): the source of teacher uncertainty
that the confidence gate reads.

Every image gets one question from five templates (:data:`TEMPLATES`, drawn uniformly), each
with a multi-token answer that ends in ``<eos>``:

* ``digit_at``: "digit at {top|bottom} {left|right} ?" -> the class there, "7 <eos>";
* ``row_sum``: "sum of {top|bottom} row ?" -> decimal digits of the row sum, "1 3 <eos>";
* ``count_even``: "how many even ?" -> even classes among the four (0 is even), "2 <eos>";
* ``largest_position``: "largest position ?" -> the cell of the largest class, first in
  reading order on ties, "bottom right <eos>";
* ``column_greater``: "left column sum greater ?" -> "yes <eos>" iff TL + BL > TR + BR.

Token layout of one sequence (right padded with ``<pad>`` to :data:`SEQ_LEN` = 27)::

    <img> x 16 | question (<= 7 tokens, ends in "?") | answer (<= 3 tokens) <eos> | <pad> ...

The 16 ``<img>`` slots are placeholders for the visual tokens, one per 4x4 patch of the
16x16 image in row-major order over the 4x4 patch grid (:func:`patches`). ``answer_start`` is
the index of the first answer token. Teacher forcing: ``labels[:, s] = tokens[:, s + 1]``
(``<pad>`` at the last position), and ``loss_mask`` is True exactly at the positions that
*predict* an answer token or the ``<eos>``: answer_start - 1 <= s <= answer_start + L - 2
for an answer of L tokens including ``<eos>``.

Real-data path: a real VQA JSONL of (image path, question, answer) is read by ``adapter``
(spec §Data, real-data path), not here; this module only builds the offline substitute.
"""

from __future__ import annotations

import functools
from typing import Iterator, NamedTuple, Sequence

import numpy as np

# Vocabulary (shared by teacher and student, as logit distillation requires).
VOCAB = ["<pad>", "<img>", "<eos>", *[str(d) for d in range(10)],
         "digit", "at", "top", "bottom", "left", "right", "sum", "of", "row", "how", "many",
         "even", "largest", "position", "column", "greater", "yes", "no", "?"]
TOKEN_ID = {w: i for i, w in enumerate(VOCAB)}
VOCAB_SIZE = len(VOCAB)  # 32
PAD, IMG, EOS = TOKEN_ID["<pad>"], TOKEN_ID["<img>"], TOKEN_ID["<eos>"]
DIGIT0 = TOKEN_ID["0"]  # the token of class c is DIGIT0 + c

N_VISUAL = 16  # visual tokens per image (4x4 patches of 4x4 px)
MAX_QUESTION = 7  # question tokens, "?" included
MAX_ANSWER = 4  # answer tokens, <eos> included
SEQ_LEN = N_VISUAL + MAX_QUESTION + MAX_ANSWER  # 27

TEMPLATES = ("digit_at", "row_sum", "count_even", "largest_position", "column_greater")
# Choices per template: the cell (0..3, reading order), the row (0 top, 1 bottom), or none.
N_CHOICES = (4, 2, 1, 1, 1)
SPLITS = ("train", "val", "test")
SPLIT_FRACTIONS = (0.70, 0.15)  # train, val; the rest is test
_ROW_WORD = ("top", "bottom")
_COL_WORD = ("left", "right")


class DigitSplits(NamedTuple):
    """All 1797 digits: images [1797, 8, 8] float32 in [0, 1] (= raw / 16), labels [1797]
    int32, split [1797] int32 (index into :data:`SPLITS`: 0 train, 1 val, 2 test)."""

    images: np.ndarray
    labels: np.ndarray
    split: np.ndarray


class VQAData(NamedTuple):
    """n questions: images [n, 16, 16] float32, tokens [n, S] int32, labels [n, S] int32 (the
    next token), loss_mask [n, S] bool (positions predicting answer tokens and <eos>),
    answer_start [n] int32, template [n] int32 (index into :data:`TEMPLATES`), digits [n, 4]
    int32 (grid classes in reading order). S = :data:`SEQ_LEN`."""

    images: np.ndarray
    tokens: np.ndarray
    labels: np.ndarray
    loss_mask: np.ndarray
    answer_start: np.ndarray
    template: np.ndarray
    digits: np.ndarray


def encode(text: str) -> list[int]:
    """Whitespace-separated words -> token ids; raises ``ValueError`` on an unknown word."""
    out = []
    for w in text.split():
        if w not in TOKEN_ID:
            raise ValueError(f"text has the word {w!r}, which is not in VOCAB ({VOCAB})")
        out.append(TOKEN_ID[w])
    return out


def decode(ids, skip_pad: bool = True) -> str:
    """Token ids -> space-joined words (``<pad>`` dropped when ``skip_pad``)."""
    words = []
    for i in np.asarray(ids).reshape(-1).tolist():
        if not 0 <= i < VOCAB_SIZE:
            raise ValueError(f"ids has {i}, outside the vocabulary [0, {VOCAB_SIZE})")
        if not (skip_pad and i == PAD):
            words.append(VOCAB[i])
    return " ".join(words)


def load_digit_splits(seed: int = 0) -> DigitSplits:
    """The digits, split by image id with ``default_rng(seed).permutation``: the first
    round(0.70 n) ids are train (1258), the next round(0.15 n) val (270), the rest test (269)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images = (d.images / 16.0).astype(np.float32)
    n = len(images)
    n_train = int(round(SPLIT_FRACTIONS[0] * n))
    n_val = int(round(SPLIT_FRACTIONS[1] * n))
    order = np.random.default_rng(seed).permutation(n)
    split = np.full(n, 2, np.int32)
    split[order[:n_train]] = 0
    split[order[n_train:n_train + n_val]] = 1
    return DigitSplits(images, d.target.astype(np.int32), split)


def _encode_question(template: int, choice: int, digits: Sequence[int]) -> tuple[list, list]:
    """Reference (scalar, via strings) of one question: (question ids, answer ids incl. <eos>).

    ``choice`` is the cell (0..3) for ``digit_at``, the row (0 top, 1 bottom) for ``row_sum``
    and ignored otherwise. Tests check :func:`make_vqa`'s vectorised path against this.
    """
    d = [int(x) for x in digits]
    name = TEMPLATES[template]
    if name == "digit_at":
        q = f"digit at {_ROW_WORD[choice // 2]} {_COL_WORD[choice % 2]} ?"
        a = str(d[choice])
    elif name == "row_sum":
        q = f"sum of {_ROW_WORD[choice]} row ?"
        a = " ".join(str(d[2 * choice] + d[2 * choice + 1]))
    elif name == "count_even":
        q = "how many even ?"
        a = str(sum(x % 2 == 0 for x in d))
    elif name == "largest_position":
        q = "largest position ?"
        k = d.index(max(d))
        a = f"{_ROW_WORD[k // 2]} {_COL_WORD[k % 2]}"
    else:
        q = "left column sum greater ?"
        a = "yes" if d[0] + d[2] > d[1] + d[3] else "no"
    return encode(q), encode(a + " <eos>")


def _question_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Questions depend only on (template, choice): table [9, MAX_QUESTION] (PAD padded),
    lengths [9], and the row offset of each template."""
    rows, offsets = [], []
    for t, k in enumerate(N_CHOICES):
        offsets.append(len(rows))
        rows += [_encode_question(t, c, [0, 0, 0, 0])[0] for c in range(k)]
    table = np.full((len(rows), MAX_QUESTION), PAD, np.int32)
    for i, r in enumerate(rows):
        table[i, :len(r)] = r
    return table, np.asarray([len(r) for r in rows], np.int32), np.asarray(offsets, np.int32)


_Q_TABLE, _Q_LEN, _Q_OFFSET = _question_table()


def _answers(digits: np.ndarray, template: np.ndarray, choice: np.ndarray):
    """Vectorised answers: ids [n, MAX_ANSWER] (incl. <eos>, PAD padded) and lengths [n]."""
    n = len(digits)
    r = np.arange(n)
    out = np.full((len(TEMPLATES), n, MAX_ANSWER), PAD, np.int32)
    length = np.full((len(TEMPLATES), n), 2, np.int32)
    # digit_at
    out[0, :, 0] = DIGIT0 + digits[r, np.clip(choice, 0, 3)]
    out[0, :, 1] = EOS
    # row_sum: one or two decimal digits
    row = np.clip(choice, 0, 1)
    s = digits[r, 2 * row] + digits[r, 2 * row + 1]
    two = s >= 10
    out[1, :, 0] = np.where(two, DIGIT0 + s // 10, DIGIT0 + s)
    out[1, :, 1] = np.where(two, DIGIT0 + s % 10, EOS)
    out[1, :, 2] = np.where(two, EOS, PAD)
    length[1] = np.where(two, 3, 2)
    # count_even
    out[2, :, 0] = DIGIT0 + np.sum(digits % 2 == 0, axis=1)
    out[2, :, 1] = EOS
    # largest_position: np.argmax returns the first maximum, i.e. reading order on ties
    k = np.argmax(digits, axis=1)
    out[3, :, 0] = np.where(k // 2 == 0, TOKEN_ID["top"], TOKEN_ID["bottom"])
    out[3, :, 1] = np.where(k % 2 == 0, TOKEN_ID["left"], TOKEN_ID["right"])
    out[3, :, 2] = EOS
    length[3] = 3
    # column_greater
    left = digits[:, 0] + digits[:, 2] > digits[:, 1] + digits[:, 3]
    out[4, :, 0] = np.where(left, TOKEN_ID["yes"], TOKEN_ID["no"])
    out[4, :, 1] = EOS
    return out[template, r], length[template, r]


def _compose(cells, digits, template, choice) -> VQAData:
    """Questions from explicit parts (the deterministic core of :func:`make_vqa`).

    Args:
      cells: [n, 4, 8, 8] the digit images in reading order (TL, TR, BL, BR).
      digits: [n, 4] their classes.
      template: [n] template indices into :data:`TEMPLATES`.
      choice: [n] the cell (``digit_at``) or row (``row_sum``); ignored by other templates.
    """
    cells = np.asarray(cells, np.float32)
    digits = np.asarray(digits, np.int64)
    template = np.asarray(template, np.int64)
    choice = np.asarray(choice, np.int64)
    n = len(digits)
    if cells.shape != (n, 4, 8, 8) or digits.shape != (n, 4):
        raise ValueError(f"cells must be [n, 4, 8, 8] and digits [n, 4], got {cells.shape} and "
                         f"{digits.shape}")
    if template.shape != (n,) or np.any((template < 0) | (template >= len(TEMPLATES))):
        raise ValueError(f"template must be [n] in [0, {len(TEMPLATES)}), got {template}")
    n_choices = np.asarray(N_CHOICES)[template]
    if choice.shape != (n,) or np.any((choice < 0) | ((choice >= n_choices) & (n_choices > 1))):
        raise ValueError(f"choice must be [n] with a valid cell/row per template, got {choice}")
    choice = np.where(n_choices > 1, choice, 0)
    images = cells.reshape(n, 2, 2, 8, 8).transpose(0, 1, 3, 2, 4).reshape(n, 16, 16)

    qidx = _Q_OFFSET[template] + choice
    q_len = _Q_LEN[qidx]
    ans, a_len = _answers(digits, template, choice)
    tokens = np.full((n, SEQ_LEN), PAD, np.int32)
    tokens[:, :N_VISUAL] = IMG
    tokens[:, N_VISUAL:N_VISUAL + MAX_QUESTION] = _Q_TABLE[qidx]
    answer_start = (N_VISUAL + q_len).astype(np.int32)
    j = np.arange(MAX_ANSWER)
    valid = j[None, :] < a_len[:, None]  # [n, MAX_ANSWER]
    cols = answer_start[:, None] + j[None, :]
    rows = np.broadcast_to(np.arange(n)[:, None], cols.shape)
    tokens[rows[valid], cols[valid]] = ans[valid]

    labels = np.full_like(tokens, PAD)
    labels[:, :-1] = tokens[:, 1:]
    s = np.arange(SEQ_LEN)[None, :]
    loss_mask = (s >= answer_start[:, None] - 1) & (s <= (answer_start + a_len)[:, None] - 2)
    return VQAData(images, tokens, labels, loss_mask, answer_start,
                   template.astype(np.int32), digits.astype(np.int32))


def make_vqa(splits: DigitSplits, split: str, n: int, rng: np.random.Generator) -> VQAData:
    """``n`` DigitGrid-VQA questions whose four digits all come from ``split``.

    Draw order (fixed, so a seed fixes the data): the 4 digit ids per grid (uniform, with
    replacement, among the split's images), the template (uniform), the cell (uniform over 4),
    the row (uniform over 2).

    Args:
      splits: the digits, from :func:`load_digit_splits`.
      split: ``"train"``, ``"val"`` or ``"test"``.
      n: number of questions (>= 1).
      rng: the generator (all randomness).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got split={split!r}")
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got n={n!r}")
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a np.random.Generator, got rng={rng!r}")
    ids = np.flatnonzero(splits.split == SPLITS.index(split))
    pick = ids[rng.integers(0, len(ids), size=(n, 4))]
    template = rng.integers(0, len(TEMPLATES), size=n)
    cell = rng.integers(0, 4, size=n)
    row = rng.integers(0, 2, size=n)
    choice = np.where(template == 0, cell, np.where(template == 1, row, 0))
    return _compose(splits.images[pick], splits.labels[pick], template, choice)


def patches(images) -> np.ndarray:
    """[..., 16, 16] -> [..., 16, 16]: the 16 row-major 4x4 patches, each flattened
    row-major (patch p = (p // 4, p % 4) on the 4x4 patch grid)."""
    x = np.asarray(images, np.float32)
    if x.shape[-2:] != (16, 16):
        raise ValueError(f"images must be [..., 16, 16], got {x.shape}")
    x = x.reshape(x.shape[:-2] + (4, 4, 4, 4))  # [..., pr, r, pc, c]
    x = np.swapaxes(x, -3, -2)  # [..., pr, pc, r, c]
    return x.reshape(x.shape[:-4] + (16, 16))


def digit_labels(data: VQAData) -> np.ndarray:
    """[n, 4] grid classes in reading order (targets for vision-tower pretraining)."""
    return data.digits


def prompt_of(data: VQAData) -> tuple[np.ndarray, np.ndarray]:
    """Greedy-decoding prompts: (tokens [n, S] with the answer and <eos> replaced by <pad>,
    answer_start [n])."""
    s = np.arange(SEQ_LEN)[None, :]
    prompt = np.where(s < data.answer_start[:, None], data.tokens, PAD).astype(np.int32)
    return prompt, data.answer_start


def answers_of(data: VQAData) -> np.ndarray:
    """[n, MAX_ANSWER] int32: the answer tokens and <eos>, <pad> padded."""
    cols = data.answer_start[:, None] + np.arange(MAX_ANSWER)[None, :]
    inside = cols < SEQ_LEN
    ans = np.take_along_axis(data.tokens, np.minimum(cols, SEQ_LEN - 1), axis=1)
    return np.where(inside, ans, PAD).astype(np.int32)


def exact_match(pred, data: VQAData) -> float:
    """Exact-match accuracy (%) of predictions [n, MAX_ANSWER].

    A prediction is correct iff its tokens up to and including its first <eos> equal the
    answer and its <eos>; anything after that <eos> is ignored, and a prediction without
    <eos> is wrong.
    """
    pred = np.asarray(pred)
    n = len(data.tokens)
    if pred.shape != (n, MAX_ANSWER):
        raise ValueError(f"pred must be [n, {MAX_ANSWER}] = {(n, MAX_ANSWER)}, got {pred.shape}")
    ans = answers_of(data)
    length = np.argmax(ans == EOS, axis=1) + 1  # every answer has an <eos>
    upto = np.arange(MAX_ANSWER)[None, :] < length[:, None]
    # Equal on [0, length) implies pred's first <eos> is at length - 1, since ans has none before.
    correct = np.all((pred == ans) | ~upto, axis=1)
    return float(100.0 * np.mean(correct))


def take(data: VQAData, idx) -> VQAData:
    """The rows ``idx`` of every field."""
    return VQAData(*(np.asarray(x)[idx] for x in data))


@functools.lru_cache(maxsize=4)
def _epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    perm = np.random.default_rng((seed, epoch)).permutation(n)
    perm.setflags(write=False)
    return perm


def batch_indices(n: int, batch_size: int, seed: int, step: int) -> np.ndarray:
    """Row indices [batch_size] of training step ``step``.

    Epoch e = step // (n // batch_size) visits the rows in the order
    ``np.random.default_rng((seed, e)).permutation(n)``, in consecutive chunks of
    ``batch_size``; the last ``n % batch_size`` rows of each epoch are dropped. The batch of a
    step depends only on (n, batch_size, seed, step), never on history, so a run resumed from
    a checkpoint at step t sees the same batches as one that never stopped.
    """
    if not isinstance(batch_size, (int, np.integer)) or not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be an integer in [1, n={n}], got "
                         f"batch_size={batch_size!r}")
    if not isinstance(step, (int, np.integer)) or step < 0:
        raise ValueError(f"step must be an integer >= 0, got step={step!r}")
    per_epoch = n // batch_size
    epoch, i = divmod(int(step), per_epoch)
    return _epoch_permutation(int(n), int(seed), epoch)[i * batch_size:(i + 1) * batch_size]


def batch_at(data: VQAData, batch_size: int, seed: int, step: int) -> VQAData:
    """The batch of step ``step`` (see :func:`batch_indices` for the order)."""
    return take(data, batch_indices(len(data.tokens), batch_size, seed, step))


def batches(data: VQAData, batch_size: int, seed: int,
            start_step: int = 0) -> Iterator[VQAData]:
    """Infinite stream of training batches: ``batch_at(data, batch_size, seed, t)`` for
    t = start_step, start_step + 1, ... (epoch e permuted by ``default_rng((seed, e))``)."""
    step = start_step
    while True:
        yield batch_at(data, batch_size, seed, step)
        step += 1
