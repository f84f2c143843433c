"""Tables and figures of a simplicity-bias run: ``overlap_vs_n_over_d.png``,
``cumulant_escape.png``, ``escape_scaling.png``, ``correlated.png``, ``exponents.png`` and
``digits_clone_gap.png``."""

from __future__ import annotations

import os

import numpy as np

from icml26_jax.core import plotting, results


def dims_of(runs: dict) -> list[int]:
    """The dimensions of a part's ``{"d<d>": run}`` dict, ascending."""
    return sorted(int(k[1:]) for k in runs)


def _med(m):
    return np.median(np.abs(np.asarray(m)), axis=0)


def table(met: dict) -> str:
    """Plain-text tables of the metrics (per d escape times and overlaps, exponents,
    digits losses)."""
    out = []
    if "pairwise" in met:
        p = met["pairwise"]
        rows = [[d, n, n / d] for d, n in zip(p["dims"], p["n_star_u"])]
        out.append(results.format_table(
            rows, ["d", "n*_u", "n*_u/d"], floatfmt=".3g",
            title=f"Pair-wise spike (link both, delta = 1/d): slope {p['slope']:.3f}, "
                  f"curve spread {p['collapse_spread']:.3f}"))
    if "cumulant" in met:
        p = met["cumulant"]
        rows = [[d, n, a, b, s] for d, n, a, b, s in zip(
            p["dims"], p["n_star_v"], p["n_star_v_over_d3"], p["n_star_v_over_d2"],
            p["steps_run_over_d3"])]
        out.append(results.format_table(
            rows, ["d", "n*_v", "n*_v/d^3", "n*_v/d^2", "ran/d^3"], floatfmt=".3g",
            title=f"Fourth-cumulant spike (beta_u = 0, link v, delta = 2/d^2): slope "
                  f"{p['slope']:.3f}, (n*/d^2)(d_max)/(n*/d^2)(d_min) "
                  f"{p['superquadratic_ratio']:.2f}"))
    if "linear_budget" in met:
        p = met["linear_budget"]
        rows = [list(r) for r in zip(p["dims"], p["m_u"], p["m_v"], p["m_v_sqrt_d"],
                                     p["init_m_v_sqrt_d"])]
        out.append(results.format_table(
            rows, ["d", "m_u", "m_v", "m_v sqrt(d)", "init m_v sqrt(d)"], floatfmt=".3f",
            title="Linear budget n = 100 d (independent latents, link both)"))
    if "correlated" in met:
        cor = met["correlated"]
        rows = []
        for lat in ("independent", "nonlinear", "sign"):
            if lat in cor:
                for d, mu, mv in zip(cor[lat]["dims"], cor[lat]["m_u"], cor[lat]["m_v"]):
                    rows.append([lat, d, mu, mv])
        title = "Correlated latents (n = 150 d, delta = 0.25/d; sign: n = 50 d, delta = 1/d)"
        if "sign" in cor:
            title += f"; PCA leakage of v under sign: {cor['sign']['pca_overlap_v']:.3f}"
        out.append(results.format_table(rows, ["latents", "d", "m_u", "m_v"], floatfmt=".3f",
                                        title=title))
    if "exponent" in met:
        rows = [[k, v] for k, v in met["exponent"].items()]
        out.append(results.format_table(rows, ["case", "fitted k"], floatfmt=".4f",
                                        title="Diffusion information exponents (quadrature)"))
    if "images" in met:
        im = met["images"]
        rows = [[b, lr, lw, lr / lw, lc, lwc, lc / lwc, g, gp] for b, lr, lw, lc, lwc, g, gp in
                zip(im["b_levels"], im["L_real"], im["L_W"], im["L_clone"], im["L_W_clone"],
                    im["final_gap"], im["gaussian_phase_gap"])]
        out.append(results.format_table(
            rows, ["b", "L_real", "L_W", "real/W", "L_clone", "L_W,clone", "clone/W",
                   "final gap", "Gauss-phase gap"], floatfmt=".3f",
            title=f"Clone test on {im['source']} ({im['steps']} steps)"))
    return "\n\n".join(out)


