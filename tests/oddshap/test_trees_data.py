"""The DFS Walsh spectrum of scikit-learn trees (``trees``) and the experiment's games
(``data``): spectra reproduce ``predict`` exactly, exact Shapley values equal a brute-force
enumeration of the definition, efficiency, planted odd sets, determinism, caching, errors.

Tolerances: spectra and Shapley values are sums of O(100) float64 terms of size O(1), so
exact agreement means ~1e-13; 1e-10 leaves room without admitting any real error.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor,
                              RandomForestRegressor)
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from icml26_jax.oddshap import data, fourier, games, trees

TOL = 1e-10


# ----------------------------------------------------------------------------- helpers

def brute_force_shapley(table: np.ndarray) -> np.ndarray:
    """``phi [n]`` by the definition: ``sum_{S not ni i} |S|! (n-|S|-1)! / n! (v(S+i) - v(S))``
    over a value table indexed by ``sum_i z_i 2^i``."""
    size = table.shape[0]
    n = size.bit_length() - 1
    idx = np.arange(size)
    card = np.array([bin(s).count("1") for s in range(size)])
    weight = np.array([math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n)
                       if k < n else 0.0 for k in range(n + 1)])
    phi = np.zeros(n)
    for i in range(n):
        without = idx[(idx >> i) & 1 == 0]
        phi[i] = np.sum(weight[card[without]] * (table[without | (1 << i)] - table[without]))
    return phi


def walsh_shapley(masks: np.ndarray, coefs: np.ndarray, n: int) -> np.ndarray:
    """Eq. W2 in plain numpy: ``phi_i = -2 sum_{T ni i, |T| odd} c_T / |T|``."""
    members = np.asarray(fourier.unpack(jnp.asarray(masks), n))
    size = members.sum(1)
    w = np.where(size % 2 == 1, -2.0 * coefs / np.maximum(size, 1), 0.0)
    return w @ members


def sets_of(masks: np.ndarray, n: int) -> set:
    members = np.asarray(fourier.unpack(jnp.asarray(masks), n))
    return {frozenset(np.flatnonzero(row).tolist()) for row in members if row.any()}


def all_coalitions(n: int) -> np.ndarray:
    return fourier.index_bits(n)  # bool [2^n, n]


# ----------------------------------------------------------------------------- trees: proxy

def _binary_data(n=8, seed=0):
    rng = np.random.default_rng(seed)
    z = all_coalitions(n)
    y = (1.5 * z[:, 0] - 2.0 * z[:, 1] * z[:, 2] + 3.0 * z[:, 3] * z[:, 4] * z[:, 5]
         - z[:, 2] * z[:, 6] * z[:, 7] + 0.3 * rng.standard_normal(len(z)))
    return z, y


@pytest.mark.parametrize("make", [
    lambda: DecisionTreeRegressor(random_state=0),
    lambda: GradientBoostingRegressor(n_estimators=30, max_depth=4, random_state=0),
    lambda: RandomForestRegressor(n_estimators=5, max_depth=6, random_state=0),
], ids=["tree", "gbr", "forest"])
def test_proxy_spectrum_reproduces_predict(make):
    n = 8
    z, y = _binary_data(n)
    model = make().fit(z.astype(np.float64), y)
    masks, coefs = trees.sklearn_tree_spectrum(model, n)
    assert masks.dtype == np.uint32 and masks.shape == (len(coefs), 1)
    assert coefs.dtype == np.float64 and np.all(coefs != 0.0)
    keys = [int(m[0]) for m in masks]
    assert keys == sorted(set(keys)), "sets merged and sorted"
    # the spectrum (evaluated with fourier.parity, the package's convention) = predict on
    # every coalition
    chi = np.asarray(fourier.parity(fourier.pack(jnp.asarray(fourier.index_bits(n))), jnp.asarray(masks)))
    values = chi.astype(np.float64) @ coefs
    np.testing.assert_allclose(values, model.predict(z.astype(np.float64)), rtol=0, atol=TOL)
    np.testing.assert_allclose(trees.spectrum_values(masks, coefs, z), values, rtol=0, atol=TOL)
    # and its FWHT spectrum (dense) is the same set function
    dense = np.zeros(1 << n)
    dense[np.asarray(keys)] = coefs
    spec = np.asarray(fourier.spectrum(jnp.asarray(model.predict(z.astype(np.float64)))))
    np.testing.assert_allclose(spec, dense, rtol=0, atol=TOL)


def test_proxy_sign_convention_stump():
    """``y = 1`` if player 0 absent, ``3`` if present: ``nu = 2 - chi_{0}`` (absent = +1)."""
    z = all_coalitions(3).astype(np.float64)
    y = np.where(z[:, 0] > 0, 3.0, 1.0)
    model = DecisionTreeRegressor(max_depth=1).fit(z, y)
    masks, coefs = trees.sklearn_tree_spectrum(model, 3)
    np.testing.assert_array_equal(masks, np.array([[0], [1]], np.uint32))
    np.testing.assert_allclose(coefs, [2.0, -1.0], rtol=0, atol=TOL)


def test_binary_gradient_boosting_classifier_decision_function():
    n = 8
    z, y = _binary_data(n)
    model = GradientBoostingClassifier(n_estimators=20, max_depth=3, random_state=0)
    model.fit(z.astype(np.float64), y > np.median(y))
    masks, coefs = trees.sklearn_tree_spectrum(model, n)
    np.testing.assert_allclose(trees.spectrum_values(masks, coefs, z),
                               model.decision_function(z.astype(np.float64)), rtol=0, atol=TOL)


# ----------------------------------------------------------------------------- trees: games

def _continuous_gbr(n, seed=0, rows=1500, depth=4, estimators=60):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, n))
    y = (x[:, 0] * x[:, 1] - x[:, 2] * x[:, n - 1] * x[:, n // 2] + np.sin(2 * x[:, 3])
         + 0.5 * x[:, n - 3] + 0.1 * rng.standard_normal(rows))
    model = GradientBoostingRegressor(n_estimators=estimators, max_depth=depth,
                                      random_state=seed).fit(x, y)
    return model, x


def test_tree_game_spectrum_all_coalitions_n8():
    n = 8
    model, x = _continuous_gbr(n)
    xbar = x.mean(0)
    z = all_coalitions(n)
    for row in (0, 7):
        masks, coefs = trees.sklearn_tree_spectrum(model, n, x[row], xbar)
        want = model.predict(np.where(z, x[row], xbar))
        np.testing.assert_allclose(trees.spectrum_values(masks, coefs, z), want, rtol=0,
                                   atol=TOL)
        # Shapley values of the tree game: Walsh formula on the DFS spectrum = definition
        np.testing.assert_allclose(walsh_shapley(masks, coefs, n), brute_force_shapley(want),
                                   rtol=0, atol=TOL)


def test_tree_game_spectrum_multiword_n40():
    n = 40
    model, x = _continuous_gbr(n, seed=1, depth=5)
    xbar = x.mean(0)
    masks, coefs = trees.sklearn_tree_spectrum(model, n, x[3], xbar)
    assert masks.shape[1] == 2
    assert np.any(masks[:, 1] != 0), "players >= 32 appear (second word)"
    assert np.any(np.asarray(fourier.popcount(jnp.asarray(masks))) >= 3)
    z = np.random.default_rng(0).random((512, n)) < 0.5
    z[0], z[1] = False, True
    want = model.predict(np.where(z, x[3], xbar))
    np.testing.assert_allclose(trees.spectrum_values(masks, coefs, z), want, rtol=0, atol=TOL)
    # the package's sparse Fourier game agrees (jnp parity on packed multi-word masks)
    game = games.sparse_fourier_game(masks, coefs, n)
    np.testing.assert_allclose(np.asarray(game(jnp.asarray(z))), want, rtol=0, atol=TOL)


def test_feature_split_twice_on_a_path():
    """``y = 1[|x_0| < 0.5]``: the tree splits x_0 at -0.5 and at 0.5 on one path."""
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.uniform(-2, 2, 400), rng.standard_normal(400)])
    y = (np.abs(x[:, 0]) < 0.5).astype(np.float64)
    model = DecisionTreeRegressor(random_state=0).fit(x, y)
    t = model.tree_
    assert np.sum(t.feature == 0) >= 2 and np.all(t.feature[t.children_left >= 0] == 0)
    # x_0 = -1 (outside, left), xbar_0 = 1 (outside, right): the first split separates them,
    # the second (on the absent branch) is determined by it: the game is identically 0
    masks, coefs = trees.sklearn_tree_spectrum(model, 2, np.array([-1.0, 0.0]),
                                               np.array([1.0, 0.0]))
    assert masks.shape == (0, 1) and coefs.shape == (0,)
    # x_0 = 0 (inside), xbar_0 = 1 (outside): nu = z_0 = 1/2 - chi_{0} / 2
    masks, coefs = trees.sklearn_tree_spectrum(model, 2, np.array([0.0, 0.0]),
                                               np.array([1.0, 0.0]))
    np.testing.assert_array_equal(masks, np.array([[0], [1]], np.uint32))
    np.testing.assert_allclose(coefs, [0.5, -0.5], rtol=0, atol=TOL)
    # and against predict for many explicand/baseline pairs, deep tree on both features
    deep = DecisionTreeRegressor(random_state=0).fit(x, y + 0.2 * x[:, 1])
    z = all_coalitions(2)
    for a, b in rng.uniform(-2, 2, (20, 2, 2)):
        masks, coefs = trees.sklearn_tree_spectrum(deep, 2, a, b)
        np.testing.assert_allclose(trees.spectrum_values(masks, coefs, z),
                                   deep.predict(np.where(z, a, b)), rtol=0, atol=TOL)


def test_tree_errors():
    z, y = _binary_data(8)
    z, y = z[:16, :4].astype(np.float64), y[:16]  # the 16 coalitions of players 0..3
    model = DecisionTreeRegressor(max_depth=2).fit(z, y)
    with pytest.raises(ValueError, match="x and xbar"):
        trees.sklearn_tree_spectrum(model, 4, x=np.zeros(4))
    with pytest.raises(ValueError, match="n must equal"):
        trees.sklearn_tree_spectrum(model, 5)
    with pytest.raises(ValueError, match=r"x and xbar must be \[n=4\]"):
        trees.sklearn_tree_spectrum(model, 4, np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="model"):
        trees.sklearn_tree_spectrum(DecisionTreeClassifier().fit(z, y > 0), 4)
    with pytest.raises(ValueError, match="not fitted"):
        trees.sklearn_tree_spectrum(GradientBoostingRegressor(), 4)
    with pytest.raises(ValueError, match="unsupported"):
        trees.sklearn_tree_spectrum(object(), 4)


# ----------------------------------------------------------------------------- data: games

def _check_common(gs: data.GameSet, e_count: int):
    n, w = gs.n, fourier.num_words(gs.n)
    assert gs.phi.shape == (e_count, n) and gs.phi.dtype == np.float64
    assert gs.empty.shape == gs.grand.shape == (e_count,)
    assert gs.planted_odd.dtype == np.uint32 and gs.planted_odd.shape[::2] == (e_count, w)
    # efficiency
    np.testing.assert_allclose(gs.phi.sum(1), gs.grand - gs.empty, rtol=0, atol=TOL)
    # the batched game: vmap over the explicand axis = games.at; empty and grand agree
    z = np.random.default_rng(1).random((64, n)) < 0.5
    z[0], z[1] = False, True
    batched = np.asarray(jax.jit(jax.vmap(lambda g: g(jnp.asarray(z))))(gs.game))
    evaluate = jax.jit(lambda g: g(jnp.asarray(z)))
    for e in range(e_count):
        one = np.asarray(evaluate(games.at(gs.game, e)))
        np.testing.assert_allclose(batched[e], one, rtol=0, atol=TOL)
        np.testing.assert_allclose(one[:2], [gs.empty[e], gs.grand[e]], rtol=0, atol=TOL)
    return z, batched


def test_mlp_diabetes_exact_phi_brute_force_and_determinism(tmp_path, monkeypatch):
    kw = dict(seed=0, explicands=2, train_steps=20)
    gs = data.load_game_set("mlp_diabetes", **kw)
    assert gs.n == 10 and gs.table.shape == (2, 1024)
    _check_common(gs, 2)
    z = all_coalitions(10)
    for e in range(2):
        values = np.asarray(games.at(gs.game, e)(jnp.asarray(z)))
        np.testing.assert_array_equal(values, gs.table[e])
        np.testing.assert_allclose(gs.phi[e], brute_force_shapley(values), rtol=0, atol=TOL)
    # the table is the model under baseline imputation at the explicand
    fitted = data.fit_model("mlp_diabetes", **kw)
    np.testing.assert_allclose(fitted.xbar, fitted.data.mean(0), rtol=0, atol=0)
    for e, row in enumerate(fitted.rows):
        want = np.asarray(fitted.predict(np.where(z, fitted.data[row], fitted.xbar)))[:, 0]
        np.testing.assert_allclose(gs.table[e], want, rtol=0, atol=TOL)
    # determinism (fit_model above retrained), and the cache: written once, then read
    again = data.load_game_set("mlp_diabetes", cache_dir=tmp_path, **kw)
    assert len(list(tmp_path.glob("*.npz"))) == 1
    monkeypatch.setattr(data, "train_mlp", lambda *a, **k: pytest.fail("cache not used"))
    cached = data.load_game_set("mlp_diabetes", cache_dir=tmp_path, **kw)
    for other in (again, cached):
        np.testing.assert_array_equal(other.table, gs.table)
        np.testing.assert_array_equal(other.phi, gs.phi)
        np.testing.assert_array_equal(other.empty, gs.empty)
        jax.tree.map(np.testing.assert_array_equal, other.game.params, gs.game.params)


@pytest.mark.parametrize("name", ["mlp_wine", "mlp_synth14", "digits16"])
def test_mlp_games_table_is_the_model(name):
    """Smoke-trained (5 steps) MLP games: the table is the model under baseline imputation
    (2x2 superpixels for digits16), classifiers explain their predicted logit, and the exact
    phi is the definition enumerated over all subsets (n = 13, 14, 16)."""
    gs = data.load_game_set(name, explicands=1, train_steps=5)
    assert gs.table.shape == (1, 1 << gs.n)
    _check_common(gs, 1)
    fitted = data.fit_model(name, explicands=1, train_steps=5)
    x = fitted.data[fitted.rows[0]]
    out = np.asarray(fitted.predict(x[None]))[0]
    if name == "mlp_synth14":
        assert out.shape == (1,) and fitted.target[0] == 0
    else:  # classifiers: the logit of the class predicted at the explicand
        assert fitted.target[0] == np.argmax(out)
    np.testing.assert_allclose(gs.grand[0], out[fitted.target[0]], rtol=0, atol=TOL)
    z = np.random.default_rng(2).random((32, gs.n)) < 0.5
    if name == "digits16":  # players are 2x2 superpixels: expand to the 64 pixels
        groups = data.superpixel_groups()
        assert np.all(np.bincount(groups) == 4)
        np.testing.assert_array_equal(groups[[0, 1, 8, 9, 6, 7, 14, 15, 21, 63]],
                                      [0, 0, 0, 0, 3, 3, 3, 3, 6, 15])
        inputs = np.where(z[:, groups], x, fitted.xbar)
    else:
        inputs = np.where(z, x, fitted.xbar)
    want = np.asarray(fitted.predict(inputs))[:, fitted.target[0]]
    index = (z * (1 << np.arange(gs.n))).sum(1)
    np.testing.assert_allclose(gs.table[0, index], want, rtol=0, atol=TOL)
    np.testing.assert_allclose(gs.phi[0], brute_force_shapley(gs.table[0]), rtol=0, atol=TOL)


def test_gbt_synth16_table_is_the_tree_game():
    gs = data.load_game_set("gbt_synth16", explicands=2)
    _check_common(gs, 2)
    fitted = data.fit_model("gbt_synth16", explicands=2)
    assert isinstance(fitted.sk_model, GradientBoostingRegressor)
    assert fitted.sk_model.n_estimators == 100 and fitted.sk_model.max_depth == 4
    z = all_coalitions(16)
    for e, row in enumerate(fitted.rows):
        # every coalition (a superset of "random coalitions"): table = sklearn predict
        want = fitted.sk_model.predict(np.where(z, fitted.data[row], fitted.xbar))
        np.testing.assert_allclose(gs.table[e], want, rtol=0, atol=TOL)
        masks, coefs = trees.sklearn_tree_spectrum(fitted.sk_model, 16, fitted.data[row],
                                                   fitted.xbar)
        np.testing.assert_allclose(gs.phi[e], walsh_shapley(masks, coefs, 16), rtol=0, atol=TOL)
        np.testing.assert_allclose(gs.phi[e], brute_force_shapley(gs.table[e]), rtol=0,
                                   atol=TOL)
        assert np.any(np.asarray(fourier.popcount(jnp.asarray(masks))) >= 3)


def test_tree_cancer30_sparse_fourier_game():
    gs = data.load_game_set("tree_cancer30", explicands=2)
    assert gs.table is None and gs.n == 30
    z, batched = _check_common(gs, 2)
    fitted = data.fit_model("tree_cancer30", explicands=2)
    masks, coefs = gs.game.params["masks"], gs.game.params["coefs"]
    assert masks.shape[:2] == coefs.shape and masks.shape[2] == 1
    for e, row in enumerate(fitted.rows):
        want = fitted.sk_model.predict(np.where(z, fitted.data[row], fitted.xbar))
        np.testing.assert_allclose(batched[e], want, rtol=0, atol=TOL)
        np.testing.assert_allclose(gs.phi[e], walsh_shapley(np.asarray(masks[e]),
                                                            np.asarray(coefs[e]), 30),
                                   rtol=0, atol=TOL)
        pad = np.asarray(coefs[e]) == 0.0  # padding rows: zero coefficient and zero mask
        assert np.all(np.asarray(masks[e])[pad] == 0)


def test_tree_game_shapley_brute_force_on_few_active_players():
    """n = 30 tree game whose explicand differs from the baseline in 8 features only: the
    other players are null, and the 8 active ones are enumerated by the definition."""
    fitted = data.fit_model("tree_cancer30", explicands=1)
    xbar = fitted.xbar
    x = xbar.copy()
    active = np.argsort(-fitted.sk_model.feature_importances_)[:8]
    x[active] = fitted.data[fitted.rows[0], active]
    masks, coefs = trees.sklearn_tree_spectrum(fitted.sk_model, 30, x, xbar)
    phi = walsh_shapley(masks, coefs, 30)
    sub = all_coalitions(8)
    z = np.zeros((len(sub), 30), bool)
    z[:, active] = sub
    values = fitted.sk_model.predict(np.where(z, x, xbar))
    np.testing.assert_allclose(phi[active], brute_force_shapley(values), rtol=0, atol=TOL)
    np.testing.assert_array_equal(np.delete(phi, active), 0.0)


@pytest.mark.parametrize("name", ["soum30", "soum100"])
def test_soum_games_and_planted_odd_sets(name):
    gs = data.load_game_set(name, seed=3, explicands=2)
    n = gs.n
    assert gs.table is None
    z, batched = _check_common(gs, 2)
    members = np.asarray(fourier.unpack(gs.game.params["masks"], n))  # [E, K, n]
    coefs = np.asarray(gs.game.params["coefs"])
    assert members.shape[:2] == (2, n // 3)
    for e in range(2):
        sizes = members[e].sum(1)
        assert set(sizes.tolist()) <= {1, 2, 3, 5} and 3 in sizes and 5 in sizes
        assert np.all((np.abs(coefs[e]) >= 0.5) & (np.abs(coefs[e]) <= 1.5))
        # the game by hand: sum_k a_k 1[T_k subset of S]
        contained = np.all(z[:, None, :] >= members[e][None], axis=-1)
        np.testing.assert_allclose(batched[e], contained @ coefs[e], rtol=0, atol=TOL)
        # phi by hand (phi_i = sum_{k ni i} a_k / |T_k|) and by the Walsh formula
        np.testing.assert_allclose(gs.phi[e], (coefs[e] / sizes) @ members[e], rtol=0,
                                   atol=TOL)
        spec_masks, spec_coefs = games.soum_spectrum(gs.game.params["masks"][e], coefs[e], n)
        np.testing.assert_allclose(gs.phi[e], walsh_shapley(spec_masks, spec_coefs, n), rtol=0,
                                   atol=TOL)
        # planted odd sets by hand: odd subsets U of a term T with |U| >= 3
        by_hand = set()
        for t in members[e]:
            idx = np.flatnonzero(t).tolist()
            for r in range(3, len(idx) + 1, 2):
                for mask in range(1 << len(idx)):
                    if bin(mask).count("1") == r:
                        by_hand.add(frozenset(i for b, i in enumerate(idx) if mask >> b & 1))
        planted = gs.planted_odd[e]
        real = planted[np.any(planted != 0, axis=1)]
        assert sets_of(real, n) == by_hand and len(real) == len(by_hand)
        assert np.all(planted[len(real):] == 0), "padding rows are all-zero and trailing"


def test_load_game_set_deterministic():
    a = data.load_game_set("soum60", seed=5, explicands=2)
    b = data.load_game_set("soum60", seed=5, explicands=2)
    c = data.load_game_set("soum60", seed=6, explicands=2)
    for f in ("phi", "empty", "grand", "planted_odd"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert not np.array_equal(a.phi, c.phi)
    # explicand e of E = 2 is explicand e of E = 3 (independent per-explicand streams)
    d = data.load_game_set("soum60", seed=5, explicands=3)
    np.testing.assert_array_equal(d.phi[:2], a.phi)


def test_cache_round_trip_sparse_and_soum(tmp_path):
    for name in ("soum30", "tree_cancer30"):
        fresh = data.load_game_set(name, explicands=2, cache_dir=tmp_path)
        cached = data.load_game_set(name, explicands=2, cache_dir=tmp_path)
        for f in ("phi", "empty", "grand", "planted_odd"):
            np.testing.assert_array_equal(getattr(cached, f), getattr(fresh, f))
        jax.tree.map(np.testing.assert_array_equal, cached.game.params, fresh.game.params)
        assert cached.game.fn is fresh.game.fn and cached.table is None
    assert len(list(tmp_path.glob("*.npz"))) == 2


def test_load_game_set_errors():
    with pytest.raises(ValueError, match="name"):
        data.load_game_set("mlp_mnist")
    with pytest.raises(ValueError, match="explicands"):
        data.load_game_set("soum30", explicands=0)
    with pytest.raises(ValueError, match="explicands"):
        data.load_game_set("mlp_wine", explicands=1000)
    with pytest.raises(ValueError, match="seed"):
        data.load_game_set("soum30", seed=-1)
    with pytest.raises(ValueError, match="train_steps"):
        data.load_game_set("mlp_diabetes", train_steps=0)
    with pytest.raises(ValueError, match="name"):
        data.fit_model("soum30")
