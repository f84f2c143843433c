"""Claims, metric tables, figures and the printed summary of a DSGD-HP run.

Everything here is computed from the sweeps' measured arrays (float64 NumPy); a claim whose
sweep did not run is not evaluated, and a failing claim is reported as failing.
"""

from __future__ import annotations

import os

import numpy as np

from icml26_jax.core import plotting, results
from icml26_jax.dsgd_hp import metrics as M


def _q(x, p):
    return float(np.quantile(np.asarray(x, dtype=np.float64), p))


def doubling_checkpoints(ts, T) -> np.ndarray:
    """Indices of the log steps ``T / 2^j`` (the checkpoints of the spec's tables)."""
    ts = np.asarray(ts)
    ratio = T / ts
    return np.flatnonzero(np.isclose(np.log2(ratio), np.round(np.log2(ratio))))


def _slope_dict(xs, samples, p, c):
    s, lo, hi = M.slope_ci(xs, samples, p, n_boot=c.n_boot, seed=c.seed)
    return {"slope": s, "ci95": [lo, hi]}


def transient_table(c, tr):
    """rho_g(t) = q(DSGD gap)/q(centralized gap) [N, G, K] and T_trans per (n, graph)."""
    p = c.quantile
    q = np.quantile(tr["gap_mean"], p, axis=-1)  # [N, G+1, K]
    rho = q[:, :-1] / q[:, -1:]
    idx = doubling_checkpoints(tr["ts"], c.transient.T)
    ttrans = [[M.transient_time(rho[i, g, idx], tr["ts"][idx], c.transient.tol)
               for g in range(rho.shape[1])] for i in range(rho.shape[0])]
    return rho, idx, ttrans


