"""DigitGrid-VQA: splits, hand-checked answers of every template, the answer-only loss mask
(spec §Tests 9), exact match, deterministic batches and input validation."""

import itertools

import numpy as np
import pytest

from icml26_jax.grace import data as D


@pytest.fixture(scope="module")
def splits():
    return D.load_digit_splits(0)


@pytest.fixture(scope="module")
def train(splits):
    return D.make_vqa(splits, "train", 600, np.random.default_rng(1))


def _hand(digits, template, choice):
    """One question over blank cells with explicit digits."""
    return D._compose(np.zeros((1, 4, 8, 8)), [digits], [D.TEMPLATES.index(template)],
                      [choice])


def test_vocab_and_layout_constants():
    assert D.VOCAB[D.PAD] == "<pad>" and D.VOCAB[D.IMG] == "<img>" and D.VOCAB[D.EOS] == "<eos>"
    assert len(set(D.VOCAB)) == D.VOCAB_SIZE == len(D.TOKEN_ID)
    assert D.SEQ_LEN == 27
    assert D.decode(D.encode("sum of top row ? 1 3 <eos>")) == "sum of top row ? 1 3 <eos>"
    assert D.decode([D.PAD, D.DIGIT0 + 7, D.PAD], skip_pad=False) == "<pad> 7 <pad>"
    with pytest.raises(ValueError, match="not in VOCAB"):
        D.encode("digit at middle")


def test_splits_sizes_disjoint_and_seeded(splits):
    assert splits.images.shape == (1797, 8, 8) and splits.images.dtype == np.float32
    assert 0.0 <= splits.images.min() and splits.images.max() == 1.0
    np.testing.assert_array_equal(np.bincount(splits.split), [1258, 270, 269])
    again = D.load_digit_splits(0)
    np.testing.assert_array_equal(again.split, splits.split)
    assert np.any(D.load_digit_splits(1).split != splits.split)
    # Every composed cell is an image (with its label) of the question's split, never another.
    where = {}
    for img, lab, sp in zip(splits.images, splits.labels, splits.split):
        where.setdefault(img.tobytes(), set()).add((int(lab), int(sp)))
    for k, name in enumerate(D.SPLITS):
        v = D.make_vqa(splits, name, 200, np.random.default_rng(k))
        cells = v.images.reshape(200, 2, 8, 2, 8).transpose(0, 1, 3, 2, 4).reshape(200, 4, 8, 8)
        for c, lab in zip(cells.reshape(800, 8, 8), v.digits.reshape(-1)):
            assert (int(lab), k) in where[c.tobytes()]


# (digits TL TR BL BR, template, choice, question, answer) checked by hand.
HAND = [
    ([7, 1, 2, 3], "digit_at", 0, "digit at top left ?", "7"),
    ([7, 1, 2, 3], "digit_at", 1, "digit at top right ?", "1"),
    ([7, 1, 2, 3], "digit_at", 2, "digit at bottom left ?", "2"),
    ([7, 1, 2, 3], "digit_at", 3, "digit at bottom right ?", "3"),
    ([9, 4, 2, 3], "row_sum", 0, "sum of top row ?", "1 3"),
    ([9, 4, 2, 3], "row_sum", 1, "sum of bottom row ?", "5"),
    ([0, 0, 9, 9], "row_sum", 0, "sum of top row ?", "0"),
    ([0, 0, 9, 9], "row_sum", 1, "sum of bottom row ?", "1 8"),
    ([5, 5, 1, 9], "row_sum", 0, "sum of top row ?", "1 0"),
    ([0, 3, 4, 7], "count_even", 0, "how many even ?", "2"),
    ([1, 3, 5, 7], "count_even", 0, "how many even ?", "0"),
    ([0, 2, 4, 8], "count_even", 0, "how many even ?", "4"),
    ([1, 2, 3, 8], "largest_position", 0, "largest position ?", "bottom right"),
    ([3, 9, 9, 1], "largest_position", 0, "largest position ?", "top right"),
    ([9, 1, 1, 9], "largest_position", 0, "largest position ?", "top left"),
    ([1, 5, 7, 7], "largest_position", 0, "largest position ?", "bottom left"),
    ([6, 0, 6, 0], "column_greater", 0, "left column sum greater ?", "yes"),  # 12 > 0
    ([6, 0, 0, 6], "column_greater", 0, "left column sum greater ?", "no"),  # 6 = 6
    ([1, 9, 0, 9], "column_greater", 0, "left column sum greater ?", "no"),  # 1 < 18
    ([1, 9, 9, 0], "column_greater", 0, "left column sum greater ?", "yes"),  # 10 > 9
]


