"""Tests of ``icml26_jax.fml.data``: the digits-like domain suite, augmentation, real-data path."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from icml26_jax.fml import data, domains

NAMES = tuple(domains.DOMAINS)
SMOKE = dict(n_clients=4, domain_counts=(1, 1, 1, 1), per_client=100, test_per_domain=100)
SMALL = dict(test_per_domain=20, val_per_domain=20)  # cheap held-out sets for fast tests


@pytest.fixture(scope="module")
def default():
    return data.make_digits_domains(0)


@pytest.fixture(scope="module")
def smoke():
    return data.make_digits_domains(0, **SMOKE)


def _leaves(fd):
    """Every array of a FedData, with a path, for exact comparison."""
    out = {f: getattr(fd, f) for f in ("x", "y", "mask", "n", "domain", "base_idx")}
    for split in ("test", "val"):
        for name, (x, y) in getattr(fd, split).items():
            out[f"{split}/{name}/x"], out[f"{split}/{name}/y"] = x, y
    return out


def test_fields_and_dtypes(default):
    n_max = 100
    assert default.x.shape == (10, n_max, 16, 16, 3) and default.x.dtype == np.float32
    assert default.y.shape == (10, n_max) and default.y.dtype == np.int32
    assert default.mask.dtype == bool and default.mask.all()
    assert default.n.dtype == np.int32 and (default.n == 100).all()
    assert default.domain.dtype == np.int32
    np.testing.assert_array_equal(default.domain, np.repeat(np.arange(4), (3, 2, 2, 3)))
    assert default.domain_names == NAMES
    for name in NAMES:
        x, y = default.test[name]
        assert x.shape == (497, 16, 16, 3) and x.dtype == np.float32 and y.dtype == np.int32
        assert default.val[name][0].shape == (300, 16, 16, 3)


def test_deterministic_per_seed(smoke):
    first = data.make_digits_domains(0, **{**SMOKE, "val_per_domain": 50})
    again = _leaves(data.make_digits_domains(0, **{**SMOKE, "val_per_domain": 50}))
    for k, v in _leaves(first).items():
        np.testing.assert_array_equal(v, again[k], err_msg=k)
    np.testing.assert_array_equal(first.val["thick_noisy"][0], smoke.val["thick_noisy"][0][:50])
    other = data.make_digits_domains(1, **SMOKE)
    assert not np.array_equal(smoke.base_idx, other.base_idx)
    assert not np.allclose(smoke.x, other.x)
    for name in NAMES:  # every domain's test set changes with the seed
        assert not np.allclose(smoke.test[name][0], other.test[name][0])


def test_train_and_test_base_images_disjoint(default):
    for seed in range(4):
        train, test = data.base_split(seed)
        assert len(train) == 1300 and len(test) == 497
        assert not set(train) & set(test)
        assert set(train) | set(test) == set(range(1797))
    assert not np.array_equal(data.base_split(0)[1], data.base_split(1)[1])
    fd = default
    train, test = data.base_split(0)
    _, labels = data.base_images()
    used = fd.base_idx[fd.mask]
    assert set(used) <= set(train)  # no client ever holds a test-pool image
    np.testing.assert_array_equal(fd.y[fd.mask], labels[used])
    for name in NAMES:
        np.testing.assert_array_equal(fd.test_idx[name], test)
        np.testing.assert_array_equal(fd.test[name][1], labels[test])
        # Validation = exactly the train-pool images no client holds.
        assert not set(fd.val_idx[name]) & set(used)
        assert set(fd.val_idx[name]) | set(used) == set(train)
    # The clean test set is the transform of the test-pool images themselves.
    images, _ = data.base_images()
    expect = data.normalise(domains.apply_domain("clean", images[test], None))
    np.testing.assert_array_equal(fd.test["clean"][0], expect)


def test_clients_disjoint_and_stratified(default):
    used = default.base_idx[default.mask]
    assert len(used) == 1000 and len(np.unique(used)) == 1000  # disjoint across all clients
    for i in range(10):
        np.testing.assert_array_equal(np.bincount(default.y[i], minlength=10), np.full(10, 10))
    # Client i of domain d is its domain's transform seeded with default_rng((seed, d, i)).
    images, _ = data.base_images()
    for i in (0, 3, 5, 9):
        d = int(default.domain[i])
        rng = np.random.default_rng((0, d, i))
        expect = data.normalise(domains.apply_domain(NAMES[d], images[default.base_idx[i]], rng))
        np.testing.assert_array_equal(default.x[i], expect)


@pytest.mark.parametrize("name", NAMES)
def test_transforms_keep_range_and_shape(name):
    images, _ = data.base_images()
    cases = list(images[:20]) + [np.zeros((16, 16)), np.ones((16, 16))]
    outs = []
    for k, img in enumerate(cases):
        out = domains.DOMAINS[name](img, np.random.default_rng(k))
        assert out.shape == (16, 16, 3) and out.dtype == np.float32
        assert out.min() >= 0.0 and out.max() <= 1.0
        outs.append(out)
    # Same image, same rng -> same output; the stochastic domains depend on the rng.
    again = domains.DOMAINS[name](images[0], np.random.default_rng(0))
    np.testing.assert_array_equal(outs[0], again)
    other = domains.DOMAINS[name](images[0], np.random.default_rng(123))
    assert np.array_equal(outs[0], other) == (name == "clean")


def test_colour_domains_follow_their_recipe():
    # With one seed, an all-background (0) and an all-stroke (1) image consume the same
    # random numbers, so they reveal the background and the foreground colour.
    inverted = 0
    for s in range(40):
        bg_img = domains.colour_texture(np.zeros((16, 16)), np.random.default_rng(s))
        fg_img = domains.colour_texture(np.ones((16, 16)), np.random.default_rng(s))
        ratio = bg_img.min((0, 1)) / bg_img.max((0, 1))  # [3]; texture spans [0, 1] -> 0.6
        if not np.allclose(ratio, 0.6, atol=1e-4):
            bg_img, fg_img, inverted = 1.0 - bg_img, 1.0 - fg_img, inverted + 1
            np.testing.assert_allclose(bg_img.min((0, 1)) / bg_img.max((0, 1)), 0.6, atol=1e-4)
        fg, bg = fg_img[0, 0], bg_img.max((0, 1))
        np.testing.assert_allclose(fg_img, np.broadcast_to(fg, fg_img.shape), atol=1e-6)
        assert abs(fg.mean() - bg.mean()) >= 0.3 - 1e-6
        assert bg_img.std((0, 1)).max() > 1e-3  # the background is textured
        # synthetic_affine: a solid background, stroke colour at the centre, contrast >= 0.4.
        sa_bg = domains.synthetic_affine(np.zeros((16, 16)), np.random.default_rng(s))
        sa_fg = domains.synthetic_affine(np.ones((16, 16)), np.random.default_rng(s))
        np.testing.assert_allclose(sa_bg, np.broadcast_to(sa_bg[0, 0], sa_bg.shape), atol=1e-6)
        assert abs(sa_fg[8, 8].mean() - sa_bg[0, 0].mean()) >= 0.4 - 1e-6
    assert 8 <= inverted <= 32  # polarity inverted with probability 0.5


def _domain_features(x):
    """Simple per-image statistics: [M, 9] (channel means, stds, colourfulness, log of the
    flattest 3x3 patch's std, vertical high-frequency energy)."""
    p = data.denormalise(x).astype(np.float64)  # [M, H, W, 3]
    colourful = np.abs(p - p.mean(-1, keepdims=True)).mean((1, 2, 3))[:, None]
    win = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(1, 2))  # [M,14,14,3,3,3]
    flattest = np.log(win.std((-1, -2)).sum(-1).reshape(len(p), -1).min(1) + 1e-4)[:, None]
    high = np.abs(np.diff(p, axis=1)).mean((1, 2, 3))[:, None]
    return np.concatenate([p.mean((1, 2)), p.std((1, 2)), colourful, flattest, high], 1)


