"""Tables and figures of a Rank-Learner run: ``toc_curves.png``, ``e2_degradation.png`` and
``paired_diffs.png``."""

from __future__ import annotations

import os

import numpy as np

from icml26_jax.core import plotting, results
from icml26_jax.rank_learner import train

COLORS = {"oracle": "k", "rank": "C3", "plugin": "C0", "dr": "C2", "t": "C1"}


def table(out: dict) -> str:
    """Per DGP and method: mean (sd) test AUTOC over seeds, AUTOC / oracle, policy value,
    DR-approximate AUTOC, Kendall tau, and Rank-Learner's win count; then E2."""
    rows = []
    for dgp, r in out.get("e1", {}).items():
        rank = np.asarray(r["methods"]["rank"]["autoc"])
        for m in train.METHODS:
            ev = r["methods"][m]
            a = np.asarray(ev["autoc"])
            wins = None if m in ("rank", "oracle") else f"{int(np.sum(rank > a))}/{len(a)}"
            rows.append([dgp, train.LABELS[m], f"{a.mean():.4f} ({a.std():.4f})",
                         float(np.mean(ev["ratio"])), float(np.mean(ev["pv"])),
                         float(np.mean(ev["approx_autoc"])), float(np.mean(ev["kendall"])),
                         wins])
    text = results.format_table(rows, ["dgp", "method", "AUTOC (sd)", "/oracle", "PV",
                                       "approx AUTOC", "Kendall", "Rank wins"],
                                title="E1, learned nuisances (test set, mean over seeds)",
                                floatfmt=".4f") if rows else ""
    e2 = out.get("e2")
    if e2 is not None:
        rows = []
        oracle = float(np.mean(e2["oracle"]["autoc"]))
        for mode in ("mu", "both"):
            if mode not in e2:
                continue
            r = e2[mode]
            for i, d in enumerate(np.asarray(r["deltas"])):
                cell = lambda m: float(np.mean(r[m]["autoc"][i])) if m in r else None  # noqa
                diff = np.asarray(r["rank"]["autoc"][i]) - np.asarray(r["plugin"]["autoc"][i])
                rows.append([mode, float(d), oracle, cell("rank"), cell("plugin"), cell("dr"),
                             cell("t"), f"{int(np.sum(diff > 0))}/{len(diff)}",
                             float(np.mean(r["clip_frac"][i]))])
        text += "\n\n" + results.format_table(
            rows, ["mode", "delta", "oracle", "Rank", "plug-in", "DR", "T",
                   "Rank > plug-in", "clipped"],
            title="E2, oracle nuisances perturbed along b(x) (mean test AUTOC)",
            floatfmt=".4f")
    return text


def figures(out: dict, workdir: str) -> list[str]:
    """Writes the run's PNGs into ``workdir``; returns their paths."""
    paths = []
    e1 = out.get("e1", {})
    if e1:
        fig, axes = plotting.figure(1, len(e1), size=(4.2, 3.4))
        axes = np.atleast_1d(axes)
        for ax, (dgp, r) in zip(axes, e1.items()):
            for m in train.METHODS:
                toc = np.asarray(r["toc"][m])
                q = np.linspace(0, 1, len(toc) + 1)[1:]
                ax.plot(q, toc, color=COLORS[m], label=train.LABELS[m],
                        ls="--" if m == "oracle" else "-")
            ax.set(title=f"TOC, {dgp}", xlabel="fraction treated (top by score)",
                   ylabel="mean tau in top - ATE")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        paths.append(plotting.save(fig, os.path.join(workdir, "toc_curves.png")))

        fig, axes = plotting.figure(1, len(e1), size=(4.2, 3.4))
        axes = np.atleast_1d(axes)
        for ax, (dgp, r) in zip(axes, e1.items()):
            rank = np.asarray(r["methods"]["rank"]["autoc"])
            base = ("plugin", "dr", "t")
            for k, m in enumerate(base):
                diff = rank - np.asarray(r["methods"][m]["autoc"])
                ax.scatter(np.full(len(diff), k) + np.linspace(-0.15, 0.15, len(diff)), diff,
                           color=COLORS[m], s=14)
                ax.hlines(diff.mean(), k - 0.25, k + 0.25, color=COLORS[m])
            ax.axhline(0, color="k", lw=0.8)
            ax.set_xticks(range(len(base)), [f"Rank - {train.LABELS[m]}" for m in base],
                          fontsize=7)
            ax.set(title=f"paired AUTOC differences, {dgp}", xlabel="comparison (bar: mean)",
                   ylabel="per-seed AUTOC difference")
        paths.append(plotting.save(fig, os.path.join(workdir, "paired_diffs.png")))
    e2 = out.get("e2")
    if e2 is not None and "mu" in e2:
        r = e2["mu"]
        d = np.asarray(r["deltas"])
        fig, ax = plotting.figure()
        ax.axhline(float(np.mean(e2["oracle"]["autoc"])), color="k", ls="--", label="oracle")
        for m in ("rank", "plugin", "t"):
            a = np.asarray(r[m]["autoc"])
            ax.errorbar(d, a.mean(1), yerr=a.std(1), color=COLORS[m], marker="o", capsize=3,
                        label=f"{train.LABELS[m]} (mu)")
        if "both" in e2:
            b = e2["both"]
            for m, mk in (("rank", "s"), ("plugin", "s"), ("dr", "D")):
                ax.scatter(np.asarray(b["deltas"]), np.asarray(b[m]["autoc"]).mean(1),
                           color=COLORS[m], marker=mk, facecolors="none", s=50,
                           label=f"{train.LABELS[m]} (both)")
        n_seeds = np.asarray(r["rank"]["autoc"]).shape[1]
        ax.set(xlabel="perturbation size delta (nuisance shifted by delta · b(x))",
               ylabel=f"test AUTOC (mean over {n_seeds} data seeds)",
               title="E2: nuisance error along the confounding\n(bars: ± 1 sd over data seeds)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        paths.append(plotting.save(fig, os.path.join(workdir, "e2_degradation.png")))
    return paths
