"""The study's driver: data, config errors, the gradient-SNR mechanism of claim 3, the
Pareto frontier and claims on synthetic metrics, and smoke-scale runs (validation loss
decreases, results.json schema, determinism, resume)."""

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26_jax.core import results
from icml26_jax.discrete_diffusion import analysis, configs, data, losses, train
from icml26_jax.discrete_diffusion import model as model_lib
from icml26_jax.lm import hmm as hmm_lib
from tests.compile_passes import module_fixture


# Tiny models run for a few steps: compiled with few XLA passes (tests/compile_passes.py).
_few_passes = module_fixture()


def test_language_is_a_constant_with_the_spec_structure():
    lang = data.make_language()
    assert lang.trans.shape == (128, 128) and lang.emit.shape == (128, 64)
    assert np.all((lang.trans > 0).sum(1) == 4) and np.all((lang.emit > 0).sum(1) == 8)
    again = data.make_language()
    np.testing.assert_array_equal(lang.trans, again.trans)
    # The floor of length-64 sequences, frozen: 2.4367 +- 0.0010 nats/token (2e4 sequences).
    h, se = data.sequence_entropy(lang, 64, 4000)
    assert abs(h - 2.4367) < 4 * max(se, 0.001) and se < 0.01
    # H sits well below what the last token alone predicts and below log V.
    assert h < hmm_lib.unigram_entropy(lang) - 1.0 < math.log(64)


def test_batches_depend_only_on_seed_and_step():
    lang = data.make_language()
    a = data.train_batch(lang, 3, 7, 4)
    assert a.shape == (4, 64) and a.dtype == np.int32
    np.testing.assert_array_equal(a, data.train_batch(lang, 3, 7, 4))
    assert not np.array_equal(a, data.train_batch(lang, 3, 8, 4))
    assert not np.array_equal(a, data.train_batch(lang, 4, 7, 4))
    # Sequences of this language: the exact likelihood never meets an impossible token
    # (4 successors and 8 emissions per state make most continuations impossible).
    assert np.all(np.isfinite(hmm_lib.log_likelihood(lang, a)))
    v = data.validation_set(lang, 8)
    assert v.shape == (8, 64) and v.dtype == np.int32
    np.testing.assert_array_equal(v, data.validation_set(lang, 8))
    w = np.arange(40, dtype=np.int32).reshape(10, 4)
    np.testing.assert_array_equal(data.real_batch(w, 0, 1, 3), data.real_batch(w, 0, 1, 3))
    with pytest.raises(ValueError, match="source"):
        data.real_windows("c4", "/tmp", "train", 8)


@pytest.mark.parametrize("field,value,match", [
    ("sizes", ("XS,XXL",), "sizes"), ("families", ("ar,sedd",), "families"),
    ("budgets", (0.0,), "budgets"), ("sample_steps", ("0,4",), "sample_steps"),
    ("mdlm_seeds", 0, "mdlm_seeds"), ("lr", 0.0, "lr"), ("batch", 0, "batch"),
    ("variant", "huge", "variant")])
def test_config_errors_name_the_field(field, value, match):
    c = configs.get_config("smoke")
    c[field] = value
    with pytest.raises(ValueError, match=match):
        train.normalise_config(c)
        train.validate_config(c)
    c = configs.get_config("smoke")
    c.data.source = "c4"
    with pytest.raises(ValueError, match="data.source"):
        train.validate_config(c)
    with pytest.raises(ValueError, match="variant"):
        configs.get_config("medium")


def test_traced_low_var_weight_equals_the_static_objectives():
    g, p = model_lib.init("XS", "mdlm", 16, 0)
    x = jax.random.randint(jax.random.key(0), (4, 12), 0, 16)
    key = jax.random.key(1)
    f = jax.jit(lambda lv: losses.loss_fn("mdlm", p, g, {"tokens": x}, key, train=True, K=16,
                                          low_var=lv))
    lv = float(losses.loss_fn("mdlm_lowvar", p, g, {"tokens": x}, key, train=True, K=16))
    nb = float(losses.loss_fn("mdlm", p, g, {"tokens": x}, key, train=True, K=16))
    np.testing.assert_allclose(float(f(jnp.array(True))), lv, rtol=1e-6)
    np.testing.assert_allclose(float(f(jnp.array(False))), nb, rtol=1e-6)


def test_gradient_snr_is_higher_for_the_low_var_objective():
    """Claim 3's mechanism on a fixed XS model and batch, 64 draws of (t, mask)."""
    lang = data.make_language()
    g, p = model_lib.init("XS", "mdlm", 64, 0)
    # Any fixed batch of the language will do: the NumPy sampler's (no sampler compile).
    x = jnp.asarray(hmm_lib.sample(lang, 32, 64, seed=(0, 0)))
    snr_lv = train.gradient_snr(g, p, x, 64, low_var=True)
    snr_nb = train.gradient_snr(g, p, x, 64, low_var=False)
    assert snr_lv > 1.5 * snr_nb, (snr_lv, snr_nb)


