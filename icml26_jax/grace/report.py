"""Tables and figures of the GRACE experiment (spec §Experiment, Figures)."""

from __future__ import annotations

import os

import numpy as np

from icml26_jax.core import plotting, results

ORDER = ("teacher_fp", "student_Ts", "student_fp", "ptq_rtn", "qat_ce", "qat_dkd", "grace")


def tables(m: dict) -> str:
    """Per-arm accuracy (overall and per template), the premise, the export."""
    arms = [a for a in ORDER if a in m["arms"]]
    templates = list(m["arms"][arms[0]]["per_template"]) if arms else []
    rows = [[a, m["arms"][a]["acc"]] + [m["arms"][a]["per_template"][t] for t in templates]
            for a in arms]
    out = [results.format_table(rows, ["arm", "acc %"] + templates, floatfmt=".2f",
                                title="Test exact-match accuracy (greedy answers)")]
    ee = m["entropy_error"]
    out.append(f"teacher entropy vs error (val answer tokens, n={ee['n_tokens']}): Pearson r "
               f"{ee['pearson_r']:.3f}, token error {100 * ee['token_error']:.2f} %")
    ex = m.get("export")
    if ex:
        b = ex["bytes"]
        out.append(f"INT4 export ({ex['arm']}, {ex['n_linears']} linears): bytes fp32 "
                   f"{b['linears_fp32']}, bf16 {b['linears_bf16']}, packed "
                   f"{b['linears_packed']} (bf16/packed {ex['ratio_bf16_over_packed']:.2f}, "
                   f"fp32/packed {ex['ratio_fp32_over_packed']:.2f}); whole student fp32 "
                   f"{b['whole_fp32']} -> {b['whole_packed']}; orbax round trip bit-exact "
                   f"{ex['roundtrip_bit_exact']}; packed vs fake-quant max |dlogit| "
                   f"{ex['max_abs_logit_diff']:.2e}, agreement {ex['prediction_agreement']:.1f} %")
    out.append("phase seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in m["phase_s"].items()))
    return "\n\n".join(out)


def figures(m: dict, workdir: str) -> list[str]:
    """accuracy_by_arm.png, beta_trace.png, cka_trace.png, entropy_vs_error.png."""
    names = []
    arms = [a for a in ORDER if a in m["arms"]]
    fig, ax = plotting.figure(size=(6.5, 3.5))
    acc = [m["arms"][a]["acc"] for a in arms]
    ax.bar(range(len(arms)), acc, color=["0.4" if a.endswith("fp") or a == "student_Ts"
                                         else "C0" for a in arms])
    ax.set_xticks(range(len(arms)), arms, rotation=30, fontsize=8)
    ax.set(xlabel="arm (grey: full precision; blue: INT4 student)", ylabel="test exact match (%)")
    for i, v in enumerate(acc):
        ax.text(i, v + 0.5, f"{v:.1f}", ha="center", fontsize=7)
    names.append(plotting.save(fig, os.path.join(workdir, "accuracy_by_arm.png")))
    tr = m["traces"].get("grace")
    if tr is not None:
        fig, ax = plotting.figure(size=(5.5, 3.2))
        steps = np.arange(len(tr["beta"]))
        ax.plot(steps, tr["beta"], label="beta")
        ax2 = ax.twinx()
        ax2.plot(steps, tr["ema"], color="C1", label="EMA(L_GDKD)")
        ax2.plot(steps, tr["tau"], color="C2", ls="--", label="tau")
        ax.set_xlabel("GRACE step")
        ax.set_ylabel("beta")
        ax2.set_ylabel("L_GDKD")
        fig.legend(loc="upper right", fontsize=7)
        names.append(plotting.save(fig, os.path.join(workdir, "beta_trace.png")))
        fig, ax = plotting.figure(size=(5.5, 3.2))
        ax.plot(steps, 1.0 - np.asarray(tr["cka"]), label="1 - CKA (GRACE)")
        ax.set_xlabel("GRACE step")
        ax.set_ylabel("1 - CKA (visual tokens, penultimate layer)")
        ax.legend(fontsize=7)
        names.append(plotting.save(fig, os.path.join(workdir, "cka_trace.png")))
    bins = np.asarray(m["entropy_error"]["bins"], np.float64)
    if bins.size:
        fig, ax = plotting.figure(size=(4.5, 3.2))
        ax.plot(bins[:, 0], 100 * bins[:, 1], "o-")
        ax.set_xlabel("teacher token entropy (nats, decile bins)")
        ax.set_ylabel("teacher token error (%)")
        ax.set_title(f"Pearson r = {m['entropy_error']['pearson_r']:.3f}")
        names.append(plotting.save(fig, os.path.join(workdir, "entropy_vs_error.png")))
    return names
