"""FPDA spec §Tests 1 and 3: the fixed forensic filters against SciPy, and the fixed prompt
bank."""

import numpy as np
import pytest
import scipy.fft
import scipy.ndimage

from icml26_jax.fpda import filters, prompts


def _images(n=2, s=32, seed=0):
    return np.random.default_rng(seed).random((n, s, s, 3)).astype(np.float32)


def test_srm_residual_equals_scipy_convolve():
    x = _images()
    got = np.asarray(filters.srm_residual(x))
    grey = x @ np.asarray(filters.LUMA, np.float32)
    for b in range(x.shape[0]):
        for c in range(3):
            ref = scipy.ndimage.convolve(grey[b].astype(np.float64),
                                         filters.SRM_KERNELS[c].astype(np.float64), mode="reflect")
            np.testing.assert_allclose(got[b, ..., c], ref, atol=2e-5)


def test_srm_is_a_true_convolution_with_an_asymmetric_kernel(monkeypatch):
    # The SRM kernels are point-symmetric, where correlation = convolution; an asymmetric
    # kernel catches a missing flip.
    k = np.zeros((3, 5, 5), np.float32)
    k[:, 0, 1] = 1.0
    monkeypatch.setattr(filters, "SRM_KERNELS", k)
    x = _images(1, 16, 3)
    grey = x[0] @ np.asarray(filters.LUMA, np.float32)
    ref = scipy.ndimage.convolve(grey, k[0], mode="reflect")
    np.testing.assert_allclose(np.asarray(filters.srm_residual(x))[0, ..., 0], ref, atol=1e-6)


def test_srm_kills_smooth_content():
    # Linear ramps are annihilated by every kernel (each has zero sum and zero first moments).
    yy, xx = np.mgrid[:16, :16].astype(np.float32)
    ramp = np.repeat(((0.02 * yy + 0.03 * xx) / 2)[None, ..., None], 3, axis=-1)
    r = np.asarray(filters.srm_residual(ramp))[0, 2:-2, 2:-2]
    np.testing.assert_allclose(r, 0.0, atol=1e-5)


def test_block_dct_energy_equals_scipy_dctn():
    x = _images(2, 32, 1)
    got = np.asarray(filters.block_dct_energy(x))
    assert got.shape == (2, 4, 4)
    grey = (x @ np.asarray(filters.LUMA, np.float32)).astype(np.float64) * 255.0
    u = np.arange(8)
    band = (u[:, None] + u[None, :]) >= 4
    for b in range(2):
        for i in range(4):
            for j in range(4):
                c = scipy.fft.dctn(grey[b, 8 * i:8 * i + 8, 8 * j:8 * j + 8], norm="ortho")
                np.testing.assert_allclose(got[b, i, j], np.log1p((c[band] ** 2).sum()),
                                           rtol=2e-5)


def test_filters_reject_bad_shapes():
    with pytest.raises(ValueError, match=r"\[B, H, W, 3\]"):
        filters.srm_residual(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ValueError, match="divisible by 8"):
        filters.block_dct_energy(np.zeros((1, 12, 16, 3), np.float32))


def test_prompt_bank_is_fixed():
    assert len(prompts.PROMPT_BANK) == prompts.NUM_PROMPTS == 12
    assert prompts.GROUPS == ("noise", "compression", "geometry", "blending")
    counts = np.bincount(prompts.PROMPT_GROUP[prompts.PROMPT_GROUP >= 0], minlength=4)
    np.testing.assert_array_equal(counts, [2, 2, 2, 4])
    assert prompts.AUTHENTIC_IDS == (10, 11)
    assert [prompts.PROMPT_BANK[i].polarity for i in prompts.AUTHENTIC_IDS] == ["authentic"] * 2
    assert len({p.text for p in prompts.PROMPT_BANK}) == 12
    for p in prompts.PROMPT_BANK:  # the closed grammar, no unknown words
        assert p.text.split()[-6:] == ["in", p.domain, "domain", "at", p.scale, "scale"]
        assert prompts.UNK not in prompts.tokenize(p.text)
    # Golden token ids: changing the vocabulary or a prompt changes these.
    np.testing.assert_array_equal(prompts.tokenize(prompts.PROMPT_BANK[0].text),
                                  [2, 8, 9, 10, 4, 8, 5, 6, 39, 7, 0, 0])
    np.testing.assert_array_equal(prompts.tokenize(prompts.PROMPT_BANK[4].text),
                                  [2, 19, 20, 21, 22, 4, 38, 5, 6, 40, 7, 0])
    np.testing.assert_array_equal(prompts.tokenize(prompts.PROMPT_BANK[11].text),
                                  [3, 35, 36, 4, 37, 5, 6, 35, 7, 0, 0, 0])
    np.testing.assert_array_equal(prompts.tokenize("The LEFT region looks spliced."),
                                  [46, 50, 40, 47, 53, 0, 0, 0, 0, 0, 0, 0])
    assert prompts.tokenize("zebra")[0] == prompts.UNK
    assert prompts.bank_tokens().shape == (12, prompts.MAX_TOKENS)


def test_routes_and_prompt_masks():
    r = prompts.ROUTES
    assert r.shape == (15, 4) and r.sum(1).min() == 1
    assert len({tuple(x) for x in r}) == 15
    assert r[prompts.ALL_ROUTE].tolist() == [1, 1, 1, 1]
    m = prompts.prompt_mask(r)
    assert m.shape == (15, 12)
    assert (m[:, list(prompts.AUTHENTIC_IDS)] == 1).all()  # never routed
    for i in range(15):
        for k in prompts.FORGED_IDS:
            assert m[i, k] == r[i, prompts.PROMPT_GROUP[k]]


def test_describe_rejects_unknown_words():
    assert prompts.describe("top", "copied") == "the top region looks copied"
    with pytest.raises(ValueError, match="location must be one of"):
        prompts.describe("middle", "copied")
    with pytest.raises(ValueError, match="kind must be one of"):
        prompts.describe("top", "photoshopped")