def evaluate(c, done: dict):
    """Metrics (quantile tables, slopes with CIs) and the spec's claims from the sweeps."""
    p, tag = c.quantile, f"q{round(100 * c.quantile)}"
    m, claims = {}, []
    if "speedup" in done:
        sp = done["speedup"]
        ns, ts = sp["ns"], sp["ts"]
        m["speedup"] = {
            "n": ns.tolist(),
            f"gap_{tag}": [_q(g, p) for g in sp["gap_mean"][:, -1]],
            "gap_q99": [_q(g, 0.99) for g in sp["gap_mean"][:, -1]],
            f"worst_user_{tag}": [_q(g, p) for g in sp["gap_worst"][:, -1]],
            f"central_{tag}": [_q(g, p) for g in sp["central"][:, -1]],
            f"slope_{tag}": _slope_dict(ns, sp["gap_mean"][:, -1], p, c),
            "slope_q99": _slope_dict(ns, sp["gap_mean"][:, -1], 0.99, c),
            f"slope_worst_user_{tag}": _slope_dict(ns, sp["gap_worst"][:, -1], p, c),
        }
        idx = doubling_checkpoints(ts, c.speedup.T)
        m["rate"] = {"t": ts[idx].tolist(),
                     f"gap_{tag}_n{ns[-1]}": [_q(g, p) for g in sp["gap_mean"][-1, idx]],
                     f"slope_{tag}": _slope_dict(ts[idx], sp["gap_mean"][-1, idx], p, c)}
        if c.variant == "full":  # enough runs (1024) for the q0.99 slope to be claims-grade
            claims.append(results.in_range("speedup_slope_q99",
                                           m["speedup"]["slope_q99"]["slope"], -1.15, -0.85))
        claims += [
            results.in_range(f"speedup_slope_{tag}", m["speedup"][f"slope_{tag}"]["slope"],
                             -1.15, -0.85),
            results.in_range(f"speedup_slope_worst_user_{tag}",
                             m["speedup"][f"slope_worst_user_{tag}"]["slope"], -1.15, -0.80),
            results.in_range(f"rate_slope_{tag}", m["rate"][f"slope_{tag}"]["slope"],
                             -1.15, -0.85),
        ]
    if "network" in done:
        nw = done["network"]
        gap, cq = nw["gap_mean"][:, -1], _q(nw["gap_mean"][-1, -1], p)
        m["network"] = {
            name: {"lam": float(nw["lam"][g]), "gap": float(1 - nw["lam"][g]),
                   "gap_q50": _q(gap[g], 0.5), f"gap_{tag}": _q(gap[g], p),
                   "gap_q99": _q(gap[g], 0.99),
                   f"worst_user_{tag}": _q(nw["gap_worst"][g, -1], p),
                   "ratio_to_central": _q(gap[g], p) / cq,
                   "consensus_q50": _q(nw["consensus"][g, -1], 0.5)}
            for g, name in enumerate(c.network.graphs)}
        m["network"]["centralized"] = {"gap_q50": _q(gap[-1], 0.5), f"gap_{tag}": cq,
                                       "gap_q99": _q(gap[-1], 0.99)}
    if "transient" in done:
        tr = done["transient"]
        rho, idx, ttrans = transient_table(c, tr)
        graphs = list(c.transient.graphs)
        ts = tr["ts"]
        m["transient"] = {
            "n": tr["ns"].tolist(), "t": ts[idx].tolist(),
            "rho": {g: rho[:, j, idx].tolist() for j, g in enumerate(graphs)},
            "T_trans": {g: [ttrans[i][j][0] for i in range(len(tr["ns"]))]
                        for j, g in enumerate(graphs)},
            "censored": {g: [ttrans[i][j][1] for i in range(len(tr["ns"]))]
                         for j, g in enumerate(graphs)},
            "n_over_gap_sq": {g: (tr["ns"] / (1 - tr["lam"][:, j]) ** 2).tolist()
                              for j, g in enumerate(graphs)},
        }
        ring, ex = graphs.index("ring"), graphs.index("exp")
        late = ts[idx] >= c.transient.T / 4
        claims += [
            results.at_most("ring_ratio_decreasing_in_t",
                            np.max(rho[:, ring, idx[-1]] / rho[:, ring, idx[0]]), 0.7),
            results.at_least("ring_ratio_increasing_in_n",
                             np.min(rho[1:, ring, idx[-1]] / rho[:-1, ring, idx[-1]]), 1.5),
            results.at_most("exp_matches_centralized", np.max(rho[:, ex, idx[late]]), 1.10),
            results.at_most("transient_exp_before_ring",
                            max(ttrans[i][ex][0] / ttrans[i][ring][0]
                                for i in range(len(tr["ns"]))), 0.5),
        ]
    if "tails" in done:
        tl = done["tails"]
        fits = {kind: M.tail_fit(tl["gap_final"][k], tl["deltas"])._asdict()
                for k, kind in enumerate(c.tails.noises)}
        m["tails"] = {"deltas": tl["deltas"].tolist(), **fits,
                      "quantiles": {kind: np.quantile(tl["gap_final"][k], 1 - tl["deltas"]).tolist()
                                    for k, kind in enumerate(c.tails.noises)}}
        g, h = fits["gauss"], fits.get("heavy")
        claims += [results.at_least("light_tail_r2", g["r2"], 0.97),
                   results.at_most("light_tail_quantile_ratio", g["ratio_999_50"], 5.0)]
        if h is not None:
            claims.append(results.at_least("heavy_tail_control_separates",
                                           h["ratio_999_50"] / g["ratio_999_50"], 2.0))
    if "logreg" in done:
        lr = done["logreg"]
        idx = doubling_checkpoints(lr["ts"], c.logreg.T)
        m["logreg"] = {"n": lr["ns"].tolist(),
                       f"gap_{tag}": [_q(x, p) for x in lr["gap_mean"][:, -1]],
                       f"central_{tag}": [_q(x, p) for x in lr["central"][:, -1]],
                       f"slope_{tag}": _slope_dict(lr["ns"], lr["gap_mean"][:, -1], p, c),
                       f"rate_slope_{tag}_n{lr['ns'][-1]}": _slope_dict(
                           lr["ts"][idx], lr["gap_mean"][-1, idx], p, c)}
        claims.append(results.in_range(f"logreg_speedup_slope_{tag}",
                                       m["logreg"][f"slope_{tag}"]["slope"], -1.15, -0.85))
    if "nonconvex" in done:
        nc = done["nonconvex"]
        m["nonconvex"] = {"n": nc["ns"].tolist()}
        for s, split in enumerate(c.nonconvex.splits):
            g = nc["gradnorm"][s, :, 0, -1]  # DSGD, time-averaged ||grad f||^2 at T
            central = [_q(x, p) for x in nc["gradnorm"][s, :, 1, -1]]
            m["nonconvex"][split] = {
                f"gradnorm_{tag}": [_q(x, p) for x in g],
                f"central_{tag}": central,
                # > 1: the network/heterogeneity term of Theorem 1 (A^2 for label skew).
                "ratio_to_central": [_q(x, p) / cq for x, cq in zip(g, central)],
                f"slope_{tag}": _slope_dict(nc["ns"], g, p, c)}
        # The claim is the slope over n <= 16 (the spec's {1, 4, 16}); larger n (full: 64)
        # flattens on 1797 samples and is reported in the table and the all-n slope.
        small = nc["ns"] <= 16
        if "iid" in c.nonconvex.splits and small.sum() >= 2:
            s_iid = list(c.nonconvex.splits).index("iid")
            g = nc["gradnorm"][s_iid, small, 0, -1]
            m["nonconvex"]["iid"][f"slope_{tag}_n_le_16"] = _slope_dict(nc["ns"][small], g, p, c)
            claims.append(results.in_range(
                "nonconvex_speedup_slope",
                m["nonconvex"]["iid"][f"slope_{tag}_n_le_16"]["slope"], -0.75, -0.35))
    if "rate_hetero" in done:
        rh = done["rate_hetero"]
        idx = doubling_checkpoints(rh["ts"], c.rate_hetero.T)
        m["rate_hetero"] = {"t": rh["ts"][idx].tolist(), **{
            g: {f"gap_{tag}": [_q(x, p) for x in rh["gap_mean"][j, idx]],
                f"slope_{tag}": _slope_dict(rh["ts"][idx], rh["gap_mean"][j, idx], p, c)}
            for j, g in enumerate(list(c.rate_hetero.graphs) + ["centralized"])}}
    return m, claims