@pytest.mark.parametrize("digits,template,choice,question,answer", HAND)
def test_every_template_answer_by_hand(digits, template, choice, question, answer):
    t = D.TEMPLATES.index(template)
    q, a = D._encode_question(t, choice, digits)
    assert D.decode(q) == question and D.decode(a) == answer + " <eos>"
    v = _hand(digits, template, choice)
    assert D.decode(v.tokens[0]) == " ".join(["<img>"] * 16 + [question, answer, "<eos>"])
    assert v.answer_start[0] == 16 + len(question.split())
    assert D.decode(D.answers_of(v)[0]) == answer + " <eos>"
    np.testing.assert_array_equal(v.digits[0], digits)
    assert v.template[0] == t


def _reference(data, i):
    """(question, answer) ids of row i from the scalar reference, the choice read off the
    question tokens (exactly one choice must match)."""
    t = int(data.template[i])
    q = list(data.tokens[i, 16:data.answer_start[i]])
    refs = [D._encode_question(t, c, data.digits[i]) for c in range(D.N_CHOICES[t])]
    ref = [r for r in refs if r[0] == q]
    assert len(ref) == 1, (D.decode(q), t)
    return ref[0]


def test_vectorised_matches_reference(train):
    for i in range(len(train.tokens)):
        tok = train.tokens[i]
        q, a = _reference(train, i)
        qa = q + a
        np.testing.assert_array_equal(tok[16:16 + len(qa)], qa)
        assert np.all(tok[:16] == D.IMG) and np.all(tok[16 + len(qa):] == D.PAD)
    # All templates and both answer lengths of row_sum occur.
    assert set(train.template.tolist()) == set(range(5))
    assert {int(x) for x in (train.tokens != D.PAD).sum(1)} >= {16 + 3 + 3, 16 + 5 + 2, 16 + 5 + 3}


def test_loss_mask_covers_exactly_answer_predictions(train):
    """Spec §Tests 9: masked s are exactly those whose next token is an answer token or <eos>."""
    tok, lab, m = train.tokens, train.labels, train.loss_mask
    np.testing.assert_array_equal(lab[:, :-1], tok[:, 1:])
    assert np.all(lab[:, -1] == D.PAD)
    for i in range(len(tok)):
        _, ans = _reference(train, i)
        s0 = int(train.answer_start[i])
        masked = np.flatnonzero(m[i])
        np.testing.assert_array_equal(masked, np.arange(s0 - 1, s0 - 1 + len(ans)))
        np.testing.assert_array_equal(tok[i, masked + 1], ans)
        np.testing.assert_array_equal(lab[i, masked], ans)
        assert tok[i, masked[-1] + 1] == D.EOS and D.EOS not in tok[i, :masked[-1] + 1]
        assert tok[i, masked[0]] == D.TOKEN_ID["?"]
    # The labels under the mask are exactly answers_of (incl. <eos>), PAD-free.
    ans = D.answers_of(train)
    np.testing.assert_array_equal(np.sort(lab[m]), np.sort(ans[ans != D.PAD]))
    assert m.sum() == (ans != D.PAD).sum() and not np.any(lab[m] == D.PAD)


def test_prompt_hides_answer(train):
    prompt, start = D.prompt_of(train)
    s = np.arange(D.SEQ_LEN)[None, :]
    before = s < start[:, None]
    np.testing.assert_array_equal(prompt[before], train.tokens[before])
    assert np.all(prompt[~before] == D.PAD)
    assert np.all(prompt[np.arange(len(start)), start - 1] == D.TOKEN_ID["?"])
    assert not np.any(prompt == D.EOS)


def test_grid_and_patches_layout():
    cells = np.stack([np.full((8, 8), v, np.float32) for v in (1, 2, 3, 4)])[None]
    v = D._compose(cells, [[0, 1, 2, 3]], [2], [0])
    img = v.images[0]
    assert img.shape == (16, 16)
    assert img[:8, :8].min() == 1 and img[:8, 8:].min() == 2 and img[8:, :8].min() == 3
    assert img[8:, 8:].max() == 4 and img[8:, 8:].min() == 4
    x = np.random.default_rng(0).random((3, 16, 16)).astype(np.float32)
    p = D.patches(x)
    assert p.shape == (3, 16, 16)
    for k, (pr, pc) in enumerate(itertools.product(range(4), range(4))):
        np.testing.assert_array_equal(p[:, k], x[:, 4 * pr:4 * pr + 4, 4 * pc:4 * pc + 4]
                                      .reshape(3, 16))


