"""HashEmbedder (spec §Tests): unit norm, identical vectors across processes, synonymy after
fitting, determinism."""

import subprocess
import sys

import numpy as np
import pytest

from icml26_jax.core.testing import REPO_ROOT
from icml26_jax.mragent.embed import DIM, HashEmbedder

PLACES = ["Porto", "Lisbon", "Madrid", "Oslo", "Berlin", "Paris"]
PEOPLE = ["Jordan", "Caroline", "Sam", "Priya", "Omar", "Lena"]


def _corpus():
    out = []
    for i, (p, c) in enumerate(zip(PEOPLE, PLACES)):
        out += [f"{p} moved to {c} last year.", f"{p} lives in {c} now.",
                f"{p} bought a bike for the trip.", f"{p} bought a new car."]
        out.append(f"My friend {PEOPLE[(i + 1) % 6]} lives in {c} and moved to {c} in May.")
    return out


@pytest.fixture(scope="module")
def fitted():
    emb = HashEmbedder()
    return emb, emb.fit(_corpus())


def test_unit_norm_shape_and_determinism(fitted):
    emb, st = fitted
    v = emb.encode(st, ["Jordan moved to Porto.", "hello", ""])
    assert v.shape == (3, DIM) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v[:2], axis=1), 1.0, rtol=1e-6)
    assert np.all(v[2] == 0)  # an empty text has no features
    st2 = HashEmbedder().fit(_corpus())
    np.testing.assert_array_equal(emb.encode(st2, ["Jordan moved to Porto."]), v[:1])


def test_synonymy_after_fitting(fitted):
    emb, st = fitted
    a, b, c = emb.encode(st, ["moved to Porto", "lives in Porto", "bought a bike"])
    assert a @ b > a @ c
    # Fitting changes the vectors (idf and the LSA half), and only fitting does.
    other = HashEmbedder().fit(["a completely different text about gardening"])
    assert not np.allclose(emb.encode(other, ["moved to Porto"]), a)


def test_identical_across_processes(fitted):
    emb, st = fitted
    code = ("import numpy as np, sys; sys.path.insert(0, %r); "
            "from icml26_jax.mragent.embed import HashEmbedder; "
            "from tests.mragent.test_embed import _corpus; e = HashEmbedder(); "
            "s = e.fit(_corpus()); v = e.encode(s, ['Jordan moved to Porto.']); "
            "sys.stdout.write(v.tobytes().hex())" % REPO_ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO_ROOT, env={"PYTHONHASHSEED": "123",
                                                         "PATH": "/usr/bin:/bin",
                                                         "JAX_PLATFORMS": "cpu"},
                         timeout=120).stdout
    here = emb.encode(st, ["Jordan moved to Porto."])
    assert out == here.tobytes().hex()


def test_fit_needs_texts():
    with pytest.raises(ValueError, match="at least one text"):
        HashEmbedder().fit([])
