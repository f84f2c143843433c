"""OddSHAP claims (spec §Claims) and figures, from the measured metrics of ``train.run``."""

from __future__ import annotations

import os

import numpy as np

from icml26_jax.core import plotting, results
from icml26_jax.oddshap import metrics

CLAIM_NAMES = ("walsh_shapley_identity", "odd_component_sufficient",
               "paired_kernelshap_is_singleton_oddshap", "full_budget_exact", "efficiency_exact",
               "proxy_spectrum_exact", "proxy_recovers_planted_odd", "win_rate_vs_best_regression",
               "win_rate_vs_permutation", "permutation_antithetic", "gain_grows_with_budget",
               "low_budget_ratio_to_best", "pairing_ablation_ratio",
               "proxy_support_ablation_ratio")
# claims 1-6 hold at smoke size; claim 7 (planted recall >= 0.9 at m = 20 n) is measured
# there too but, faithfully, falls short (0.5-0.6; 0.99 at 50 n): see the README
SMOKE_CLAIMS = CLAIM_NAMES[:6]
BASELINES = ("kernelshap_paired", "kernelshap_unpaired", "leverageshap",
             "permutation_antithetic")
_HEAVY = ("mse_all",)


def _mse(g: dict, m: int, method: str) -> float:
    cell = g["cells"].get(f"{m}/{method}")
    return float(cell["mse"]) if cell else float("nan")


def game_ratios(m: dict, c) -> dict:
    """Per game: the high-budget geometric-mean ratios (claims 8, 9), the Spearman rho of
    MSE_kernelshap_paired / MSE_oddshap against m (claim 10) and the smallest-budget ratio to
    the best baseline (claim 11)."""
    from icml26_jax.oddshap.train import is_high_budget

    out = {}
    for name, g in m["games"].items():
        n, budgets = int(g["n"]), [int(b) for b in g["budgets"]]
        high = [b for b in budgets if is_high_budget(n, b, float(c.eta))]
        r = {}
        if high:
            r["vs_best_regression"] = metrics.geomean([
                _mse(g, b, "oddshap") / min(_mse(g, b, "kernelshap_paired"),
                                            _mse(g, b, "leverageshap")) for b in high])
            r["vs_permutation"] = metrics.geomean([
                _mse(g, b, "oddshap") / _mse(g, b, "permutation_antithetic") for b in high])
        gain = [_mse(g, b, "kernelshap_paired") / _mse(g, b, "oddshap") for b in budgets]
        r["gain_by_budget"] = gain
        r["gain_spearman"] = metrics.spearman(budgets, gain) if len(budgets) > 2 else float("nan")
        b0 = budgets[0]
        best = min(_mse(g, b0, meth) for meth in BASELINES if f"{b0}/{meth}" in g["cells"])
        r["low_budget_ratio"] = _mse(g, b0, "oddshap") / best
        out[name] = r
    return out


def claims(m: dict, c) -> list[results.Claim]:
    ids = m["identities"]
    games = m["games"]
    ratios = game_ratios(m, c)
    out = [
        results.at_most("walsh_shapley_identity", ids["walsh_max_err"], 1e-10),
        results.at_most("odd_component_sufficient", ids["odd_even_max_err"], 1e-10),
        results.at_most("paired_kernelshap_is_singleton_oddshap", float(np.nanmax(
            [g["singleton_identity"] for g in games.values()])), 1e-8),
        results.at_most("full_budget_exact", ids["full_budget_max_err"], 1e-8),
        results.at_most("efficiency_exact", float(np.nanmax(
            [g["efficiency_gap"] for g in games.values()] + [0.0])), 1e-8),
        results.at_most("proxy_spectrum_exact", max(ids["proxy_spectrum_jax"],
                                                     ids["proxy_spectrum_sklearn"]), 1e-10),
    ]
    recall = [cell["planted_recall"] for g in games.values() for cell in g["cells"].values()
              if "planted_recall" in cell]
    out.append(results.at_least("proxy_recovers_planted_odd",
                                float(np.mean(recall)) if recall else float("nan"), 0.9))
    wins = [r["vs_best_regression"] <= 0.5 for r in ratios.values() if "vs_best_regression" in r]
    out.append(results.at_least("win_rate_vs_best_regression",
                                float(np.mean(wins)) if wins else float("nan"), 0.75))
    wins = [r["vs_permutation"] <= 0.5 for r in ratios.values() if "vs_permutation" in r]
    out.append(results.at_least("win_rate_vs_permutation",
                                float(np.mean(wins)) if wins else float("nan"), 0.75))
    # claim "permutation_antithetic" (the list; not in the spec): the antithetic
    # permutation baseline pays for distinct coalitions exactly like every other method —
    # max over its cells of |m - budget spent| (repeated prefixes cached, not re-paid)
    gaps = [max(abs(int(k.split("/")[0]) - cell["budget_spent_min"]),
                abs(int(k.split("/")[0]) - cell["budget_spent_max"]))
            for g in games.values() for k, cell in g["cells"].items()
            if k.endswith("/permutation_antithetic")]
    out.append(results.at_most("permutation_antithetic",
                               float(max(gaps)) if gaps else float("nan"), 1.0))
    grows = [r["gain_spearman"] > 0 for r in ratios.values() if np.isfinite(r["gain_spearman"])]
    out.append(results.at_least("gain_grows_with_budget",
                                float(np.mean(grows)) if grows else float("nan"), 0.75))
    low = [r["low_budget_ratio"] for r in ratios.values()]
    out.append(results.at_most("low_budget_ratio_to_best",
                               float(np.median(low)) if low else float("nan"), 2.0))
    abl = m.get("ablations", {})
    rows = [row for g in abl.values() for row in g.values()]
    pair = metrics.geomean([r["unpaired"] / r["oddshap"] for r in rows]) if rows else np.nan
    supp = metrics.geomean([r["random_odd"] / r["oddshap"] for r in rows]) if rows else np.nan
    out.append(results.at_least("pairing_ablation_ratio", float(pair), 1.5))
    out.append(results.at_least("proxy_support_ablation_ratio", float(supp), 2.0))
    return out