def test_determinism_and_dtypes(splits, train):
    again = D.make_vqa(splits, "train", 600, np.random.default_rng(1))
    for a, b in zip(train, again):
        np.testing.assert_array_equal(a, b)
    other = D.make_vqa(splits, "train", 600, np.random.default_rng(2))
    assert np.any(other.tokens != train.tokens)
    assert train.images.dtype == np.float32 and train.tokens.dtype == np.int32
    assert train.labels.dtype == np.int32 and train.loss_mask.dtype == bool
    assert train.answer_start.dtype == np.int32 and train.digits.dtype == np.int32
    np.testing.assert_array_equal(D.digit_labels(train), train.digits)


def test_exact_match_eos_semantics():
    v = D._compose(np.zeros((2, 4, 8, 8)), [[9, 4, 0, 0], [1, 1, 1, 1]], [1, 2], [0, 0])
    n13, two = D.encode("1 3 <eos>"), D.encode("0 <eos>")  # answers "1 3", "0"
    E, P, d = D.EOS, D.PAD, D.DIGIT0

    def em(p0, p1):
        return D.exact_match(np.asarray([p0, p1]), v)

    assert em(n13 + [P], two + [P, P]) == 100.0
    assert em(n13 + [d + 5], two + [d + 7, E]) == 100.0  # tokens after <eos> are ignored
    assert em([d + 1, d + 3, d + 5, E], two + [P, P]) == 50.0  # missing <eos> at its place
    assert em(n13 + [P], [d, d, E, P]) == 50.0  # extra token before <eos>
    assert em([d + 1, E, P, P], [E, d, E, P]) == 0.0  # early <eos>
    assert em([d + 1, d + 3, P, P], two + [P, P]) == 50.0  # no <eos> at all
    with pytest.raises(ValueError, match="pred must be"):
        D.exact_match(np.zeros((2, 3), np.int32), v)


def test_batch_at_deterministic_and_epochs_permute(train):
    n, bs = len(train.tokens), 64
    per_epoch = n // bs  # 9 batches, 24 rows dropped per epoch
    b = D.batch_at(train, bs, 3, 5)
    np.testing.assert_array_equal(b.tokens, D.batch_at(train, bs, 3, 5).tokens)
    assert b.tokens.shape == (bs, D.SEQ_LEN)
    for e in range(2):
        idx = np.concatenate([D.batch_indices(n, bs, 3, e * per_epoch + i)
                              for i in range(per_epoch)])
        assert len(np.unique(idx)) == per_epoch * bs
        np.testing.assert_array_equal(idx, np.random.default_rng((3, e)).permutation(n)[:len(idx)])
    assert np.any(D.batch_indices(n, bs, 3, 0) != D.batch_indices(n, bs, 3, per_epoch))
    assert np.any(D.batch_indices(n, bs, 3, 0) != D.batch_indices(n, bs, 4, 0))
    # The stream equals batch_at step by step, also when resumed mid-way.
    stream = D.batches(train, bs, 3)
    got = [next(stream) for _ in range(per_epoch + 2)]
    resumed = D.batches(train, bs, 3, start_step=per_epoch + 1)
    np.testing.assert_array_equal(next(resumed).tokens, got[-1].tokens)
    for t, g in enumerate(got):
        np.testing.assert_array_equal(g.loss_mask, D.batch_at(train, bs, 3, t).loss_mask)
    with pytest.raises(ValueError, match="batch_size"):
        D.batch_at(train, n + 1, 0, 0)
    with pytest.raises(ValueError, match="step"):
        D.batch_at(train, bs, 0, -1)


def test_value_errors(splits):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="split must be one of"):
        D.make_vqa(splits, "validation", 10, rng)
    with pytest.raises(ValueError, match="n must be"):
        D.make_vqa(splits, "train", 0, rng)
    with pytest.raises(ValueError, match="rng must be"):
        D.make_vqa(splits, "train", 5, 0)
    with pytest.raises(ValueError, match="choice must be"):
        _hand([1, 2, 3, 4], "row_sum", 2)
    with pytest.raises(ValueError, match="images must be"):
        D.patches(np.zeros((2, 8, 8)))