def test_pareto_frontier_and_validation_times():
    pts = [(5, 10.0), (5, 12.0), (9, 8.0), (17, 9.0), (65, 3.0), (65, 3.0)]
    assert analysis.pareto_frontier(pts) == [0, 2, 4, 5]
    t = train.validation_times(100, 8)
    assert t.shape == (8, 100) and t.min() >= 1e-3 and t.max() <= 1.0
    # Stratified: stratum j of every sequence lies in [j/8, (j+1)/8] (up to eps).
    j = np.floor((t - 1e-3) / (1 - 1e-3) * 8)
    np.testing.assert_array_equal(j, np.broadcast_to(np.arange(8)[:, None], (8, 100)))


def _metrics(ar=2.6, lv=2.9, duo=3.0, ppl_duo=20.0, ppl_lv=25.0):
    """Synthetic metrics of a default run: sizes XS < S < M, best at S."""
    sizes = ["XS", "S", "M"]
    N = [model_lib.non_embedding_params(s) for s in sizes]
    iso = {}
    for f, base in (("ar", ar), ("mdlm", lv + 0.02), ("mdlm_lowvar", lv), ("duo", duo)):
        n = 3 if f.startswith("mdlm") else 1
        loss = [base + 0.2, base, base + 0.1]
        iso[f] = {"size": sizes, "N": N, "loss": loss, "seeds": [[v] * n for v in loss]}
    pareto = {f: {"T": np.array([4.0, 8.0, 16.0, 64.0]), "nfe": np.array([5.0, 9, 17, 65]),
                  "gen_ppl": np.array([p, p - 1, p - 2, p - 3]), "unigram": np.full(4, 4.0),
                  "bigram": np.full(4, 2.0), "tokens_per_s": np.full(4, 1e4),
                  "invalid": np.zeros(4)}
              for f, p in (("mdlm", ppl_lv + 1), ("mdlm_lowvar", ppl_lv), ("duo", ppl_duo))}
    pareto["ar"] = {k: v[-1:] for k, v in pareto["duo"].items()}
    pareto["ar"]["gen_ppl"] = np.array([12.0])
    runs = [{"budget": 6e11, "size": s, "family": f, "val": v}
            for f, e in iso.items() for s, vs in zip(e["size"], e["seeds"]) for v in vs]
    c = configs.get_config("default")
    train.normalise_config(c)
    m = analysis.summarise(c, runs, {6e11: pareto}, (2.4367, 0.001))
    m["data_unigram"] = 4.04
    return m, c


def test_claims_on_synthetic_metrics():
    m, c = _metrics()
    cl = {x.name: x for x in analysis.claims(m, c)}
    assert set(cl) == set(analysis.DEFAULT_CLAIMS)
    assert all(x.holds for x in cl.values()), cl
    assert m["frontier"]["6e+11"][0] == "duo@T=4"
    # Each claim fails when its condition is broken.
    m, c = _metrics(ppl_duo=30.0)  # Duo samples worse than MDLM: no perplexity paradox
    cl = {x.name: x for x in analysis.claims(m, c)}
    assert not cl["perplexity_misleads_across_families"].holds
    assert not cl["pareto_frontier_shape"].holds  # MDLM-low-var now on the frontier
    m, c = _metrics(duo=2.8)  # Duo better than MDLM-low-var: ordering broken
    cl = {x.name: x for x in analysis.claims(m, c)}
    assert not cl["family_ordering"].holds and cl["lowvar_improves_mdlm"].holds
    assert analysis.claims(m, configs.get_config("smoke")) == []


def _tiny(workdir_seed=0):
    c = configs.get_config("smoke")
    c.families = ("mdlm", "mdlm_lowvar")  # the vmapped pair with a traced objective
    c.steps, c.chunk = 12, 5
    c.val_size, c.val_times, c.floor_seqs = 16, 2, 50
    c.num_samples, c.sample_steps = 4, (2,)
    c.seed = workdir_seed
    return c


def test_group_sharded_over_every_device_equals_its_replicas_alone(tmp_path):
    """A group of 3 replicas on 8 devices (padded by repeating the last one) gives each
    replica the numbers it gets alone; the padded replicas never reach the host. The group
    draws its batches on the device in chunks of 2 (``batches=lang``), the replicas alone get
    them one by one from the host (``data.train_batch``): the stream trained on is the one
    listed, whatever the chunking."""
    assert jax.device_count() % 3
    c = _tiny()
    c.steps, c.chunk, c.batch = 4, 2, 4
    lang = data.make_language()
    batches = lambda s, s0, n: np.stack(  # noqa: E731
        [data.train_batch(lang, s, s0 + i, 4, 64) for i in range(n)])
    val = data.validation_set(lang, 8)
    g = train.Group(6e11, "XS", "mdlm", ("mdlm", "mdlm", "mdlm_lowvar"), (0, 1, 0),
                    (False, False, True), 4)
    out = train.train_group(c, g, lang, val, str(tmp_path / "all"))
    assert out["train_loss"].shape == (4, 3) and out["val"].shape == (3,)
    assert jax.tree.leaves(out["params"])[0].shape[0] == 3
    for r in (1, 2):
        one = train.Group(6e11, "XS", "mdlm", g.names[r:r + 1], g.seeds[r:r + 1],
                          g.low_var[r:r + 1], 4)
        o = train.train_group(c, one, batches, val, str(tmp_path / f"one{r}"))
        np.testing.assert_allclose(out["train_loss"][:, r], o["train_loss"][:, 0], rtol=1e-5)
        np.testing.assert_allclose(out["val"][r], o["val"][0], rtol=1e-5)


