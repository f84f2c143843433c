"""Claims, metrics tables and figures of the ATC experiment (spec §Claims, §Experiment)."""

from __future__ import annotations

import math
import os

import numpy as np

from icml26_jax.atc_cusum import envs, metrics
from icml26_jax.core import plotting, results

# Learners of the G1 table, in print order.
SYNTH_METHODS = ("atc", "window", "discount", "fixed_conf", "page_running", "page_frozen",
                 "oracle", "window_hindsight", "discount_hindsight")


def _stats(r) -> dict:
    r = np.asarray(r, np.float64)
    half = 1.96 * r.std(ddof=1) / math.sqrt(len(r)) if len(r) > 1 else 0.0
    return {"mean": float(r.mean()), "ci": float(half)}


def _grid(suites):
    """``{(S, T): cell}`` of the synthetic suite."""
    out = {}
    for key, cell in suites["synthetic"].items():
        s, t = key.split("_")
        out[(int(s[1:]), int(t[1:]))] = cell
    return out


def _mean(v) -> float:
    return float(np.mean(v))


def evaluate(c, suites: dict) -> tuple[dict, list[results.Claim]]:
    """Metrics (means with 95% CIs over runs) and the claims of the suites that ran."""
    m, claims = {}, []
    sig2 = float(c.sigma) ** 2
    if "synthetic" in suites:
        grid = _grid(suites)
        Ss, Ts = sorted({k[0] for k in grid}), sorted({k[1] for k in grid})
        tab = {}
        for (S, T), cell in grid.items():
            row = {k: _stats(cell[k]) for k in SYNTH_METHODS}
            row.update(window_value=float(cell["window_value"]),
                       discount_value=float(cell["discount_value"]),
                       window_hindsight_value=float(cell["window_hindsight_value"]),
                       discount_hindsight_value=float(cell["discount_hindsight_value"]),
                       atc_alarms=_mean(cell["atc_alarms"]),
                       lower_bound=float(metrics.lower_bound_curve(S, T, c.sigma)))
            for peer in ("peers_atc", "adwin", "focus"):
                if peer in cell:
                    row[peer] = _stats(cell[peer])
            tab[f"S{S}_T{T}"] = row
        m["synthetic"] = tab
        R = {k: _mean(cell["atc"]) for k, cell in grid.items()}
        norm = {k: R[k] / (sig2 * (k[0] + 1) * math.log(k[1])) for k in R}
        lb = {k: R[k] / float(metrics.lower_bound_curve(*k, c.sigma)) for k in R}
        m["atc_regret_over_S1logT"] = {f"S{k[0]}_T{k[1]}": v for k, v in norm.items()}
        claims.append(results.at_most("atc_log_regret", max(norm.values()), 4))
        growth = max(R[(S, Ts[-1])] / R[(S, Ts[0])] for S in Ss)
        claims.append(results.at_most("atc_regret_growth_logarithmic", growth, 2.5))
        claims.append(results.at_most("atc_within_constant_of_lower_bound", max(lb.values()), 4))
        prefix = []
        for S in Ss:
            cell = grid[(S, Ts[-1])]
            t, St = np.asarray(cell["prefix_t"]), np.asarray(cell["prefix_changes"])
            prefix.append(np.max(np.asarray(cell["atc_prefix"])
                                 / (4 * sig2 * (St + 1) * np.log(t))))
        claims.append(results.at_most("atc_anytime_prefix_bound", max(prefix), 1))
        if 0 in Ss:
            lin = min((_mean(grid[(0, Ts[-1])][k]) / _mean(grid[(0, Ts[0])][k]))
                      / (Ts[-1] / Ts[0]) for k in ("fixed_conf", "page_running", "page_frozen"))
            claims.append(results.at_least("classical_detectors_linear_regret", lin, 0.5))
        if 4 in Ss:
            cell = grid[(4, Ts[-1])]
            worse = min(_mean(cell[k]) / _mean(cell["atc"]) for k in ("page_running", "page_frozen"))
            claims.append(results.at_least("page_cusum_worse_than_atc", worse, 3))
        beat = [_mean(grid[(S, Ts[-1])]["atc"]) / min(_mean(grid[(S, Ts[-1])]["window"]),
                                                       _mean(grid[(S, Ts[-1])]["discount"]))
                for S in Ss if S in (4, 16)]
        if beat:
            claims.append(results.at_most("atc_beats_tuned_baselines", max(beat), 0.85))
    if "selective" in suites:
        s = suites["selective"]
        d = np.asarray(s["deltas"])
        rate, reg = np.asarray(s["late_alarm_rate"]), np.asarray(s["atc"])
        i0 = int(np.flatnonzero(d == 0.0)[0])
        T = int(c.selective.T)
        m["selective"] = {"deltas": d, "late_alarm_rate": rate, "atc_regret": reg,
                          "atc_excess_regret": reg - reg[i0], "window_regret": np.asarray(s["window"]),
                          "window": int(c.selective.window)}
        tiny = [rate[i] - rate[i0] for i in range(len(d)) if d[i] in (0.02, 0.05)]
        if tiny:
            claims.append(results.at_most("selective_ignores_tiny_shifts", max(tiny), 0.15))
        large = rate[d >= 0.2]
        if large.size:
            claims.append(results.at_least("selective_detects_large_shifts", large.min(), 0.95))
        excess = np.max((reg - reg[i0]) / (2 * float(c.c) * math.log(T)))
        claims.append(results.at_most("selective_excess_regret_bounded", excess, 1))
    if "staircase" in suites:
        tab, norm = {}, []
        for key, cell in suites["staircase"].items():
            T = int(key[1:])
            S = (T - 1) // 200
            tab[key] = {k: _stats(v) for k, v in cell.items() if np.ndim(v)}
            tab[key].update(changes=S, window_value=float(cell["window_value"]))
            norm.append(_mean(cell["atc"]) / (sig2 * (S + 1) * math.log(T)))
        m["staircase"] = tab
        claims.append(results.at_most("atc_no_collapse_staircase", max(norm), 4))
    if "square" in suites:
        tab = {}
        for key, cell in suites["square"].items():
            tab[key] = {k: _stats(v) for k, v in cell.items() if np.ndim(v)}
            tab[key].update(changes=float(cell["changes"]),
                            discount_value=float(cell["discount_value"]),
                            window_value=float(cell["window_value"]))
        m["square"] = tab
        tmax = max(suites["square"], key=lambda k: int(k[1:]))
        cell = suites["square"][tmax]
        ratio = _mean(cell["atc"]) / _mean(cell["discount"])
        claims.append(results.at_most("atc_beats_discount_square_wave", ratio, 1, expected=False))
    if "real" in suites:
        r = suites["real"]
        m["real"] = {k: _real_metrics(v) for k, v in r.items()}
        claims.append(results.at_most("nile_break_located", _break_error(r["nile"], 1), 2))
        claims.append(results.at_most("nile_atc_beats_best_baseline",
                                      r["nile"]["atc_mse"] / r["nile"]["best_baseline_mse"], 0.95))
        claims.append(results.at_most("realint_breaks_located", _break_error(r["realint"], 2), 2))
        claims.append(results.at_most("realint_mse_within_10pct_of_best_baseline",
                                      r["realint"]["atc_mse"] / r["realint"]["best_baseline_mse"],
                                      1.10))
    if "csv" in suites:
        m["csv"] = {k: _real_metrics(v) for k, v in suites["csv"].items()}
    return m, claims