def strip_arrays(m: dict) -> dict:
    def strip(d):
        if isinstance(d, dict):
            return {k: strip(v) for k, v in d.items() if k not in _HEAVY}
        return d
    return strip(m)


def figures(workdir: str, m: dict, c) -> list[str]:
    """mse_vs_budget_<game>.png (log-log, 95 % CI bands), gain_vs_budget.png,
    ablations.png."""
    out = []
    for name, g in m["games"].items():
        budgets = [int(b) for b in g["budgets"]]
        fig, ax = plotting.figure(1, 1, size=(4.2, 3.2))
        for i, method in enumerate(c.methods):
            mean = np.array([_mse(g, b, method) for b in budgets])
            ci = np.array([g["cells"][f"{b}/{method}"]["mse_ci95"] for b in budgets])
            ax.loglog(budgets, mean, "o-", color=f"C{i}", label=method, ms=3)
            ax.fill_between(budgets, np.maximum(mean - ci, mean * 1e-3), mean + ci,
                            color=f"C{i}", alpha=0.15)
        ax.set_xlabel("budget m (coalitions)")
        ax.set_ylabel("MSE vs exact Shapley")
        ax.set_title(f"{name} (n = {g['n']})", fontsize=9)
        ax.legend(fontsize=6)
        out.append(plotting.save(fig, os.path.join(workdir, f"mse_vs_budget_{name}.png")))
    from icml26_jax.oddshap.train import is_high_budget

    # Left: claim 8's ratio at every budget (filled markers: the high budgets it averages
    # over). Right: claim 10's gain over paired KernelSHAP, which should grow with m.
    fig, axes = plotting.figure(1, 2, size=(3.9, 3.4), sharey=True)
    for i, (name, g) in enumerate(m["games"].items()):
        n, budgets = int(g["n"]), [int(b) for b in g["budgets"]]
        step = np.arange(len(budgets)) + 1
        best = [min(_mse(g, b, "kernelshap_paired"), _mse(g, b, "leverageshap"))
                / _mse(g, b, "oddshap") for b in budgets]
        paired = [_mse(g, b, "kernelshap_paired") / _mse(g, b, "oddshap") for b in budgets]
        high = np.array([is_high_budget(n, b, float(c.eta)) for b in budgets])
        for ax, gain in zip(axes, (np.array(best), np.array(paired))):
            ax.semilogy(step, gain, "-", color=f"C{i % 10}", lw=1,
                        label=f"{name} (n = {n})")
            ax.semilogy(step[high], gain[high], "o", color=f"C{i % 10}", ms=4)
            ax.semilogy(step[~high], gain[~high], "o", color=f"C{i % 10}", ms=4, mfc="none")
    fracs = ", ".join(f"{100 * float(f):g}" for f in c.budget_fracs)
    mults = ", ".join(f"{int(k)}" for k in c.budget_mults)
    for ax, title in zip(axes, ("over the best regression\n(claim 8)",
                                "over paired KernelSHAP\n(claim 10)")):
        ax.axhline(1.0, color="k", lw=0.6, label="equal MSE")
        ax.set_xticks(np.arange(max(len(c.budget_fracs), len(c.budget_mults))) + 1)
        ax.set_xlabel("budget step")
        ax.set_title(f"MSE gain of OddSHAP {title}", fontsize=8)
    fig.supxlabel(f"budget step k: m = {fracs} % of 2^n (n <= 16), or {mults} x n (n >= 30)",
                  fontsize=7)
    axes[0].axhline(2.0, color="k", lw=0.8, ls="--",
                    label="claim 8: gain >= 2 (MSE <= 0.5x)\nat high budgets (filled)")
    axes[0].set_ylabel("MSE baseline / MSE OddSHAP (> 1: better)")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", fontsize=6)
    out.append(plotting.save(fig, os.path.join(workdir, "gain_vs_budget.png")))
    abl = m.get("ablations", {})
    if abl:
        fig, ax = plotting.figure(1, 1, size=(5, 3.2))
        labels, vals = [], {"unpaired": [], "random_odd": []}
        for gname, rows in abl.items():
            for mm, row in rows.items():
                labels.append(f"{gname}\nm={mm}")
                for k in vals:
                    vals[k].append(row[k] / row["oddshap"])
        x = np.arange(len(labels))
        ax.bar(x - 0.2, vals["unpaired"], 0.4, label="unpaired sampling")
        ax.bar(x + 0.2, vals["random_odd"], 0.4, label="random odd support")
        ax.set_yscale("log")
        ax.axhline(1.0, color="k", lw=0.6)
        ax.set_xticks(x, labels, fontsize=6)
        ax.set(xlabel="game and budget m", ylabel="MSE ratio to OddSHAP")
        ax.legend(fontsize=7)
        out.append(plotting.save(fig, os.path.join(workdir, "ablations.png")))
    return out