def figures(out: dict, met: dict, c, workdir: str) -> list[str]:
    """Writes the run's PNGs into ``workdir``; returns their paths."""
    paths = []
    if "pairwise" in out:
        runs = out["pairwise"]
        fig, ax = plotting.figure(size=(5, 3.6))
        for d in dims_of(runs):
            r = runs[f"d{d}"]
            ax.plot(r["ns"] / d, _med(r["m_u"]), label=f"d = {d}")
        ax.axhline(float(c.thr), color="k", lw=0.8, ls=":")
        ax.set(xscale="log", xlabel="n / d", ylabel="median |m_u|",
               title="Pair-wise spike: curves collapse in n / d")
        ax.legend(fontsize=8)
        paths.append(plotting.save(fig, os.path.join(workdir, "overlap_vs_n_over_d.png")))
    if "cumulant" in out:
        runs = out["cumulant"]
        fig, ax = plotting.figure(size=(5, 3.6))
        for d in dims_of(runs):
            r = runs[f"d{d}"]
            ax.plot(r["ns"] / d ** 3, _med(r["m_v"]), label=f"d = {d}")
        ax.axhline(float(c.thr), color="k", lw=0.8, ls=":")
        ax.set(xscale="log", xlabel="n / d^3", ylabel="median |m_v|",
               title="Fourth-cumulant spike: escape at n ~ d^3")
        ax.legend(fontsize=8)
        paths.append(plotting.save(fig, os.path.join(workdir, "cumulant_escape.png")))
    if "pairwise" in met or "cumulant" in met:
        fig, ax = plotting.figure(size=(5, 3.6))
        for name, key, ref, col in (("pairwise", "n_star_u", 1, "C0"),
                                    ("cumulant", "n_star_v", 3, "C3")):
            if name not in met:
                continue
            dims = np.asarray(met[name]["dims"], float)
            ns = np.asarray(met[name][key], float)
            ok = np.isfinite(ns)
            ax.loglog(dims[ok], ns[ok], "o-", color=col,
                      label=f"{name}: slope {met[name]['slope']:.2f}")
            if ok.any():
                d0, n0 = dims[ok][0], ns[ok][0]
                ax.loglog(dims, n0 * (dims / d0) ** ref, "--", color=col, lw=0.8,
                          label=f"slope {ref} (theory)")
        ax.set(xlabel="input dimension d", ylabel="escape time n* (training samples)",
               title="Sample complexity of the spikes")
        ax.legend(fontsize=8)
        paths.append(plotting.save(fig, os.path.join(workdir, "escape_scaling.png")))
    if "correlated" in out:
        cor = out["correlated"]
        lats = [k for k in ("independent", "nonlinear", "sign") if k in cor]
        fig, axes = plotting.figure(1, len(lats), size=(4, 3.4), sharey=True)
        for ax, lat in zip(np.atleast_1d(axes), lats):
            for d in dims_of(cor[lat]):
                r = cor[lat][f"d{d}"]
                ax.plot(r["ns"] / d, _med(r["m_v"]), label=f"d = {d}")
            if lat == "sign":
                ax.axhline(met["correlated"]["sign"]["pca_overlap_v"], color="k", ls=":",
                           lw=0.8, label="PCA leakage")
            ax.set(xscale="log", xlabel="n / d", title=f"{lat} latents")
            ax.legend(fontsize=7)
        np.atleast_1d(axes)[0].set_ylabel("median |m_v|")
        paths.append(plotting.save(fig, os.path.join(workdir, "correlated.png")))
    if "exponent" in out:
        e = out["exponent"]
        fig, ax = plotting.figure(size=(5, 3.6))
        for name, v in e.items():
            if name == "m":
                continue
            ax.loglog(e["m"], np.abs(v["delta_loss"]), "o-", ms=3,
                      label=f"{name}: k = {v['k']:.2f}")
        ax.set(xlabel="overlap m", ylabel="|L(m) - L(0)|",
               title="Diffusion information exponents")
        ax.legend(fontsize=7)
        paths.append(plotting.save(fig, os.path.join(workdir, "exponents.png")))
    if "images" in out:
        im = out["images"]
        steps = np.maximum(np.asarray(im["steps"]), 1)
        fig, axes = plotting.figure(1, 2, size=(4.6, 3.5))
        for j, b in enumerate(im["b_levels"]):
            axes[0].plot(steps, im["gap"][:, j], label=f"b = {b:g}")
            axes[1].plot(steps, im["L_real"][:, j] / im["L_W"][j], color=f"C{j}",
                         label=f"real, b = {b:g}")
            axes[1].plot(steps, im["L_clone"][:, j] / im["L_W_clone"][j], color=f"C{j}",
                         ls="--")
        axes[0].axhline(0, color="k", lw=0.8)
        axes[0].set(xscale="log", xlabel="training step", ylabel="(L_clone - L_real) / L_real",
                    title="Clone gap")
        axes[1].axhline(1, color="k", lw=0.8)
        axes[1].set(xscale="log", xlabel="training step", ylabel="loss / Wiener loss",
                    title="real (solid) and clone (dashed) vs Wiener")
        axes[0].legend(fontsize=7)
        axes[1].legend(fontsize=7)
        paths.append(plotting.save(fig, os.path.join(workdir, "digits_clone_gap.png")))
    return paths