def _break_error(series: dict, k: int) -> float:
    """max |ATC segment start - LS break start| (in samples); inf unless exactly k alarms."""
    seg = np.sort(np.asarray(series["seg_start_index"]))
    if len(seg) != k:
        return math.inf
    return float(np.max(np.abs(seg - np.sort(np.asarray(series["ls_breaks"])))))


def _real_metrics(v: dict) -> dict:
    out = {k: v[k] for k in ("sigma_hat", "atc_mse", "best_baseline_mse", "best_window",
                             "best_discount")}
    out.update(alarms=len(v["alarm_index"]), alarm_index=np.asarray(v["alarm_index"]),
               seg_start_index=np.asarray(v["seg_start_index"]),
               window_mse=float(np.min(v["window_mse"])),
               discount_mse=float(np.min(v["discount_mse"])),
               mse_ratio=float(v["atc_mse"] / v["best_baseline_mse"]))
    for k in ("ls_breaks", "ls_fit_mse", "adwin_mse"):
        if k in v:
            out[k] = v[k]
    return out


# ------------------------------------------------------------------ figures


def plots(c, suites: dict, workdir: str) -> list[str]:
    """Writes the PNGs of the suites that ran; returns their paths."""
    paths = []
    if "synthetic" in suites:
        grid = _grid(suites)
        fig, ax = plotting.figure(size=(5.0, 3.8))
        Ts = sorted({k[1] for k in grid})
        for i, S in enumerate(sorted({k[0] for k in grid})):
            mean = [_mean(grid[(S, T)]["atc"]) for T in Ts]
            ci = [_stats(grid[(S, T)]["atc"])["ci"] for T in Ts]
            line = ax.errorbar(np.log(Ts), mean, yerr=ci, marker="o", capsize=3,
                               label=f"ATC, S={S}")
            ax.plot(np.log(Ts), metrics.lower_bound_curve(S, np.asarray(Ts), c.sigma), "--",
                    color=line[0].get_color(),
                    label=f"σ²(S+1) log(T/(S+1)), S={S} (lower-bound order)")
        ax.set_xlabel("log T (T: horizon in samples)")
        ax.set_ylabel("regret (cumulative excess squared error)")
        ax.set_yscale("log")
        ax.set_title("G1 random jumps: ATC regret vs log T\n(bars: 95 % CI of the mean over "
                     "runs)", fontsize=9)
        ax.legend(fontsize=6, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.18))
        paths.append(plotting.save(fig, os.path.join(workdir, "regret_vs_logT.png")))
    if "selective" in suites:
        s = suites["selective"]
        d = np.asarray(s["deltas"])
        pos = d > 0
        i0 = int(np.flatnonzero(d == 0.0)[0])
        fig, (a1, a2) = plotting.figure(1, 2)
        a1.plot(d[pos], (np.asarray(s["atc"]) - s["atc"][i0])[pos], "o-", label="ATC")
        a1.plot(d[pos], (np.asarray(s["window"]) - s["window"][i0])[pos], "s-",
                label=f"window({c.selective.window})")
        a1.axhline(2 * c.c * math.log(c.selective.T), color="k", ls=":", label="2 c log T")
        a1.set(xscale="log", yscale="symlog", xlabel="jump size Δ", ylabel="R(Δ) − R(0)")
        a1.legend(fontsize=7)
        a2.plot(d[pos], np.asarray(s["late_alarm_rate"])[pos], "o-")
        a2.axhline(s["late_alarm_rate"][i0], color="k", ls=":", label="rate at Δ = 0")
        a2.set(xscale="log", xlabel="jump size Δ", ylabel="alarm rate in (T/2, T]",
               ylim=(-0.05, 1.05))
        a2.legend(fontsize=7)
        fig.suptitle("G2 single change: selective detection")
        paths.append(plotting.save(fig, os.path.join(workdir, "selective.png")))
    for name, title in (("staircase", "G3 staircase"), ("square", "G4 square wave")):
        if name not in suites:
            continue
        cells = suites[name]
        Ts = sorted(int(k[1:]) for k in cells)
        keys = [k for k, v in cells[f"T{Ts[0]}"].items()
                if np.ndim(v) and not k.endswith("hindsight")]
        fig, ax = plotting.figure(size=(5.0, 3.8))
        for k in keys:
            ax.plot(Ts, [_mean(cells[f"T{T}"][k]) for T in Ts], "o-", label=k)
        ax.set(xscale="log", yscale="log", xlabel="T", ylabel="regret", title=title)
        ax.legend(fontsize=7)
        paths.append(plotting.save(fig, os.path.join(workdir, f"{name}.png")))
    if "real" in suites:
        years, nile = envs.load_nile()
        q, ri = envs.load_realint(c.real.realint_start, c.real.realint_end)
        for name, t, x, series in (("nile", years, nile, suites["real"]["nile"]),
                                   ("realint", np.arange(len(ri)), ri, suites["real"]["realint"])):
            fig, ax = plotting.figure(size=(7.0, 3.5))
            ax.plot(t, x, ".", color="0.5", label="series")
            ax.plot(t, series["pred"], "-", label="ATC prediction")
            for j, a in enumerate(np.asarray(series["alarm_index"], int)):
                ax.axvline(t[a], color="r", lw=1, label="ATC alarm" if j == 0 else None)
            for j, b in enumerate(np.asarray(series["ls_breaks"], int)):
                ax.axvline(t[b], color="k", ls="--", lw=1, label="LS break" if j == 0 else None)
            if name == "realint":
                ticks = np.arange(0, len(q), 12)
                ax.set_xticks(ticks, [q[i] for i in ticks], fontsize=7)
            ax.set(xlabel={"nile": "year", "realint": "quarter"}[name],
                   ylabel={"nile": "annual flow at Aswan (10⁸ m³)",
                           "realint": "real interest rate (% per year)"}[name])
            ax.set_title({"nile": "Nile flow at Aswan (c = 4, σ̂)",
                          "realint": "US ex-post real interest rate (c = 4, σ̂)"}[name])
            ax.legend(fontsize=7)
            paths.append(plotting.save(fig, os.path.join(workdir, f"{name}.png")))
    return paths


