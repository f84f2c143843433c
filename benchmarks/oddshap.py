r"""OddSHAP benchmark: accuracy at equal budget, the budget
OddSHAP needs to match KernelSHAP's largest-budget error, and the estimator's overhead —
all in one process, on the same games, explicands, seeds and budgets as the experiment.

    python benchmarks/oddshap.py                          # ~10 min on 2 CPU cores
    python benchmarks/oddshap.py --games=soum30,mlp_synth14 --seeds=3

* Accuracy: own OddSHAP, paired / unpaired KernelSHAP, LeverageSHAP and antithetic
  permutations (``train.Runner``, vmapped over seeds x explicands) at every budget; when
  installed (the ``[oddshap_peers]`` extra), ``shap==0.51.0`` ``KernelExplainer(l1_reg=False)`` and
  ``PermutationExplainer`` and ``shapiq==1.4.1`` ``KernelSHAP`` (paired / unpaired),
  ``PermutationSamplingSV``, ``SVARM`` on the same games and budgets (host loops: the
  ``--peer_seeds`` first seeds and games with n <= ``--peer_max_n``). Budgets count distinct
  coalitions for every method (shap: model calls / background rows).
  Target: MSE(OddSHAP) <= 0.5 x paired KernelSHAP (own and shapiq) and <= 0.5 x shap
  Permutation on >= 3/4 of the games at high budget.
* Budget to match: the smallest OddSHAP budget whose MSE <= paired KernelSHAP's MSE at the
  largest budget, on a grid of ``--match_budgets`` (>= 8) log-spaced budgets per game (budgets
  of one power-of-two bucket share one compiled program); ``m_kernel / m_odd`` >= 3 on >= 3/4
  of the games.
* Overhead at n = 16, m = 0.1 x 2^16 = 6554 (games excluded, after compile): proxy fit <= 10
  s, regression <= 2 s, ratio to own paired KernelSHAP's time, and the break-even game cost
  overhead / (m_kernel - m_odd).

Writes ``benchmarks/results/oddshap.json``.
"""

import json
import os
import platform
import time

from absl import app, flags

GAMES = flags.DEFINE_list("games", ["mlp_diabetes", "mlp_wine", "mlp_synth14", "digits16",
                                    "gbt_synth16", "tree_cancer30", "soum30", "soum60",
                                    "soum100"], "Games to benchmark.")
SEEDS = flags.DEFINE_integer("seeds", 10, "Estimator seeds per cell.")
PEER_SEEDS = flags.DEFINE_integer("peer_seeds", 2, "Seeds for the (host-loop) peers.")
PEER_MAX_N = flags.DEFINE_integer("peer_max_n", 16, "Largest n for the peers.")
PEER_MAX_M = flags.DEFINE_integer("peer_max_m", 5000, "Largest budget for the peers.")
MATCH_ONLY = flags.DEFINE_bool(
    "match_only", False, "Only the budget to match: OddSHAP on the grid and paired KernelSHAP "
    "at the largest budget (no peers, no other methods, no overhead timing).")
MATCH_BUDGETS = flags.DEFINE_integer(
    "match_budgets", 12, "OddSHAP budgets per game (log-spaced from the smallest to the largest "
    "experiment budget, plus the experiment's own) for the budget to match (>= 8).", lower_bound=8)
OUT = flags.DEFINE_string("out", None, "Output JSON (default benchmarks/results/oddshap.json).")

PEER_E = 2  # explicands the peers explain (host loops)
TARGETS = {"ratio_vs_kernelshap_max": 0.5, "ratio_vs_shap_permutation_max": 0.5,
           "win_share_min": 0.75, "budget_to_match_min": 3.0, "proxy_fit_max_s": 10.0,
           "regression_max_s": 2.0}


