"""MQAR / passkey generators and the head-role analysis."""

import numpy as np
import pytest

from icml26_jax.adarope import analysis, tasks

K, V = 128, 32


def _check_mqar(b, num_keys, num_values, repeat=False):
    tok, tgt, mask = b["tokens"], b["targets"], b["mask"]
    for r in range(tok.shape[0]):
        keys = tok[r, b["key_pos"][r]]
        q = tok[r, b["query_pos"][r]]
        np.testing.assert_array_equal(keys, q)  # the key at key_pos is the queried one
        np.testing.assert_array_equal(tgt[r, b["query_pos"][r]], tok[r, b["key_pos"][r] + 1])
        ctx = tok[r, :b["query_pos"][r, 0] - 1]
        ks = ctx[ctx < num_keys]
        if repeat:  # queried keys occur once; distractor keys are never queried
            for k in q:
                assert (ks == k).sum() == 1
        else:
            assert len(ks) == len(set(ks.tolist()))  # unique keys
        assert (tok[r, b["query_pos"][r] - 1] == num_keys + num_values).all()  # `?`
        assert ((tgt[r, b["query_pos"][r]] >= num_keys)
                & (tgt[r, b["query_pos"][r]] < num_keys + num_values)).all()
    assert mask.sum(1).tolist() == [b["query_pos"].shape[1]] * tok.shape[0]


def test_mqar_spec_layout():
    b = tasks.mqar_batch(np.random.default_rng(0), 4, 64, K, V)
    assert tasks.mqar_num_pairs(64) == 24
    _check_mqar(b, K, V)
    assert (b["tokens"][:, 0:48:2] < K).all() and (b["tokens"][:, 1:48:2] >= K).all()
    assert len(set(b["query_pos"][0].tolist())) == 8


def test_mqar_repeat_distractors():
    b = tasks.mqar_batch(np.random.default_rng(1), 8, 128, 16, 16, repeat_distractors=True)
    _check_mqar(b, 16, 16, repeat=True)
    ctx = b["tokens"][:, :112]
    assert (ctx[:, 0::2] < 16).all() and (ctx[:, 1::2] >= 16).all()  # 56 pairs, no filler
    assert ctx.max() < tasks.mqar_vocab_size(16, 16)
    # With n == Q every pair is queried: the same keys as the spec's unique-key MQAR.
    s = tasks.mqar_batch(np.random.default_rng(1), 8, 32, 16, 16, repeat_distractors=True)
    _check_mqar(s, 16, 16)
    assert sorted(s["key_pos"][0].tolist()) == list(range(0, 16, 2))


def test_distance_buckets_scale_with_length():
    assert tasks.distance_buckets(256) == ((0, 64), (64, 128), (128, 256))
    assert tasks.distance_buckets(128) == ((0, 32), (32, 64), (64, 128))
    with pytest.raises(ValueError, match="multiple of 4"):
        tasks.distance_buckets(30)


@pytest.mark.parametrize("T,bucket", [(256, b) for b in tasks.distance_buckets(256)]
                         + [(128, b) for b in tasks.distance_buckets(128)])
def test_distance_buckets(T, bucket):
    for repeat in (False, True):
        keys = 16 if repeat else K
        b = tasks.mqar_batch(np.random.default_rng(2), 16, T, keys, V, distance_bucket=bucket,
                             repeat_distractors=repeat)
        d = b["query_pos"] - b["key_pos"]
        assert ((d >= bucket[0]) & (d < bucket[1])).all()
        _check_mqar(b, keys, V, repeat=repeat)


def test_mqar_deterministic():
    a = tasks.mqar_batch(np.random.default_rng((3, 7)), 4, 64, K, V)
    b = tasks.mqar_batch(np.random.default_rng((3, 7)), 4, 64, K, V)
    c = tasks.mqar_batch(np.random.default_rng((3, 8)), 4, 64, K, V)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["tokens"], c["tokens"])


def test_mqar_errors():
    with pytest.raises(ValueError, match="num_keys=16"):
        tasks.mqar_batch(np.random.default_rng(0), 2, 64, 16, V)  # 24 pairs > 16 keys
    with pytest.raises(ValueError, match="length=63"):
        tasks.mqar_batch(np.random.default_rng(0), 2, 63, K, V)
    with pytest.raises(ValueError, match="repeat_distractors needs num_keys=8"):
        tasks.mqar_batch(np.random.default_rng(0), 2, 64, 8, V, repeat_distractors=True)
    with pytest.raises(ValueError, match="distance_bucket"):
        tasks.mqar_batch(np.random.default_rng(0), 2, 64, K, V, distance_bucket=(128, 256))


def test_passkey():
    filler = 12 + np.random.default_rng(0).integers(0, 20, (3, 64))
    b = tasks.passkey_batch(np.random.default_rng(1), filler, 0.5)
    t = b["tokens"]
    start = int(np.nonzero(t[0] == 10)[0][0])
    digits = t[:, start + 1:start + 5]
    np.testing.assert_array_equal(t[:, -4:], digits)
    np.testing.assert_array_equal(b["targets"][:, 59:63], digits)
    assert b["mask"].sum() == 12
    with pytest.raises(ValueError, match="depth"):
        tasks.passkey_batch(np.random.default_rng(1), filler, 1.5)


def test_head_scores_hand_built():
    b = tasks.mqar_batch(np.random.default_rng(4), 2, 32, 16, 8, num_queries=4)
    B, T = b["tokens"].shape
    attn = np.zeros((2, B, 2, T, T))
    # layer 0 head 0: pure previous token; head 1: attend to self.
    for t in range(T):
        attn[0, :, 0, t, max(t - 1, 0)] = 1.0
        attn[0, :, 1, t, t] = 1.0
    # layer 1 head 0: at queries, all weight on the queried value; elsewhere on self.
    attn[1, :, 0] = np.eye(T)
    attn[1, :, 1] = np.eye(T)
    for r in range(B):
        for qp, kp in zip(b["query_pos"][r], b["key_pos"][r]):
            attn[1, r, 0, qp] = 0.0
            attn[1, r, 0, qp, kp + 1] = 1.0
    s = analysis.head_scores(attn, b)
    assert s["prev_token"][0, 0] == 1.0 and s["prev_token"][0, 1] == 0.0
    assert s["retrieval"][1, 0] == 1.0 and s["retrieval"][1, 1] == 0.0
    np.testing.assert_allclose(s["mean_distance"][0, 0], (T - 1) / T)
    assert s["mean_distance"][0, 1] == 0.0
    assert s["mean_distance"][1, 0] > 1.0


def test_spearman():
    assert analysis.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert analysis.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    x, y = [1, 2, 2, 3, 5], [2, 1, 4, 3, 9]
    rx, ry = [1, 2.5, 2.5, 4, 5], [2, 1, 4, 3, 5]
    assert analysis.spearman(x, y) == pytest.approx(np.corrcoef(rx, ry)[0, 1])
    with pytest.raises(ValueError, match="same size"):
        analysis.spearman([1, 2], [1, 2, 3])