def summary(c, m: dict, claims) -> str:
    """The three tables: graphs at n = U, speed-up, claims."""
    tag = f"q{round(100 * c.quantile)}"
    out = []
    if "network" in m:
        rows = [[g, v.get("lam"), v.get("gap"), v["gap_q50"], v[f"gap_{tag}"], v["gap_q99"],
                 v.get(f"worst_user_{tag}"), v.get("ratio_to_central"), v.get("consensus_q50")]
                for g, v in m["network"].items()]
        out.append(results.format_table(
            rows, ["graph", "lambda", "1-lambda", "gap q50", f"gap {tag}", "gap q99",
                   f"worst {tag}", "ratio", "consensus"],
            title=f"(1) graphs at n = {c.users}, T = {c.network.T}, hetero = "
                  f"{c.network.hetero} (gap quantiles over {c.network.runs} runs)"))
    if "speedup" in m:
        sp = m["speedup"]
        rows = [[n, a, b, w, ce] for n, a, b, w, ce in zip(
            sp["n"], sp[f"gap_{tag}"], sp["gap_q99"], sp[f"worst_user_{tag}"],
            sp[f"central_{tag}"])]
        fmt = lambda d: f"{d['slope']:.3f} [{d['ci95'][0]:.3f}, {d['ci95'][1]:.3f}]"
        out.append(results.format_table(
            rows, ["n", f"gap {tag}", "gap q99", f"worst {tag}", f"central {tag}"],
            title=f"(2) speed-up on {c.speedup.graph}, T = {c.speedup.T}, "
                  f"{c.speedup.runs} runs") + (
            f"\n  slope {tag}: {fmt(sp[f'slope_{tag}'])}   slope q99: {fmt(sp['slope_q99'])}"
            f"   worst-user slope {tag}: {fmt(sp[f'slope_worst_user_{tag}'])}"))
    out.append("(3) claims\n" + results.claims_table(claims))
    held = sum(cl.holds for cl in claims)
    out.append(f"{held}/{len(claims)} claims hold")
    return "\n\n".join(out)


def _loglog(ax, x, y, label, **kw):
    ax.loglog(x, y, marker="o", label=label, **kw)