def _peers(gs, m, seeds, e_count):
    """MSE of the installed peers on explicands ``0..e_count-1`` (host loops)."""
    import jax
    import numpy as np

    from icml26_jax.oddshap import fourier, games

    out = {}
    n = gs.n

    def game_fn(e):
        """``bool [m, n]`` (or one ``[n]`` row) -> ``f64 [m]``: a lookup in the value table
        (peers run on n <= 16), or the jitted game."""
        pow2 = 1 << np.arange(n)
        if gs.table is not None:
            table = np.asarray(gs.table[e])
            return lambda z: table[np.atleast_2d(np.asarray(z, bool)) @ pow2]
        g = games.at(gs.game, e)
        ev = jax.jit(lambda z: g(z))
        return lambda z: np.asarray(ev(jax.numpy.asarray(np.atleast_2d(np.asarray(z, bool)))))

    try:
        import shapiq
    except ImportError:
        shapiq = None
    try:
        import shap
    except ImportError:
        shap = None
    if shapiq is not None:
        approx = {"shapiq_kernelshap_paired": lambda s: shapiq.KernelSHAP(
                      n, pairing_trick=True, random_state=s),
                  "shapiq_kernelshap_unpaired": lambda s: shapiq.KernelSHAP(
                      n, pairing_trick=False, random_state=s),
                  "shapiq_permutation": lambda s: shapiq.PermutationSamplingSV(
                      n, random_state=s),
                  "shapiq_svarm": lambda s: shapiq.SVARM(n, random_state=s)}
        for name, make in approx.items():
            errs = []
            for e in range(e_count):
                f = game_fn(e)
                for s in range(seeds):
                    iv = make(s).approximate(budget=m, game=f)
                    phi = np.array([iv[(i,)] for i in range(n)])
                    errs.append(np.mean((phi - gs.phi[e]) ** 2))
            out[name] = float(np.mean(errs))
    if shap is not None:
        errs_k, errs_p = [], []
        for e in range(e_count):
            f = game_fn(e)
            # the masker's "background" is the empty coalition: a row of zeros/ones encodes
            # the coalition itself, so shap's game equals ours (one background row)
            background = np.zeros((1, n))
            model = lambda x: f(np.asarray(x) > 0.5)  # noqa: E731
            for s in range(seeds):
                np.random.seed(s)
                ke = shap.KernelExplainer(model, background)
                phi = ke.shap_values(np.ones((1, n)), nsamples=m - 2, l1_reg=False,
                                     silent=True)
                errs_k.append(np.mean((np.ravel(phi) - gs.phi[e]) ** 2))
                pe = shap.PermutationExplainer(model, shap.maskers.Independent(background),
                                               seed=s)
                phi = pe(np.ones((1, n)), max_evals=m, silent=True).values[0]
                errs_p.append(np.mean((np.ravel(phi) - gs.phi[e]) ** 2))
        out["shap_kernel"] = float(np.mean(errs_k))
        out["shap_permutation"] = float(np.mean(errs_p))
    del fourier
    return out


def _overhead(c, games_out):
    """Estimator overhead at n = 16, m = 6554 (games excluded, after compile)."""
    import jax

    from icml26_jax.oddshap import data, estimator, train
    from icml26_jax.oddshap import proxy as proxy_lib

    n, m = 16, 6554
    gs = data.load_game_set("gbt_synth16", seed=0, explicands=1)
    game = jax.tree.map(lambda a: a[0], gs.game)
    odd = estimator.make_estimator(n, m)
    coal = jax.jit(odd.sample)(jax.random.key(0))
    vals = jax.jit(lambda g, mk: g.packed(mk))(game, coal.masks)
    z = jax.jit(lambda mk: estimator.fourier.unpack(mk, n))(coal.masks)
    fit_proxy = jax.jit(lambda z, v, ok: proxy_lib.tree_spectrum(
        proxy_lib.fit_oblivious_gbt(z, v, ok), n))
    from icml26_jax.core.timing import median_seconds

    t_proxy = median_seconds(fit_proxy, z, vals, coal.valid, repeats=3)
    sm, sc, sv = fit_proxy(z, vals, coal.valid)
    a, cm = jax.jit(lambda sm, sc, sv: proxy_lib.select_support(sm, sc, sv, n, odd.k))(sm, sc,
                                                                                        sv)
    lay = odd.plan.layout
    reg = jax.jit(lambda v, co, a, cm: estimator.solve_support(v, co, lay, a, cm)[0])
    t_reg = median_seconds(reg, vals, coal, a, cm, repeats=3)
    t_odd = median_seconds(jax.jit(odd.fit), jax.random.key(0), coal, vals, repeats=3)
    ks = train.Runner(c).estimator("kernelshap_paired", n, m)
    kcoal = jax.jit(ks.sample)(jax.random.key(0))
    kvals = jax.jit(lambda g, mk: g.packed(mk))(game, kcoal.masks)
    t_ks = median_seconds(jax.jit(ks.fit), jax.random.key(0), kcoal, kvals, repeats=3)
    g16 = games_out.get("gbt_synth16") or games_out.get("digits16")
    overhead = {"n": n, "m": m, "proxy_fit_s": t_proxy, "regression_s": t_reg,
                "oddshap_fit_s": t_odd, "kernelshap_fit_s": t_ks,
                "ratio_to_kernelshap": t_odd / t_ks}
    if g16 and g16["budget_to_match"]:
        m_kernel = int(sorted(g16["rows"], key=int)[-1])
        m_odd = m_kernel / g16["budget_to_match"]
        overhead["break_even_game_cost_s"] = (t_odd - t_ks) / max(m_kernel - m_odd, 1.0)

    return overhead, t_proxy, t_reg