def test_domains_differ():
    fd = data.make_digits_domains(2, n_clients=4, domain_counts=(1, 1, 1, 1),
                                  test_per_domain=240, val_per_domain=0)
    feats = [_domain_features(fd.test[name][0]) for name in NAMES]  # 4 x [240, 9]
    # Per-domain pixel statistics differ: the mean statistics of every pair of domains are
    # >= 1 pooled standard deviation apart.
    pooled = np.concatenate(feats).std(0)
    for a, b in itertools.combinations(range(4), 2):
        assert np.linalg.norm((feats[a].mean(0) - feats[b].mean(0)) / pooled) >= 1.0, (a, b)
    # A linear probe on the statistics recovers the domain of held-out images.
    x = np.concatenate(feats)
    y = np.repeat(np.arange(4), 240)
    perm = np.random.default_rng(0).permutation(len(y))
    train, held_out = perm[:480], perm[480:]
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    probe.fit(x[train], y[train])
    assert probe.score(x[held_out], y[held_out]) >= 0.9


def test_label_skew_pads_unequal_clients():
    fd = data.make_digits_domains(0, label_skew=0.5, **SMALL)
    assert fd.n.sum() == 1000 and len(set(fd.n.tolist())) > 1 and fd.n.min() >= 10
    n_max = int(fd.n.max())
    assert fd.x.shape == (10, n_max, 16, 16, 3)
    np.testing.assert_array_equal(fd.mask, np.arange(n_max)[None] < fd.n[:, None])
    np.testing.assert_array_equal(fd.mask.sum(1), fd.n)
    assert (fd.x[~fd.mask] == 0).all() and (fd.y[~fd.mask] == 0).all()
    assert (fd.base_idx[~fd.mask] == -1).all()
    used = fd.base_idx[fd.mask]
    assert len(np.unique(used)) == 1000 and set(used) <= set(data.base_split(0)[0])
    counts = np.stack([np.bincount(fd.y[i, :fd.n[i]], minlength=10) for i in range(10)])
    assert (counts == 0).any()  # labels are skewed: some clients miss some classes
    np.testing.assert_array_equal(counts.sum(0), np.full(10, 100))


