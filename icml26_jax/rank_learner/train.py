"""The Rank-Learner experiment (spec §Experiment): E1 (learned nuisances) on the synthetic DGP
and on the semi-synthetic DGPs, E2 (oracle nuisances perturbed along the confounding), the
claims of spec §Claims, figures and ``results.json``.

Seeds are a leading axis everywhere: the nuisance fits, the DR-learner and the rankers of all
seeds (and, in E2, of every delta and label type) are stacked replicas of one program, sharded
over the devices. Plug-in and Rank-Learner replicas of a seed share the initialisation and the
sampled pairs, so a paired difference isolates the label. Each finished stage is checkpointed
and restored on resume.
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from icml26_jax.core import checkpoint, distributed
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.rank_learner import baselines, configs, data, fitting, metrics, nuisance, ranking

METHODS = ("oracle", "rank", "plugin", "dr", "t")
LABELS = {"oracle": "oracle", "rank": "Rank-Learner", "plugin": "plug-in ranker",
          "dr": "DR-learner", "t": "T-learner"}
TOC_POINTS = 100


def validate_config(c) -> None:
    """Raises ``ValueError`` naming the first bad field of config ``c``."""
    if c.variant not in configs.VARIANTS:
        raise ValueError(f"variant must be one of {configs.VARIANTS}, got {c.variant!r}")
    if c.dgp not in data.DGPS:
        raise ValueError(f"dgp must be one of {', '.join(data.DGPS)}, got {c.dgp!r}")
    for name in c.semisynthetic:
        if name not in data.SEMISYNTHETIC:
            raise ValueError(f"semisynthetic entries must be in {', '.join(data.SEMISYNTHETIC)},"
                             f" got {name!r}")
    if c.nuisance not in configs.NUISANCE:
        raise ValueError(f"nuisance must be one of {', '.join(configs.NUISANCE)}, got "
                         f"{c.nuisance!r}")
    for mode in c.perturb:
        if mode not in data.PERTURB_MODES:
            raise ValueError(f"perturb entries must be in {', '.join(data.PERTURB_MODES)}, got "
                             f"{mode!r}")
    if int(c.num_seeds) < 1:
        raise ValueError(f"num_seeds must be >= 1, got {c.num_seeds}")
    if int(c.crossfit) < 1:
        raise ValueError(f"crossfit must be >= 1 (1 = sample splitting), got {c.crossfit}")
    if int(c.n_stage2) - int(c.val_frac * c.n_stage2) < 2:
        raise ValueError(f"n_stage2={c.n_stage2} leaves fewer than 2 training units (n < 2)")
    for name in ("n_nuis", "n_stage2"):
        if int(c.val_frac * c[name]) < 1:
            raise ValueError(f"{name}={c[name]} with val_frac={c.val_frac} leaves no validation "
                             "rows for early stopping")
    if int(c.bootstrap) < 1:
        raise ValueError(f"bootstrap must be >= 1, got {c.bootstrap}")
    if any(d < 0 for d in (*c.deltas, *c.both_deltas)):
        raise ValueError(f"deltas must be >= 0, got {tuple(c.deltas)} / {tuple(c.both_deltas)}")
    ranking._check_clip(c.prop_clip)
    ranker_config(c).validate()
    fit_config(c, stage=1).validate()


def fit_config(c, stage: int = 2) -> fitting.FitConfig:
    """The :class:`fitting.FitConfig` of the MLP fits of ``stage`` (1: nuisances, with
    ``nuisance_epochs``; 2: rankers and DR-learner, with ``epochs``) of config ``c``."""
    epochs = c.nuisance_epochs if stage == 1 else c.epochs
    return fitting.FitConfig(float(c.lr), float(c.weight_decay), int(c.batch), int(epochs),
                             int(c.patience))


def ranker_config(c) -> ranking.RankerConfig:
    """The stage-2 :class:`ranking.RankerConfig` of config ``c``."""
    return ranking.RankerConfig(float(c.kappa), float(c.pair_frac), bool(c.clip_labels),
                                fit_config(c))


def seeds_of(c) -> list[int]:
    """The data seeds of the run: ``1000 seed + k`` for k < num_seeds, so runs with
    different ``--seed`` use disjoint seed sets."""
    if int(c.num_seeds) > 1000:
        raise ValueError(f"num_seeds must be <= 1000, got {c.num_seeds}")
    return [1000 * int(c.seed) + k for k in range(int(c.num_seeds))]


def _stack(parts):
    return data.CausalData(*(np.stack(f) for f in zip(*parts)))


def prepare(c, dgp: str, seeds) -> dict:
    """Per seed, a fresh DGP sample and fresh splits (``np.random.default_rng(seed)``),
    stacked over seeds. Each split holds its training rows first, then its validation rows.

    Returns:
      ``{"nuis", "stage2", "test"}`` stacked :class:`data.CausalData` ([S, rows, ...]) and
      ``n_nuis_train``, ``n_stage2_train`` (rows before the validation rows).
    """
    nuis, s2, test = [], [], []
    for s in seeds:
        rng = np.random.default_rng(s)
        d = data.generate(dgp, rng)
        sp = data.make_splits(rng, len(d.t), c.n_nuis, c.n_stage2, c.n_test, c.val_frac)
        nuis.append(d.take(np.concatenate([sp.nuis_train, sp.nuis_val])))
        s2.append(d.take(np.concatenate([sp.stage2_train, sp.stage2_val])))
        test.append(d.take(sp.test))
        n_nt, n_st = len(sp.nuis_train), len(sp.stage2_train)
    return {"nuis": _stack(nuis), "stage2": _stack(s2), "test": _stack(test),
            "n_nuis_train": n_nt, "n_stage2_train": n_st}


# --------------------------------------------------------------------------- evaluation


def _evaluate_one(_, score, tau, mu0, mu1, phi):
    return {"autoc": metrics.autoc(score, tau), "pv": metrics.policy_value(score, mu0, mu1),
            "approx_autoc": metrics.approx_autoc_dr(score, phi),
            "kendall": metrics.kendall_tau(score, tau), "spearman": metrics.spearman(score, tau)}


def _toc_one(_, score, tau):
    return metrics.toc_curve(score, tau)


def evaluate(score, test: data.CausalData, phi_test) -> dict:
    """Test metrics of scores ``[S, n]`` against ground truth: AUTOC, PV, the DR-approximate
    AUTOC (from ``phi_test``), Kendall and Spearman with tau; each ``[S]`` (the seeds
    sharded over every device)."""
    f = lambda a: np.asarray(a, np.float32)  # noqa: E731
    S = np.shape(score)[0]
    out = mesh_lib.map_runs(mesh_lib.runs_mesh(S), _evaluate_one, None, f(score), f(test.tau),
                            f(test.mu0), f(test.mu1), f(phi_test))
    return {k: np.asarray(v, np.float64) for k, v in mesh_lib.to_host(out, S).items()}


def toc_grid(score, tau) -> np.ndarray:
    """The seed-mean TOC curve at ``TOC_POINTS`` evenly spaced treated fractions."""
    S = np.shape(score)[0]
    toc = mesh_lib.to_host(mesh_lib.map_runs(mesh_lib.runs_mesh(S), _toc_one, None,
                                             np.asarray(score, np.float32),
                                             np.asarray(tau, np.float32)), S)
    n = toc.shape[1]
    k = np.unique(np.linspace(1, n, TOC_POINTS).round().astype(int)) - 1
    return toc.mean(0)[k]


def _rows(a, n):
    return np.asarray(a)[:, :n], np.asarray(a)[:, n:]


# --------------------------------------------------------------------------- E1


def _nuisances(c, P, seeds):
    """Stage-1 predictions at the stage-2 and test rows, and the epochs the fits used."""
    fc = fit_config(c, stage=1)
    nu, n_tr = P["nuis"], P["n_nuis_train"]
    S, n = nu.t.shape
    if int(c.crossfit) == 1:
        w = np.zeros((S, n), bool)
        w[:, :n_tr] = True
        fit_ = nuisance.fit_nuisances(seeds, nu.x, nu.t, nu.y, w, ~w, fc, c.hidden)
        return (fit_.predict(P["stage2"].x), fit_.predict(P["test"].x),
                np.asarray(fit_.history.epochs).reshape(3, S))
    # K-fold cross-fitting over the pooled nuisance + stage-2 rows: the stage-2 predictions
    # are out of fold; the test predictions average the K fold models.
    s2, test = P["stage2"], P["test"]
    pool = lambda a, b: np.concatenate([a, b], axis=1)  # noqa: E731
    oof, fit_ = nuisance.crossfit(seeds, pool(nu.x, s2.x), pool(nu.t, s2.t), pool(nu.y, s2.y),
                                  int(c.crossfit), fc, c.val_frac, c.hidden)
    K = int(c.crossfit)
    pt = fit_.predict(np.repeat(test.x, K, axis=0))  # replicas (seed, fold), fold fastest
    nut = data.Nuisances(*(a.reshape(S, K, -1).mean(1) for a in pt))
    epochs = np.asarray(fit_.history.epochs).reshape(3, S, K).mean(2)
    return data.Nuisances(*(a[:, n:] for a in oof)), nut, epochs


def _stage2(c, seeds, x2, n_tr, arms):
    """Trains the rankers of ``arms`` (list of (tau_hat, phi_hat, orthogonal) per replica
    group of S seeds) and returns their params and histories."""
    rc = ranker_config(c)
    S = len(seeds)
    G = len(arms)
    rep = lambda a: np.concatenate([a] * G)  # noqa: E731
    tau = np.concatenate([a[0] for a in arms])
    phi = np.concatenate([a[1] for a in arms])
    orth = np.repeat([a[2] for a in arms], S)
    xt, xv = _rows(rep(x2), n_tr)
    (tt, _), (pt, pv) = _rows(tau, n_tr), _rows(phi, n_tr)
    return ranking.train_rankers(rep(np.asarray(seeds)), xt, tt, pt, xv, pv, orth, rc, c.hidden)


def e1(c, dgp: str, seeds) -> dict:
    """E1 on ``dgp``: learned nuisances; T, DR, plug-in, Rank and oracle on the test set."""
    t0 = time.time()
    P = prepare(c, dgp, seeds)
    S = len(seeds)
    s2, test = P["stage2"], P["test"]
    n_tr = P["n_stage2_train"]
    nu2, nut, nuis_epochs = _nuisances(c, P, seeds)
    logging.info("E1 %s: nuisances fitted (%.1f s)", dgp, time.time() - t0)
    phi2 = np.asarray(ranking.aipw(s2.y, s2.t, nu2.mu0, nu2.mu1, nu2.pi, c.prop_clip))
    phit = np.asarray(ranking.aipw(test.y, test.t, nut.mu0, nut.mu1, nut.pi, c.prop_clip))
    tau2 = nu2.mu1 - nu2.mu0
    g, p, hist = _stage2(c, seeds, s2.x, n_tr, [(tau2, phi2, False), (tau2, phi2, True)])
    sc = nuisance.predict_stack(g, p, np.concatenate([test.x, test.x]))
    logging.info("E1 %s: rankers trained (%.1f s)", dgp, time.time() - t0)
    w = np.zeros(phi2.shape, bool)
    w[:, :n_tr] = True
    gd, pd, hd = baselines.dr_learner(seeds, s2.x, phi2, w, ~w, fit_config(c), c.hidden)
    tau_t = nut.mu1 - nut.mu0
    scores = {"oracle": baselines.oracle_ranker(test.tau), "rank": sc[S:], "plugin": sc[:S],
              "dr": nuisance.predict_stack(gd, pd, test.x), "t": baselines.t_learner(tau_t)}
    out = {"methods": {}, "toc": {}}
    oracle = evaluate(scores["oracle"], test, phit)["autoc"]
    for m in METHODS:
        ev = evaluate(scores[m], test, phit)
        ev["ratio"] = ev["autoc"] / oracle
        if m in ("dr", "t"):
            ev["pehe"] = np.sqrt(np.mean((scores[m] - test.tau) ** 2, axis=1))
        out["methods"][m] = ev
        out["toc"][m] = toc_grid(scores[m], test.tau)
    ep = np.asarray(hist.epochs).reshape(2, S)
    stat = np.asarray(hist.stat).reshape(2, S, -1)
    out["train"] = {
        "ranker_epochs": ep, "dr_epochs": np.asarray(hd.epochs), "nuisance_epochs": nuis_epochs,
        "clip_frac": np.nanmean(stat[1], axis=1),
        "val_autoc": np.asarray(hist.val).reshape(2, S, -1),
        "kappa_over_sd": float(c.kappa) / tau2[:, :n_tr].std(1),
        "labels_differ": np.abs(_label_gap(c, tau2[:, :n_tr], phi2[:, :n_tr])),
        "seconds": time.time() - t0}
    logging.info("E1 %s done (%.1f s): mean test AUTOC %s", dgp, time.time() - t0,
                 {m: round(float(out["methods"][m]["autoc"].mean()), 4) for m in METHODS})
    return out


def _label_gap(c, tau, phi) -> np.ndarray:
    """Mean |orthogonal - plug-in label| over 4,096 pairs per seed (a guard against a
    vacuous comparison: with learned nuisances the two labels must differ)."""
    key = jax.random.key(0)
    i, j = ranking.sample_pairs(key, tau.shape[1], 4096)
    tau, phi = jnp.asarray(tau), jnp.asarray(phi)
    soft = ranking.soft_labels(tau[:, i], tau[:, j], c.kappa)
    orth, _ = ranking.orth_labels(tau[:, i], tau[:, j], phi[:, i], phi[:, j], c.kappa,
                                  c.clip_labels)
    return np.asarray(jnp.mean(jnp.abs(orth - soft), axis=1))


# --------------------------------------------------------------------------- E2


def e2(c, seeds) -> dict:
    """E2 on the synthetic DGP: oracle nuisances perturbed along b(x) by delta; plug-in and
    Rank (mode "mu" at ``deltas``; mode "both" at ``both_deltas``, with the DR-learner and
    the T-learner as well). All rankers of all deltas and seeds are one stacked program."""
    t0 = time.time()
    P = prepare(c, "synthetic", seeds)
    S = len(seeds)
    s2, test = P["stage2"], P["test"]
    n_tr = P["n_stage2_train"]
    cells = [("mu", d) for d in c.deltas] if "mu" in c.perturb else []
    cells += [("both", d) for d in c.both_deltas] if "both" in c.perturb else []
    arms, nuis = [], {}
    for mode, d in cells:
        n2, nt = data.perturb_oracle(s2, d, mode), data.perturb_oracle(test, d, mode)
        phi2 = np.asarray(ranking.aipw(s2.y, s2.t, n2.mu0, n2.mu1, n2.pi, c.prop_clip))
        phit = np.asarray(ranking.aipw(test.y, test.t, nt.mu0, nt.mu1, nt.pi, c.prop_clip))
        tau2 = n2.mu1 - n2.mu0
        nuis[(mode, d)] = (phi2, phit, tau2, nt)
        arms += [(tau2, phi2, False), (tau2, phi2, True)]
    g, p, hist = _stage2(c, seeds, s2.x, n_tr, arms)
    G = len(arms)
    sc = nuisance.predict_stack(g, p, np.concatenate([test.x] * G)).reshape(G, S, -1)
    logging.info("E2: %d rankers trained (%.1f s)", G * S, time.time() - t0)
    zero_phi = np.zeros_like(test.tau)
    oracle = evaluate(test.tau, test, zero_phi)
    out = {"oracle": {"autoc": oracle["autoc"], "pv": oracle["pv"]}}
    for mode in ("mu", "both"):
        ds = [d for m, d in cells if m == mode]
        if not ds:
            continue
        res = {"deltas": np.asarray(ds, np.float64)}
        per = {m: {"autoc": [], "pv": []} for m in ("plugin", "rank", "t", "dr")}
        for d in ds:
            k = cells.index((mode, d))
            phi2, phit, tau2, nt = nuis[(mode, d)]
            sc_m = {"plugin": sc[2 * k], "rank": sc[2 * k + 1], "t": nt.mu1 - nt.mu0}
            if mode == "both":
                w = np.zeros(phi2.shape, bool)
                w[:, :n_tr] = True
                gd, pd, _ = baselines.dr_learner(seeds, s2.x, phi2, w, ~w, fit_config(c),
                                                 c.hidden)
                sc_m["dr"] = nuisance.predict_stack(gd, pd, test.x)
            for m, s in sc_m.items():
                ev = evaluate(s, test, phit)
                per[m]["autoc"].append(ev["autoc"])
                per[m]["pv"].append(ev["pv"])
        for m, v in per.items():
            if v["autoc"]:
                res[m] = {k: np.stack(a) for k, a in v.items()}  # [D, S]
        stat = np.asarray(hist.stat).reshape(G, S, -1)
        res["clip_frac"] = np.stack([np.nanmean(stat[2 * cells.index((mode, d)) + 1], 1)
                                     for d in ds])
        out[mode] = res
    out["seconds"] = time.time() - t0
    logging.info("E2 done (%.1f s)", time.time() - t0)
    return out


# --------------------------------------------------------------------------- claims


SMOKE_THRESHOLDS = {"autoc_oracle_ratio": 0.90, "orth_delta0_gap": 0.05,
                    "orth_delta1_gain": 0.05}
SMOKE_CLAIMS = tuple(SMOKE_THRESHOLDS)


def _at(res: dict, mode: str, method: str, delta: float):
    """AUTOC [S] of ``method`` at ``delta`` in E2 mode ``mode`` (None if not run)."""
    r = res.get(mode)
    if r is None or method not in r:
        return None
    hit = np.flatnonzero(np.isclose(np.asarray(r["deltas"]), delta))
    return None if hit.size == 0 else np.asarray(r[method]["autoc"])[hit[0]]


def claim_values(out: dict, primary: str = "synthetic") -> dict:
    """The measured value of every claim of spec §Claims (NaN where its experiment did not
    run), from test-set metrics with ground truth."""
    nan = float("nan")
    v = dict.fromkeys(("autoc_gain_vs_plugin", "win_frac_vs_plugin", "win_frac_vs_t_learner",
                       "autoc_gap_vs_dr", "autoc_oracle_ratio", "policy_value_margin",
                       "orth_delta0_gap", "orth_delta1_gain", "orth_delta1_win_frac",
                       "degradation_ratio", "both_delta1_win_frac_vs_dr",
                       "semisynth_gain_vs_plugin"), nan)
    e1_ = out.get("e1", {}).get(primary)
    if e1_ is not None:
        a = {m: np.asarray(e1_["methods"][m]["autoc"]) for m in METHODS}
        pv = {m: np.asarray(e1_["methods"][m]["pv"]) for m in METHODS}
        v["autoc_gain_vs_plugin"] = float(a["rank"].mean() - a["plugin"].mean())
        v["win_frac_vs_plugin"] = float(np.mean(a["rank"] > a["plugin"]))
        v["win_frac_vs_t_learner"] = float(np.mean(a["rank"] > a["t"]))
        v["autoc_gap_vs_dr"] = float(a["rank"].mean() - a["dr"].mean())
        v["autoc_oracle_ratio"] = float(a["rank"].mean() / a["oracle"].mean())
        v["policy_value_margin"] = float(min(pv["rank"].mean() - pv["plugin"].mean(),
                                             pv["rank"].mean() - pv["t"].mean()))
    e2_ = out.get("e2")
    if e2_ is not None:
        oracle = np.asarray(e2_["oracle"]["autoc"]).mean()
        r0, p0 = _at(e2_, "mu", "rank", 0.0), _at(e2_, "mu", "plugin", 0.0)
        if r0 is not None:
            v["orth_delta0_gap"] = float(abs(r0.mean() - p0.mean()))
        r1, p1 = _at(e2_, "mu", "rank", 1.0), _at(e2_, "mu", "plugin", 1.0)
        if r1 is not None:
            v["orth_delta1_gain"] = float(r1.mean() - p1.mean())
            v["orth_delta1_win_frac"] = float(np.mean(r1 - p1 >= 0.10))
        ratios = []
        for d in (0.5, 1.0):
            r, p = _at(e2_, "mu", "rank", d), _at(e2_, "mu", "plugin", d)
            if r is not None:
                ratios.append((oracle - r.mean()) / (oracle - p.mean()))
        if len(ratios) == 2:
            v["degradation_ratio"] = float(max(ratios))
        rb, db = _at(e2_, "both", "rank", 1.0), _at(e2_, "both", "dr", 1.0)
        if rb is not None and db is not None:
            v["both_delta1_win_frac_vs_dr"] = float(np.mean(rb > db))
    semi = [n for n in out.get("e1", {}) if n in data.SEMISYNTHETIC]
    if semi:
        v["semisynth_gain_vs_plugin"] = float(min(
            np.mean(out["e1"][n]["methods"]["rank"]["autoc"])
            - np.mean(out["e1"][n]["methods"]["plugin"]["autoc"]) for n in semi))
    return v


def claims(out: dict, variant: str, primary: str = "synthetic") -> list:
    """The claims of spec §Claims; the smoke variant checks the S claims with the smoke
    thresholds."""
    from icml26_jax.core import results as R

    v = claim_values(out, primary)
    full = [R.at_least("autoc_gain_vs_plugin", v["autoc_gain_vs_plugin"], 0.005),
            R.at_least("win_frac_vs_plugin", v["win_frac_vs_plugin"], 0.7),
            R.at_least("win_frac_vs_t_learner", v["win_frac_vs_t_learner"], 0.8),
            R.at_least("autoc_gap_vs_dr", v["autoc_gap_vs_dr"], -0.005),
            R.at_least("autoc_oracle_ratio", v["autoc_oracle_ratio"], 0.97),
            R.at_least("policy_value_margin", v["policy_value_margin"], 0.0),
            R.at_most("orth_delta0_gap", v["orth_delta0_gap"], 0.02),
            R.at_least("orth_delta1_gain", v["orth_delta1_gain"], 0.10),
            R.at_least("orth_delta1_win_frac", v["orth_delta1_win_frac"], 0.9),
            R.at_most("degradation_ratio", v["degradation_ratio"], 0.6),
            R.at_least("both_delta1_win_frac_vs_dr", v["both_delta1_win_frac_vs_dr"], 0.8),
            R.at_least("semisynth_gain_vs_plugin", v["semisynth_gain_vs_plugin"], 0.0)]
    if variant != "smoke":
        return full
    smoke = []
    for cl in full:
        if cl.name in SMOKE_THRESHOLDS:
            t = SMOKE_THRESHOLDS[cl.name]
            smoke.append(R.at_most(cl.name, cl.measured, t) if cl.name == "orth_delta0_gap"
                         else R.at_least(cl.name, cl.measured, t))
    return smoke


def paired_bootstrap(diff, n: int, seed: int = 0) -> tuple[float, float]:
    """95 % percentile CI of the mean of paired differences ``diff [S]`` (``n`` resamples)."""
    diff = np.asarray(diff, np.float64)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (n, len(diff)))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def summary_metrics(out: dict, c) -> dict:
    """Seed means, win counts and paired bootstrap CIs per DGP and method (results.json)."""
    m = {}
    for dgp, r in out.get("e1", {}).items():
        d = {}
        rank = np.asarray(r["methods"]["rank"]["autoc"])
        for meth in METHODS:
            ev = r["methods"][meth]
            d[meth] = {k: float(np.mean(v)) for k, v in ev.items()}
            d[meth]["autoc_sd"] = float(np.std(ev["autoc"]))
            if meth not in ("rank", "oracle"):
                diff = rank - np.asarray(ev["autoc"])
                d[meth]["rank_wins"] = int(np.sum(diff > 0))
                d[meth]["rank_minus_ci95"] = paired_bootstrap(diff, int(c.bootstrap))
        tr = r["train"]
        d["train"] = {"ranker_epochs_plugin": float(np.mean(tr["ranker_epochs"][0])),
                      "ranker_epochs_rank": float(np.mean(tr["ranker_epochs"][1])),
                      "dr_epochs": float(np.mean(tr["dr_epochs"])),
                      "clip_frac": float(np.mean(tr["clip_frac"])),
                      "kappa_over_sd_tau_hat": float(np.mean(tr["kappa_over_sd"])),
                      "mean_abs_label_gap": float(np.mean(tr["labels_differ"])),
                      "seconds": float(tr["seconds"])}
        m[f"e1_{dgp}"] = d
    e2_ = out.get("e2")
    if e2_ is not None:
        d = {"oracle_autoc": float(np.mean(e2_["oracle"]["autoc"]))}
        for mode in ("mu", "both"):
            if mode not in e2_:
                continue
            r = e2_[mode]
            for i, delta in enumerate(np.asarray(r["deltas"])):
                cell = {meth: float(np.mean(r[meth]["autoc"][i]))
                        for meth in ("plugin", "rank", "t", "dr") if meth in r}
                cell["clip_frac"] = float(np.mean(r["clip_frac"][i]))
                cell["rank_minus_plugin_ci95"] = paired_bootstrap(
                    np.asarray(r["rank"]["autoc"][i]) - np.asarray(r["plugin"]["autoc"][i]),
                    int(c.bootstrap))
                d[f"{mode}_delta{delta:g}"] = cell
        m["e2"] = d
    return m


# --------------------------------------------------------------------------- run


def run(config, workdir: str) -> dict:
    """Runs the experiments of ``config``, writes ``results.json`` and the figures.

    Returns:
      The results dict (as written to ``<workdir>/results.json``).
    """
    from icml26_jax.core import results
    from icml26_jax.rank_learner import report

    c = config
    validate_config(c)
    t_start = time.time()
    workdir = os.path.abspath(workdir)
    ck = os.path.join(workdir, "checkpoints")
    seeds = seeds_of(c)
    fp = checkpoint.config_fingerprint(c)
    logging.info("rank_learner %s: seeds %s, %d devices", c.variant, seeds, jax.device_count())
    out = {"e1": {}}
    if c.nuisance in ("learned", "all"):
        for dgp in dict.fromkeys((c.dgp, *c.semisynthetic)):
            out["e1"][dgp] = checkpoint.cached(os.path.join(ck, f"e1_{dgp}"), fingerprint=fp,
                                               compute=lambda d=dgp: e1(c, d, seeds),
                                               name=f"E1 {dgp}")
    if c.nuisance in ("oracle_perturbed", "all"):
        if c.dgp == "synthetic":
            out["e2"] = checkpoint.cached(os.path.join(ck, "e2"), fingerprint=fp,
                                          compute=lambda: e2(c, seeds), name="E2")
        else:
            logging.warning("E2 perturbs the synthetic DGP's oracle nuisances; skipped for "
                            "dgp=%s", c.dgp)
    cl = claims(out, c.variant, c.dgp)
    mets = summary_metrics(out, c)
    mets["claim_values"] = claim_values(out, c.dgp)
    runtime = time.time() - t_start
    path = results.write_results(workdir, paper="rank_learner", variant=c.variant,
                                 seed=int(c.seed), config=c, metrics=mets, claims=cl,
                                 runtime_s=runtime)
    if distributed.is_primary():
        figures = report.figures(out, workdir)
        print(report.table(out))
        print(results.claims_table(cl))
        logging.info("wrote %s and %s", path, ", ".join(figures))
    return {"paper": "rank_learner", "variant": c.variant, "seed": int(c.seed),
            "metrics": mets, "claims": [x.to_dict() for x in cl], "runtime_s": runtime,
            "results_path": path, "raw": out}
