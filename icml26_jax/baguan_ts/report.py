"""Tables and figures of the Baguan-TS experiment (spec §Experiment, Figures)."""

from __future__ import annotations

import os

import numpy as np

from icml26_jax.core import plotting, results

ORDER = ("baguan", "co_off", "k0", "recent", "random", "no_antisym", "2d", "retrieval_average",
         "tabular_qr", "ets", "sarimax_exog", "seasonal_naive", "naive", "drift")


def method_means(table: dict) -> list[list]:
    """Rows [method, mean WQL, mean MASE, mean SQL, coverage, OSI] over the tasks."""
    rows = []
    for meth in [x for x in ORDER if x in table]:
        per = table[meth].values()
        rows.append([meth] + [float(np.nanmean([t[k] for t in per]))
                              for k in ("wql", "mase", "sql", "coverage", "osi")])
    return rows


def tables(m: dict) -> str:
    """Method means on the synthetic and real tasks, per-task real WQL, stage times."""
    head = ["method", "WQL", "MASE", "SQL", "cov 10-90", "OSI"]
    out = [results.format_table(method_means(m["synthetic"]), head, floatfmt=".3f",
                                title=f"Synthetic held-out tasks ({len(m['families'])})"),
           results.format_table(method_means(m["real"]), head, floatfmt=".3f",
                                title="Real series (statsmodels datasets)")]
    real = m["real"]
    names = list(real["baguan"])
    meths = [x for x in ORDER if x in real]
    rows = [[n] + [real[x][n]["wql"] for x in meths] for n in names]
    out.append(results.format_table(rows, ["task"] + meths, floatfmt=".3f",
                                    title="Real tasks, WQL per task"))
    out.append("stage seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in m["stage_s"].items()))
    return "\n\n".join(out)


def _smooth(x, w: int = 25) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if x.size < w:
        return x
    return np.convolve(x, np.ones(w) / w, mode="valid")


def figures(m: dict, workdir: str) -> list[str]:
    """loss.png, forecasts.png, wql_per_task.png, osi.png."""
    names = []
    fig, ax = plotting.figure(size=(5.5, 3.2))
    offset = 0
    for stage, loss in m["loss"].items():
        start = 0 if stage == "trunk" else offset
        sm = _smooth(loss)
        ax.plot(start + np.arange(sm.size), sm, label=stage)
        if stage == "trunk":
            offset = len(loss)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (bar NLL, 25-step mean)")
    ax.legend(fontsize=7)
    names.append(plotting.save(fig, os.path.join(workdir, "loss.png")))

    ex = m["examples"]
    fig, axes = plotting.figure(1, len(ex), size=(3.6, 2.8))
    for ax, (name, e) in zip(np.atleast_1d(axes), ex.items()):
        h, H = len(e["history"]), len(e["truth"])
        t = np.arange(h, h + H)
        ax.plot(np.arange(h), e["history"], color="0.4", lw=0.8)
        ax.plot(t, e["truth"], color="k", lw=1.0, label="truth")
        ax.plot(t, e["mean"], color="C0", label="Baguan mean")
        ax.fill_between(t, e["q10"], e["q90"], color="C0", alpha=0.25, label="q10-q90")
        ax.plot(t, e["snaive"], color="C3", ls=":", label="seasonal naive")
        ax.set_title(name, fontsize=8)
        ax.set(xlabel="time step", ylabel="value (the series' units)")
    np.atleast_1d(axes)[0].legend(fontsize=6)
    names.append(plotting.save(fig, os.path.join(workdir, "forecasts.png")))

    syn, real = m["synthetic"], m["real"]
    meths = [x for x in ("baguan", "2d", "tabular_qr", "ets", "sarimax_exog", "seasonal_naive")
             if x in syn]
    tasks = list(syn["baguan"]) + list(real["baguan"])
    fig, ax = plotting.figure(size=(10.0, 3.4))
    width = 0.8 / max(len(meths), 1)
    for i, meth in enumerate(meths):
        vals = [(syn if n in syn["baguan"] else real).get(meth, {}).get(n, {}).get("wql",
                                                                                 np.nan)
                for n in tasks]
        ax.bar(np.arange(len(tasks)) + i * width, vals, width, label=meth)
    ax.set_xticks(np.arange(len(tasks)) + 0.4 - width / 2, tasks, rotation=90, fontsize=6)
    ax.set_yscale("log")
    ax.set_xlabel(f"task ({len(syn['baguan'])} held-out synthetic families, then "
                  f"{len(real['baguan'])} real series)")
    ax.set_ylabel("WQL (mean over origins)")
    ax.set_title("weighted quantile loss per task (lower is better)", fontsize=9)
    ax.legend(fontsize=6, ncol=3)
    names.append(plotting.save(fig, os.path.join(workdir, "wql_per_task.png")))

    spikes = [n for n, f in m["families"].items() if f == "spike"]
    if spikes and "co_off" in syn:
        fig, ax = plotting.figure(size=(5.0, 3.2))
        x = np.arange(len(spikes))
        ax.bar(x - 0.2, [syn["baguan"][n]["osi"] for n in spikes], 0.4, label="co_on")
        ax.bar(x + 0.2, [syn["co_off"][n]["osi"] for n in spikes], 0.4, label="co_off")
        ax.axhline(1.0, color="k", lw=0.8, ls="--", label="OSI = 1 (as rough as the truth)")
        ax.set_xticks(x, spikes, rotation=45, fontsize=7)
        ax.set(xlabel="synthetic task with spikes",
               ylabel="OSI = std(diff forecast) / std(diff truth)")
        ax.legend(fontsize=7)
        names.append(plotting.save(fig, os.path.join(workdir, "osi.png")))
    return names