def test_rand_assign():
    fd = data.make_digits_domains(0, rand_assign=True, per_client=10, **SMALL)
    again = data.make_digits_domains(0, rand_assign=True, per_client=10, **SMALL)
    np.testing.assert_array_equal(fd.domain, again.domain)
    assert fd.domain.min() >= 0 and fd.domain.max() < 4
    assert not np.array_equal(fd.domain, np.repeat(np.arange(4), (3, 2, 2, 3)))


def _windows(padded, h, w):
    """All [H, W] windows of a padded image: {(row, col): window}."""
    ph, pw = padded.shape[:2]
    return {(r, c): padded[r:r + h, c:c + w] for r in range(ph - h + 1) for c in range(pw - w + 1)}


def test_augment_is_a_random_crop_of_the_padded_image(smoke):
    x = jnp.asarray(smoke.x[:2, :6])  # [2, 6, 16, 16, 3]
    key = jax.random.key(0)
    augment = jax.jit(data.augment)
    out = augment(x, key)
    assert out.shape == x.shape and out.dtype == x.dtype
    np.testing.assert_array_equal(out, augment(x, jax.random.key(0)))  # same key, same crops
    assert not np.array_equal(out, augment(x, jax.random.key(1)))
    black = data.normalise(np.zeros(3, np.float32))
    offsets = set()
    for img, crop in zip(np.asarray(x).reshape(-1, 16, 16, 3), np.asarray(out).reshape(
            -1, 16, 16, 3)):
        padded = np.broadcast_to(black, (20, 20, 3)).copy()
        padded[2:18, 2:18] = img
        hits = [o for o, win in _windows(padded, 16, 16).items() if np.array_equal(win, crop)]
        assert hits, "the output is not a 16 x 16 window of the 2-px padded image"
        offsets.add(hits[0])
    assert len(offsets) > 3  # offsets are drawn per image
    # Under vmap over clients, a client's crops depend only on its own images and key.
    keys = jax.random.split(key, 2)
    per_client = jax.jit(jax.vmap(data.augment))
    per, swapped = per_client(x, keys), per_client(x[::-1], keys[::-1])
    np.testing.assert_array_equal(per[0], swapped[1])
    np.testing.assert_array_equal(per[1], swapped[0])


def test_normalise_round_trip():
    p = np.random.default_rng(0).uniform(size=(4, 16, 16, 3)).astype(np.float32)
    np.testing.assert_allclose(data.denormalise(data.normalise(p)), p, atol=1e-6)
    np.testing.assert_allclose(data.normalise(jnp.asarray(p)), data.normalise(p), atol=1e-6)


@pytest.mark.parametrize("kwargs, arg", [
    (dict(domains=("clean", "mnist")), "domains"),
    (dict(n_clients=3), "n_clients"),
    (dict(n_clients=3, domain_counts=(1, 1, 1, 0)), "n_clients"),
    (dict(domain_counts=(3, 3, 2, 3)), "domain_counts"),
    (dict(per_client=95), "per_client"),
    (dict(per_client=140), "per_client"),  # 10 x 140 > the 1,300 train-pool images
    (dict(n_clients=4, domain_counts=(1, 1, 1, 1), per_client=320), "per_client"),  # class pool
    (dict(label_skew=0.0), "label_skew"),
    (dict(test_per_domain=498), "test_per_domain"),
    (dict(val_per_domain=-1), "val_per_domain"),
    (dict(seed=-1), "seed"),
])
def test_value_errors_name_the_argument(kwargs, arg):
    kwargs = {"seed": 0, **kwargs}
    with pytest.raises(ValueError, match=arg):
        data.make_digits_domains(**kwargs)