# ------------------------------------------------------------------ text


def summary(c, m: dict, claims) -> str:
    """Plain-text tables of every suite and the claims."""
    out = []
    if "synthetic" in m:
        rows = []
        for key, r in m["synthetic"].items():
            rows.append([key] + [r[k]["mean"] for k in SYNTH_METHODS[:7]]
                        + [f"{r['window_value']:g}/{r['discount_value']:g}", r["lower_bound"]])
        out.append(results.format_table(
            rows, ["cell", *SYNTH_METHODS[:7], "w/γ (held-out)", "lower bd"],
            title="G1 random jumps: mean regret over runs"))
        peer_rows = [[k, r["peers_atc"]["mean"], r.get("adwin", {}).get("mean"),
                      r.get("focus", {}).get("mean")]
                     for k, r in m["synthetic"].items() if "peers_atc" in r]
        if peer_rows:
            out.append(results.format_table(peer_rows, ["cell", "ATC", "ADWIN", "FOCuS"],
                                            title="peers (same runs)"))
    if "selective" in m:
        s = m["selective"]
        rows = [[d, a, e, w] for d, a, e, w in zip(s["deltas"], s["late_alarm_rate"],
                                                   s["atc_excess_regret"], s["window_regret"])]
        out.append(results.format_table(rows, ["Δ", "alarm rate (T/2,T]", "ATC excess regret",
                                               f"window({s['window']}) regret"],
                                        title="G2 single change"))
    for name in ("staircase", "square"):
        if name in m:
            keys = [k for k, v in next(iter(m[name].values())).items() if isinstance(v, dict)]
            rows = [[cell] + [r[k]["mean"] for k in keys] for cell, r in m[name].items()]
            out.append(results.format_table(rows, ["cell", *keys], title=f"{name}: mean regret"))
    for group in ("real", "csv"):
        if group in m:
            rows = [[k, r["sigma_hat"], r["alarms"], r["atc_mse"], r["window_mse"],
                     r["best_window"], r["discount_mse"], r["best_discount"], r["mse_ratio"]]
                    for k, r in m[group].items()]
            out.append(results.format_table(
                rows, ["series", "σ̂", "alarms", "ATC MSE", "window MSE", "w", "discount MSE",
                       "γ", "ratio"], title=f"{group} series (baselines in hindsight)"))
    out.append(results.claims_table(claims))
    return "\n\n".join(out)
