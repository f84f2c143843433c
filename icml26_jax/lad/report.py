"""Tables and figures of a LAD run: ``confusion_vanilla_vs_lad.png`` (Fig. 1 analogue),
``bias_matrix.png``, ``recall_by_position.png`` and ``divergence_bars.png`` (Table 7
analogue: vanilla, raw attention, purified attention, LAD)."""

from __future__ import annotations

import os

import numpy as np

from icml26_jax.core import plotting, results


def tables(m: dict) -> str:
    """Acc / RStd / Cons of every method per setting, and the forward-pass counts."""
    out = []
    for s, r in m["settings"].items():
        rows = [[name, v["acc"], v["acc_std"], v["rstd"], v["cons"]]
                for name, v in r["methods"].items()]
        nf = r["n_forward"]
        out.append(results.format_table(
            rows, ["method", "Acc", "Acc sd", "RStd", "Cons"], floatfmt=".2f",
            title=f"{s}: log gamma {r['log_gamma']:.3f}, bias conditionality "
                  f"{r['bias_conditionality']:.3f} nats; forward passes: calibration "
                  f"{nf['calibration']}, test {nf['test']} for {nf['instances']} instances, "
                  f"perm_average {nf['perm_average']}"))
        d = r.get("attention_diagnostic")
        if d:
            chance = 100 / np.shape(r["confusion"]["lad"])[0]
            out.append(results.format_table(
                [[f"layer {i}", a, g] for i, (a, g) in
                 enumerate(zip(d["argmax_acc"], d["gt_over_distractor"]))],
                ["layer", "attn argmax on GT %", "GT / distractor mass"], floatfmt=".2f",
                title=f"{s}: where the answering token looks (chance {chance:.0f} %)"))
    return "\n\n".join(out)


def figures(m: dict, workdir: str) -> list[str]:
    """Writes the figures; returns their paths."""
    names = []
    key = "random4" if "random4" in m["settings"] else next(iter(m["settings"]))
    r = m["settings"][key]
    fig, axes = plotting.figure(1, 2)
    for ax, name in zip(axes, ("vanilla", "lad")):
        cm = np.asarray(r["confusion"][name])
        im = ax.imshow(cm, vmin=0, vmax=1, cmap="Blues")
        ax.set_title(f"{name}: acc {r['methods'][name]['acc']:.1f} %")
        ax.set_xlabel("predicted position")
        ax.set_ylabel("ground-truth position")
        n = cm.shape[0]
        ax.set_xticks(range(n), [str(i + 1) for i in range(n)])
        ax.set_yticks(range(n), [str(i + 1) for i in range(n)])
    fig.colorbar(im, ax=axes[-1])
    names.append(plotting.save(fig, os.path.join(workdir, "confusion_vanilla_vs_lad.png")))
    fig, axes = plotting.figure(1, len(m["settings"]), squeeze=False)
    for ax, (s, rr) in zip(axes[0], m["settings"].items()):
        B = np.asarray(rr["bias"])
        lim = np.abs(B).max()
        im = ax.imshow(B, cmap="RdBu_r", vmin=-lim, vmax=lim)
        ax.set_title(f"B, {s}")
        ax.set_xlabel("predicted j")
        ax.set_ylabel("ground truth i")
        fig.colorbar(im, ax=ax)
    names.append(plotting.save(fig, os.path.join(workdir, "bias_matrix.png")))
    fig, axes = plotting.figure(1, len(m["settings"]), squeeze=False)
    for ax, (s, rr) in zip(axes[0], m["settings"].items()):
        for name, rec in rr["recall_by_position"].items():
            rec = np.asarray(rec, np.float64)
            ax.plot(np.arange(1, len(rec) + 1), rec, "o-", label=name)
        ax.set_title(s)
        ax.set_xlabel("ground-truth position")
        ax.set_ylabel("recall (%)")
        ax.set_ylim(0, 105)
    axes[0][0].legend(fontsize=7)
    names.append(plotting.save(fig, os.path.join(workdir, "recall_by_position.png")))
    fig, ax = plotting.figure(size=(1.6 * len(m["settings"]) + 3, 3.5))
    methods = ("vanilla", "raw_attention", "purified_attention", "lad")
    w = 0.8 / len(methods)
    for i, name in enumerate(methods):
        ax.bar(np.arange(len(m["settings"])) + i * w,
               [rr["methods"][name]["acc"] for rr in m["settings"].values()], w, label=name)
    ax.set_xticks(np.arange(len(m["settings"])) + 0.4 - w / 2, list(m["settings"]))
    ax.set(xlabel="setting", ylabel="accuracy (%)")
    ax.legend(fontsize=7)
    names.append(plotting.save(fig, os.path.join(workdir, "divergence_bars.png")))
    return names