def test_augment_and_apply_domain_errors():
    with pytest.raises(ValueError, match="x"):
        data.augment(jnp.zeros((4, 16, 16)), jax.random.key(0))
    with pytest.raises(ValueError, match="domain"):
        domains.apply_domain("svhn", np.zeros((1, 16, 16)), np.random.default_rng(0))


def _write_npz(path, n, shape, seed):
    """Constant-colour images, pixel value = (index * 7) % 256, labels index % 10."""
    value = (np.arange(n) * 7 % 256).astype(np.uint8)
    x = np.broadcast_to(value.reshape((n,) + (1,) * len(shape)), (n,) + shape).copy()
    y = (np.arange(n) + seed) % 10
    np.savez(path, x=x, y=y)
    return value.astype(np.float32) / 255.0, y


def test_load_domains_npz_branch(tmp_path):
    usps_v, usps_y = _write_npz(tmp_path / "usps_train.npz", 300, (16, 16, 3), 0)
    _write_npz(tmp_path / "usps_test.npz", 50, (16, 16, 3), 1)
    syn_v, syn_y = _write_npz(tmp_path / "syn_train.npz", 200, (28, 28), 2)  # grey
    _write_npz(tmp_path / "syn_test.npz", 40, (28, 28), 3)
    fd = data.load_domains({"usps": 2, "syn": 1}, tmp_path, seed=0, percent=0.05,
                           test_limit=30, val_limit=None)
    assert fd.domain_names == ("usps", "syn")
    assert fd.x.shape == (3, 15, 32, 32, 3) and fd.x.dtype == np.float32
    np.testing.assert_array_equal(fd.n, [15, 15, 10])
    np.testing.assert_array_equal(fd.domain, [0, 0, 1])
    np.testing.assert_array_equal(fd.mask.sum(1), fd.n)
    assert not set(fd.base_idx[0]) & set(fd.base_idx[1])  # clients of a domain are disjoint
    for i, (value, labels) in enumerate([(usps_v, usps_y)] * 2 + [(syn_v, syn_y)]):
        rows = fd.base_idx[i, :fd.n[i]]
        np.testing.assert_array_equal(fd.y[i, :fd.n[i]], labels[rows])
        pix = data.denormalise(fd.x[i, :fd.n[i]])  # constant images stay constant
        np.testing.assert_allclose(pix, np.broadcast_to(value[rows, None, None, None], pix.shape),
                                   atol=1e-5)
    assert fd.test["usps"][0].shape == (30, 32, 32, 3) and fd.test["syn"][1].shape == (30,)
    assert len(fd.val["usps"][1]) == 300 - 30 and len(fd.val["syn"][1]) == 200 - 10
    assert not set(fd.val_idx["usps"]) & set(fd.base_idx[:2].ravel())
    with pytest.raises(FileNotFoundError, match="office_amazon_train.npz"):
        data.load_domains(["office_amazon"], tmp_path)
    with pytest.raises(ValueError, match="percent"):
        data.load_domains({"usps": 1}, tmp_path, percent=0.0)
    with pytest.raises(ValueError, match="percent"):
        data.load_domains({"usps": 30}, tmp_path, percent=0.05)


def test_load_domains_tfds_branch_reads_through_core_data(monkeypatch, tmp_path):
    # core.data.data_source is replaced by in-memory records: nothing is read or downloaded.
    from icml26_jax.core import data as core_data

    calls = []

    def fake_source(name, split, *, data_dir):
        calls.append((name, split, str(data_dir)))
        n, shape = (400, (28, 28, 1)) if name == "mnist" else (300, (32, 32, 3))
        return [{"image": np.full(shape, k % 256, np.uint8), "label": k % 10} for k in range(n)]

    monkeypatch.setattr(core_data, "data_source", fake_source)
    fd = data.load_domains(["mnist", "svhn"], tmp_path, test_limit=5, val_limit=7)
    assert {c[0] for c in calls} == {"mnist", "svhn_cropped"}
    assert {c[1] for c in calls} == {"train", "test"} and {c[2] for c in calls} == {str(tmp_path)}
    np.testing.assert_array_equal(fd.n, [4, 3])  # 1 % of 400 and of 300
    assert fd.x.shape == (2, 4, 32, 32, 3) and fd.y.dtype == np.int32
    rows = fd.base_idx[0, :4]
    np.testing.assert_array_equal(fd.y[0, :4], rows % 10)
    np.testing.assert_allclose(data.denormalise(fd.x[0, :4])[:, 5, 5, 0], rows % 256 / 255.0,
                               atol=1e-5)
    assert fd.test["svhn"][0].shape == (5, 32, 32, 3) and len(fd.val["mnist"][1]) == 7
