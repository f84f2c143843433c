"""Tables and figures of a scaling run: ``isoflop.png`` (validation loss vs N per budget and
family, floor H dashed), ``pareto.png`` (oracle Gen-PPL vs NFE and vs tokens/s) and, with
>= 3 budgets, ``scaling_fits.png`` (N*(C) and L*(C) - H with their power laws)."""

from __future__ import annotations

import os

import numpy as np

from icml26_jax.core import plotting, results

LABELS = {"ar": "AR", "mdlm": "MDLM (NELBO)", "mdlm_lowvar": "MDLM (low-var)", "duo": "Duo",
          "esolm": "Eso-LM"}
COLORS = {"ar": "k", "mdlm": "tab:orange", "mdlm_lowvar": "tab:red", "duo": "tab:blue",
          "esolm": "tab:green"}


def tables(m: dict) -> str:
    """Plain-text IsoFLOP, MDLM-pair and Pareto tables."""
    out = []
    for C, fams in m["isoflop"].items():
        rows = []
        for f, e in fams.items():
            for s, n, loss, seeds in zip(e["size"], e["N"], e["loss"], e["seeds"]):
                sd = float(np.std(seeds, ddof=1)) if len(seeds) > 1 else float("nan")
                rows.append([LABELS[f], s, n, loss, sd, len(seeds)])
        out.append(results.format_table(
            rows, ["family", "size", "N", "val loss", "seed sd", "seeds"], floatfmt=".4f",
            title=f"IsoFLOP C = {C} (floor H = {m['floor']:.4f} +- {m['floor_se']:.4f})"))
    for C, d in m["lowvar_minus_nelbo"].items():
        rows = [[s, float(np.mean(v))] + [float(x) for x in v] for s, v in d.items()]
        n = max(len(v) for v in d.values())
        out.append(results.format_table(
            rows, ["size", "mean"] + [f"seed {i}" for i in range(n)], floatfmt="+.4f",
            title=f"Low-var minus NELBO-trained MDLM, validation NELBO, C = {C}"))
    for C, p in m["pareto"].items():
        rows = []
        for f, d in p.items():
            for i in range(len(d["T"])):
                rows.append([LABELS[f], int(d["T"][i]), int(d["nfe"][i]), d["gen_ppl"][i],
                             d["unigram"][i], d["bigram"][i], d["invalid"][i],
                             d["tokens_per_s"][i]])
        for k, q in m.get("reference", {}).items():
            rows.append([f"({k} samples)", "", "", q["gen_ppl"], q["unigram"], q["bigram"],
                         q["invalid"], ""])
        out.append(results.format_table(
            rows, ["family", "T", "NFE", "oracle Gen-PPL", "unigram H", "bigram H", "invalid",
                   "tok/s"],
            floatfmt=".3f", title=f"Pareto C = {C} (data unigram H {m['data_unigram']:.3f}); "
                                  f"frontier: {', '.join(m['frontier'].get(C, []))}"))
    return "\n\n".join(out)


def figures(m: dict, workdir: str) -> list[str]:
    """Writes the figures; returns their paths."""
    from matplotlib import ticker

    names = []
    budgets = list(m["isoflop"])
    fig, axes = plotting.figure(1, len(budgets), squeeze=False)
    for ax, C in zip(axes[0], budgets):
        for f, e in m["isoflop"][C].items():
            ax.plot(e["N"], e["loss"], "o-", color=COLORS[f], label=LABELS[f])
        ax.axhline(m["floor"], color="gray", ls="--", label="floor H")
        ax.set_xscale("log")
        sizes = sorted({int(n) for e in m["isoflop"][C].values() for n in e["N"]})
        ax.set_xticks(sizes, [f"{n / 1e3:.0f}k" for n in sizes])
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel("non-embedding parameters N")
        ax.set_ylabel("validation NELBO / NLL (nats/token)")
        ax.set_title(f"training budget C = {C} FLOPs")
    axes[0][0].legend(fontsize=7)
    names.append(plotting.save(fig, os.path.join(workdir, "isoflop.png")))
    if m["pareto"]:
        C = list(m["pareto"])[-1]
        fig, axes = plotting.figure(1, 2)
        for f, d in m["pareto"][C].items():
            for ax, x in zip(axes, (d["nfe"], d["tokens_per_s"])):
                ax.plot(x, d["gen_ppl"], "o-", color=COLORS[f], label=LABELS[f])
        axes[0].set_xlabel("NFE (network evaluations per sample)")
        axes[1].set_xlabel("tokens / s (batch of samples, compile excluded)")
        for ax in axes:
            ax.set_xscale("log")
            ax.set_ylabel("oracle Gen-PPL (HMM)")
            ax.axhline(np.exp(m["floor"]), color="gray", ls="--",
                       label="exp(H): the language's own")
        # The NFE values themselves as ticks (the default log ticks overlap within a decade).
        nfe = []
        for v in sorted({int(v) for d in m["pareto"][C].values() for v in d["nfe"]}):
            if not nfe or v > 1.15 * nfe[-1]:  # 64 (AR) and 65 (T = 64) share a tick
                nfe.append(v)
        axes[0].set_xticks(nfe, [str(v) for v in nfe])
        for ax in axes:
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        axes[0].set_title(f"Pareto, C = {C}")
        axes[0].legend(fontsize=7)
        names.append(plotting.save(fig, os.path.join(workdir, "pareto.png")))
    if "power_laws" in m:
        fig, axes = plotting.figure(1, 2)
        cs = np.asarray(m["budgets"], np.float64)
        for f, pl in m["power_laws"].items():
            ls = [m["l_star"][f"{C:.3g}"].get(f, np.nan) for C in cs]
            ns = [m["fits"][f"{C:.3g}"].get(f, {}).get("n_star", np.nan) for C in cs]
            axes[0].plot(cs, ns, "o", color=COLORS[f], label=LABELS[f])
            axes[1].plot(cs, np.asarray(ls) - m["floor"], "o", color=COLORS[f])
            if "n_star" in pl:
                axes[0].plot(cs, np.exp(pl["n_star"]["intercept"]) * cs ** pl["n_star"]["slope"],
                             "-", color=COLORS[f])
            if "l_star" in pl:
                axes[1].plot(cs, np.exp(pl["l_star"]["intercept"]) * cs ** pl["l_star"]["slope"],
                             "-", color=COLORS[f])
        for ax, lab in zip(axes, ("N*", "L* - H")):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("C (FLOPs)")
            ax.set_ylabel(lab)
        axes[0].legend(fontsize=7)
        names.append(plotting.save(fig, os.path.join(workdir, "scaling_fits.png")))
    return names