def main(argv):
    del argv
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    from icml26_jax.oddshap import configs, data, metrics, train

    c = configs.get_config("default")
    c.num_seeds = SEEDS.value
    runner = train.Runner(c)
    t_all = time.time()
    games_out, peers_installed = {}, []
    for mod in ("shap", "shapiq"):
        try:
            __import__(mod)
            peers_installed.append(mod)
        except ImportError:
            print(f"peer {mod} not installed: skipped (pip install -e '.[oddshap_peers]')")
    for name in GAMES.value:
        gs = data.load_game_set(name, seed=0, explicands=c.explicands)
        rows = {}
        budgets = train.budgets_for(c, gs.n)
        for m in budgets:
            keys = train.seed_keys(c, name, m)
            row = {}
            methods = c.methods
            if MATCH_ONLY.value:
                methods = ("oddshap", "kernelshap_paired") if m == budgets[-1] else ("oddshap",)
            for method in methods:
                res, *_ = runner.run(gs, method, m, keys)
                mse = metrics.mse(res.phi, gs.phi[None])  # [S, E]
                row[method] = float(mse.mean())
                # on the peers' explicands (the first PEER_E), every seed
                row[f"{method}@peer_e"] = float(mse[:, :PEER_E].mean())
            if (peers_installed and not MATCH_ONLY.value and gs.n <= PEER_MAX_N.value
                    and m <= PEER_MAX_M.value
                    and train.is_high_budget(gs.n, m, c.eta)):
                t0 = time.time()
                row.update(_peers(gs, m, PEER_SEEDS.value, min(PEER_E, c.explicands)))
                row["peers_s"] = time.time() - t0
            rows[str(m)] = row
            print(name, m, {k: f"{v:.3g}" for k, v in row.items() if "@" not in k}, flush=True)
        high = [m for m in rows if train.is_high_budget(gs.n, int(m), c.eta)
                and "kernelshap_paired" in rows[m]]
        ms = sorted(rows, key=int)
        target = rows[ms[-1]]["kernelshap_paired"]
        # OddSHAP alone on a finer grid of budgets (the experiment's budgets included)
        grid = sorted({int(round(x)) for x in np.geomspace(int(ms[0]), int(ms[-1]),
                                                           MATCH_BUDGETS.value)}
                      | {int(m) for m in ms})
        curve = {}
        for m in grid:
            if str(m) in rows:
                curve[m] = rows[str(m)]["oddshap"]
            else:
                res, *_ = runner.run(gs, "oddshap", m, train.seed_keys(c, name, m))
                curve[m] = float(metrics.mse(res.phi, gs.phi[None]).mean())
        match = next((m for m in grid if curve[m] <= target), None)
        g = {"n": gs.n, "rows": rows, "oddshap_curve": {str(m): v for m, v in curve.items()},
             "kernelshap_largest_budget_mse": target,
             "ratio_vs_kernelshap_paired": metrics.geomean(
                 [rows[m]["oddshap"] / rows[m]["kernelshap_paired"] for m in high]),
             "m_odd_to_match": match,
             "budget_to_match": (int(ms[-1]) / match) if match else 0.0}
        print(name, "budget to match:", match, "of", ms[-1], flush=True)
        for peer in ("shapiq_kernelshap_paired", "shap_permutation"):
            have = [m for m in high if peer in rows[m]]
            if have:
                g[f"ratio_vs_{peer}"] = metrics.geomean(
                    [rows[m]["oddshap@peer_e"] / rows[m][peer] for m in have])
        games_out[name] = g

    overhead, t_proxy, t_reg = {}, None, None
    if not MATCH_ONLY.value:
        overhead, t_proxy, t_reg = _overhead(c, games_out)

    wins_k = [g["ratio_vs_kernelshap_paired"] <= TARGETS["ratio_vs_kernelshap_max"]
              for g in games_out.values()]
    match = [g["budget_to_match"] >= TARGETS["budget_to_match_min"] for g in games_out.values()]
    checks = {"oddshap_le_half_kernelshap_share": float(np.mean(wins_k)),
              "budget_to_match_share": float(np.mean(match)),
              }
    if t_proxy is not None:
        checks.update(proxy_fit_ok=t_proxy <= TARGETS["proxy_fit_max_s"],
                      regression_ok=t_reg <= TARGETS["regression_max_s"])
    for peer in ("shapiq_kernelshap_paired", "shap_permutation"):
        r = [g[f"ratio_vs_{peer}"] <= 0.5 for g in games_out.values() if f"ratio_vs_{peer}" in g]
        if r:
            checks[f"oddshap_le_half_{peer}_share"] = float(np.mean(r))
    summary = {"games": {k: {kk: vv for kk, vv in g.items() if kk != "rows"}
                         for k, g in games_out.items()}, "overhead": overhead,
               "peers_installed": peers_installed, "total_s": time.time() - t_all}
    print("\nsummary:", json.dumps(summary, indent=1, default=float))
    print("targets:", json.dumps(checks, indent=1))
    out = OUT.value or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                    "oddshap.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"paper": "oddshap", "machine": platform.platform(),
                   "devices": [str(d) for d in jax.devices()], "targets": TARGETS,
                   "checks": checks, "summary": summary,
                   "rows": {k: g["rows"] for k, g in games_out.items()}}, f, indent=1,
                  default=float)
    print("wrote", out)


if __name__ == "__main__":
    app.run(main)