def plot_all(c, done: dict, workdir: str) -> list[str]:
    """Writes the figures of the sweeps that ran; returns their paths."""
    from matplotlib import ticker

    p, tag = c.quantile, f"q{round(100 * c.quantile)}"
    paths = []
    q = lambda a: np.quantile(a, p, axis=-1)
    if "speedup" in done:
        sp = done["speedup"]
        fig, ax = plotting.figure()
        ns = sp["ns"]
        _loglog(ax, ns, q(sp["gap_mean"][:, -1]), f"DSGD mean user {tag}")
        _loglog(ax, ns, q(sp["gap_worst"][:, -1]), f"DSGD worst user {tag}")
        _loglog(ax, ns, np.quantile(sp["gap_mean"][:, -1], 0.99, axis=-1), "DSGD q99")
        _loglog(ax, ns, q(sp["central"][:, -1]), f"centralized SGD {tag}", ls="--",
                mfc="none", ms=9)
        ax.loglog(ns, q(sp["gap_mean"][0, -1]) / ns, "k:", label="slope -1 (theory)")
        runs = sp["gap_mean"].shape[-1]
        ax.set(xlabel="users n", ylabel=f"optimality gap at T={c.speedup.T}\n"
               f"(quantile over {runs} runs)", title="HP linear speed-up")
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.legend(fontsize=7)
        paths.append(plotting.save(fig, os.path.join(workdir, "speedup.png")))
        fig, ax = plotting.figure()
        for i, n in enumerate(ns):
            _loglog(ax, sp["ts"], q(sp["gap_mean"][i]), f"n={n}", ms=3)
        ax.loglog(sp["ts"], q(sp["gap_mean"][-1, 0]) * sp["ts"][0] / sp["ts"], "k:",
                  label="slope -1")
        ax.set(xlabel="step t", ylabel=f"{tag} of gap", title="HP rate")
        ax.legend(fontsize=6, ncol=2)
        paths.append(plotting.save(fig, os.path.join(workdir, "rate.png")))
    if "tails" in done:
        tl = done["tails"]
        fig, ax = plotting.figure()
        x = np.log(1 / tl["deltas"])
        for k, kind in enumerate(c.tails.noises):
            qs = np.quantile(tl["gap_final"][k], 1 - tl["deltas"])
            ax.plot(x, qs / np.median(tl["gap_final"][k]), marker="o", label=kind)
        ax.set(xlabel="log(1/delta)", ylabel="q_{1-delta} / median", yscale="log",
               title=f"tails at n={c.tails.n}, T={c.tails.T}")
        ax.legend()
        paths.append(plotting.save(fig, os.path.join(workdir, "tails.png")))
    if "transient" in done:
        tr = done["transient"]
        rho, idx, _ = transient_table(c, tr)
        fig, ax = plotting.figure()
        for j, g in enumerate(c.transient.graphs):
            for i, n in enumerate(tr["ns"]):
                ax.loglog(tr["ts"][idx], rho[i, j, idx], marker="o", ls="-" if j == 0 else "--",
                          label=f"{g} n={n}")
        ax.axhline(c.transient.tol, color="k", lw=0.8, ls=":",
                   label=f"tolerance {c.transient.tol:g} (transient over)")
        ax.set(xlabel="step t", ylabel=f"{tag} gap, DSGD / centralized (ratio)",
               title="transient")
        # A log axis spanning less than a decade labels its minor ticks as "1.8×10⁰".
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%.3g"))
        lo, hi = ax.get_ylim()
        ax.yaxis.set_minor_formatter(ticker.FormatStrFormatter("%.3g") if hi < 10 * lo
                                     else ticker.NullFormatter())
        ax.set_xticks(tr["ts"][idx], [f"{t:g}" for t in tr["ts"][idx]], fontsize=7)
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.legend(fontsize=6, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.18))
        paths.append(plotting.save(fig, os.path.join(workdir, "transient.png")))
    if "logreg" in done:
        lr = done["logreg"]
        fig, ax = plotting.figure()
        _loglog(ax, lr["ns"], q(lr["gap_mean"][:, -1]), "DSGD (exp)")
        _loglog(ax, lr["ns"], q(lr["central"][:, -1]), "centralized", ls="--")
        ax.loglog(lr["ns"], q(lr["gap_mean"][0, -1]) / lr["ns"], "k:", label="slope -1")
        ax.set(xlabel="users n", ylabel=f"{tag} gap at T={c.logreg.T}",
               title="l2 logistic regression, digits")
        ax.legend(fontsize=7)
        paths.append(plotting.save(fig, os.path.join(workdir, "logreg.png")))
    if "nonconvex" in done:
        nc = done["nonconvex"]
        fig, ax = plotting.figure()
        for s, split in enumerate(c.nonconvex.splits):
            _loglog(ax, nc["ns"], q(nc["gradnorm"][s, :, 0, -1]), split)
        ax.loglog(nc["ns"], q(nc["gradnorm"][0, 0, 0, -1]) / np.sqrt(nc["ns"]), "k:",
                  label="slope -1/2")
        ax.set(xlabel="users n", ylabel=f"{tag} avg ||grad f||^2",
               title="non-convex logistic, digits")
        ax.legend(fontsize=7)
        paths.append(plotting.save(fig, os.path.join(workdir, "nonconvex.png")))
    return paths