def test_tiny_run_is_deterministic_and_resumes(tmp_path):
    a = train.run(_tiny(), str(tmp_path / "a"))
    b = train.run(_tiny(), str(tmp_path / "b"))
    va = [r["val"] for r in a["metrics"]["runs"]]
    assert va == [r["val"] for r in b["metrics"]["runs"]]
    for f, d in a["metrics"]["pareto"]["6e+11"].items():  # tokens/s is a timing, not compared
        assert d["gen_ppl"] == b["metrics"]["pareto"]["6e+11"][f]["gen_ppl"], f
    # A second run in the same directory restores every stage instead of retraining.
    os.remove(tmp_path / "a" / "results.json")
    again = train.run(_tiny(), str(tmp_path / "a"))
    assert [r["val"] for r in again["metrics"]["runs"]] == va
    # Another config in the same directory is refused, not mixed in.
    c = _tiny()
    c.lr = 1e-3
    with pytest.raises(ValueError, match="different config|another config"):
        train.run(c, str(tmp_path / "a"))


@pytest.mark.slow
def test_smoke_run_lowers_validation_loss_and_writes_results(tmp_path):
    c = configs.get_config("smoke")
    out = train.run(c, str(tmp_path))
    results.validate_results(out)
    with open(tmp_path / "results.json") as f:
        saved = json.load(f)
    assert saved["variant"] == "smoke" and saved["claims"] == []
    assert {os.path.basename(p) for p in saved["figures"]} == {"isoflop.png", "pareto.png"}
    runs = {r["family"]: r for r in saved["metrics"]["runs"]}
    assert set(runs) == set(c.families)
    lang = data.make_language()
    val = data.validation_set(lang, c.val_size)
    t = train.validation_times(c.val_size, c.val_times)
    for fam in ("ar", "mdlm", "mdlm_lowvar", "duo"):
        g, p = model_lib.init("XS", "mdlm" if fam.startswith("mdlm") else fam, 64,
                              runs[fam]["seed"])
        untrained = float(train._validate(("mdlm" if fam.startswith("mdlm") else fam, g, 64),
                                          p, jnp.asarray(val), jnp.asarray(t)))
        assert runs[fam]["val"] < untrained - 0.1, (fam, runs[fam]["val"], untrained)
    pareto = saved["metrics"]["pareto"]["6e+11"]
    assert pareto["ar"]["nfe"] == [64.0] and pareto["duo"]["nfe"] == [5.0]
    assert pareto["esolm"]["nfe"] == [4.0]


@pytest.mark.parametrize("variant", ["full", "gpu"])  # gpu: the full grid on one device
def test_full_variant_fits_and_claims_on_a_synthetic_scaling_law(variant):
    """Losses L = H + A N^-1/2 + B (c_f C / N)^-1/2 (interior optimum N* ~ C^1/2): the fits
    recover the exponent, and low-var's 1.12x compute efficiency is read back as k."""
    c = configs.get_config(variant)
    train.normalise_config(c)
    H, eff = 2.4367, {"ar": 1.5, "mdlm": 1.0, "mdlm_lowvar": 1.12, "duo": 0.8, "esolm": 0.7}
    runs = []
    for C in c.budgets:
        for s in c.sizes:
            N = model_lib.non_embedding_params(s)
            for f, e in eff.items():
                loss = H + 300 * N ** -0.5 + 2000 * (e * C / N) ** -0.5
                for k in range(3 if f.startswith("mdlm") and C == 1e12 else 1):
                    runs.append({"budget": C, "size": s, "family": f, "val": loss + 1e-4 * k})
    m = analysis.summarise(c, runs, {}, (H, 0.001))
    m["data_unigram"] = 4.04
    for f in ("ar", "mdlm_lowvar", "duo"):
        assert 0.3 < m["power_laws"][f]["n_star"]["slope"] < 0.7, m["power_laws"][f]
        assert m["power_laws"][f]["l_star"]["r2"] > 0.9
    k = m["compute_multiplier"]["k"]
    lo, hi = m["compute_multiplier"]["ci90"]
    assert 1.05 < k < 1.2 and lo <= k <= hi, m["compute_multiplier"]
    cl = {x.name: x for x in analysis.claims(m, c)}
    assert set(cl) == set(analysis.FULL_CLAIMS) - {"perplexity_misleads_across_families",
                                                 "pareto_frontier_shape"}
    assert cl["scaling_exponents_in_range"].holds and cl["isoflop_interior_minimum"].holds
