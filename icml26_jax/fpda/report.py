"""FPDA claims (spec §Claims), tables and figures, computed from the measured metrics."""

from __future__ import annotations

import os

import numpy as np

from icml26_jax.core import plotting, results
from icml26_jax.fpda import data as data_lib
from icml26_jax.fpda import prompts

CLAIM_NAMES = (
    "prompting_beats_no_prompt_f1", "prompting_beats_fixed_prompt_f1",
    "prompting_beats_no_prompt_auc", "robust_f1_gain", "robust_drop_smaller",
    "xmanip_f1_gain", "dapo_reward_gain_over_all_routes", "dapo_f1_not_worse_than_all_routes",
    "dapo_beats_random_policy", "dapo_matches_best_fixed_action", "policy_is_per_image",
    "refine_schedule_varies", "mask_consistency", "gate_ignores_wrong_text",
    "gate_uses_clean_text", "gate_reliability_auc")


def _missing(name: str, why: str) -> results.Claim:
    return results.check(name, float("nan"), f"not measured: {why}", False)


def claims(ev: dict) -> list[results.Claim]:
    """Every claim of spec §Claims from the evaluation dict of ``train.evaluate``."""
    s = ev["splits"]
    tid, rob, xm = s["test_id"], s["test_robust"], s["test_xmanip"]
    out = []

    def diff(split, a, b, key):
        return split[a][key] - split[b][key]

    def need(*methods):
        return all(m in tid for m in methods)

    if need("fpda", "no_prompt"):
        out.append(results.at_least("prompting_beats_no_prompt_f1",
                                    diff(tid, "fpda", "no_prompt", "pixel_f1"), 0.03))
    else:
        out.append(_missing("prompting_beats_no_prompt_f1", "needs fpda and no_prompt"))
    if need("fpda", "fixed_prompt"):
        out.append(results.at_least("prompting_beats_fixed_prompt_f1",
                                    diff(tid, "fpda", "fixed_prompt", "pixel_f1"), 0.02))
    else:
        out.append(_missing("prompting_beats_fixed_prompt_f1", "needs fpda and fixed_prompt"))
    if need("fpda", "no_prompt"):
        out.append(results.at_least("prompting_beats_no_prompt_auc",
                                    diff(tid, "fpda", "no_prompt", "image_auc"), 0.02))
        out.append(results.at_least("robust_f1_gain",
                                    diff(rob, "fpda", "no_prompt", "pixel_f1"), 0.03))

        def drop(m):
            return (tid[m]["pixel_f1"] - rob[m]["pixel_f1"]) / max(tid[m]["pixel_f1"], 1e-9)

        d_f, d_b = drop("fpda"), drop("no_prompt")
        ratio = d_f / d_b if d_b > 0 else float("inf")
        out.append(results.check(
            "robust_drop_smaller", ratio,
            f"<= 0.8 (relative ID->robust F1 drop: FPDA {d_f:.3f}, no_prompt {d_b:.3f})",
            bool(ratio <= 0.8)))
        out.append(results.at_least("xmanip_f1_gain",
                                    diff(xm, "fpda", "no_prompt", "pixel_f1"), 0.02))
    else:
        for n in ("prompting_beats_no_prompt_auc", "robust_f1_gain", "robust_drop_smaller",
                  "xmanip_f1_gain"):
            out.append(_missing(n, "needs fpda and no_prompt"))
    if need("fpda", "all_routes"):
        out.append(results.at_least("dapo_reward_gain_over_all_routes",
                                    diff(tid, "fpda", "all_routes", "reward"), 0.01))
        out.append(results.at_least("dapo_f1_not_worse_than_all_routes",
                                    diff(tid, "fpda", "all_routes", "pixel_f1"), -0.005))
    else:
        out += [_missing(n, "needs fpda and all_routes") for n in (
            "dapo_reward_gain_over_all_routes", "dapo_f1_not_worse_than_all_routes")]
    if need("fpda", "random_policy"):
        out.append(results.at_least("dapo_beats_random_policy",
                                    diff(tid, "fpda", "random_policy", "reward"), 0.02))
    else:
        out.append(_missing("dapo_beats_random_policy", "needs fpda and random_policy"))
    if need("fpda", "best_fixed_action"):
        out.append(results.at_least("dapo_matches_best_fixed_action",
                                    diff(tid, "fpda", "best_fixed_action", "reward"), -0.005))
    else:
        out.append(_missing("dapo_matches_best_fixed_action", "needs best_fixed_action"))
    if need("fpda"):
        f = tid["fpda"]
        out.append(results.at_least("policy_is_per_image", f["action_entropy"], 0.3))
        hist = np.asarray(f["r_hist"], np.float64)
        n_often = int((hist / hist.sum() >= 0.10).sum())
        out.append(results.check("refine_schedule_varies", n_often,
                                 f">= 2 r values each chosen for >= 10 % of test_id "
                                 f"(histogram {f['r_hist']})", n_often >= 2))
        base = f["cc_error_r0"]
        ratio = f["cc_error"] / base if base > 0 else float("inf")
        out.append(results.check("mask_consistency", ratio,
                                 f"<= 0.8 (|dCC| FPDA {f['cc_error']:.3f} / its r=0 output "
                                 f"{base:.3f})", bool(ratio <= 0.8)))
        t = ev["text"]
        out.append(results.at_least("gate_ignores_wrong_text",
                                    t["p_rel=0.0"]["pixel_f1"] - f["pixel_f1"], -0.01))
        out.append(results.at_least("gate_uses_clean_text",
                                    t["p_rel=1.0"]["pixel_f1"] - f["pixel_f1"], 0.02))
        out.append(results.at_least("gate_reliability_auc",
                                    t["p_rel=0.7"].get("gate_auc", float("nan")), 0.7))
    else:
        out += [_missing(n, "needs fpda") for n in CLAIM_NAMES[10:]]
    return out


METRIC_COLS = ("image_auc", "balanced_acc", "pixel_f1", "iou", "pixel_auc", "cc_error",
               "boundary_f1", "reward", "mean_r")


def methods_table(ev: dict) -> str:
    rows = []
    for split, per in ev["splits"].items():
        for meth, m in per.items():
            rows.append([split, meth] + [f"{m[k]:.3f}" for k in METRIC_COLS])
    return results.format_table(rows, ["split", "method", *METRIC_COLS],
                                title="Detection and localisation (text off)")


def text_table(ev: dict) -> str:
    rows = [["no text", f"{ev['splits']['test_id']['fpda']['pixel_f1']:.3f}", "", "", ""]]
    for arm, m in ev["text"].items():
        rows.append([arm, f"{m['pixel_f1']:.3f}", f"{m['gate_mean_correct']:.3f}",
                     f"{m['gate_mean_wrong']:.3f}", f"{m.get('gate_auc', float('nan')):.3f}"])
    return results.format_table(rows, ["text arm", "F1", "g correct", "g wrong", "gate AUC"],
                                title="Text arms on test_id (FPDA actions)")


# --------------------------------------------------------------------------- figures

def figures(workdir: str, ev: dict, split: data_lib.Split, preds: dict) -> list[str]:
    """masks_grid, action_hist, gate_hist, robustness_bars (PNG paths)."""
    paths = []
    forged = np.flatnonzero(split.labels > 0)[:6]
    cols = ["image", "GT"] + list(preds)
    fig, axes = plotting.figure(len(forged), len(cols), size=(1.4, 1.4))  # per panel
    axes = np.atleast_2d(axes)
    for i, idx in enumerate(forged):
        panels = [split.images[idx], split.masks[idx]] + [preds[k][idx] for k in preds]
        for j, (name, img) in enumerate(zip(cols, panels)):
            ax = axes[i, j]
            ax.imshow(img, cmap=None if img.ndim == 3 else "gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(name, fontsize=7)
    paths.append(plotting.save(fig, os.path.join(workdir, "masks_grid.png")))

    f = ev["splits"]["test_id"]["fpda"]
    fig, (a1, a2) = plotting.figure(1, 2, size=(4.5, 3))
    labels = ["".join(g[0] for g, on in zip(prompts.GROUPS, row) if on)
              for row in prompts.ROUTES]
    a1.bar(range(len(labels)), f["route_hist"])
    a1.set_xticks(range(len(labels)))
    a1.set_xticklabels(labels, rotation=90, fontsize=6)
    a1.set(xlabel="prompt route (groups switched on)", ylabel="test images")
    a1.set_title("FPDA routes on test_id (n/c/g/b groups)", fontsize=8)
    a2.bar(range(len(f["r_hist"])), f["r_hist"])
    a2.set(xlabel="refinement steps r", ylabel="test images")
    a2.set_title(f"FPDA r on test_id (mean {f['mean_r']:.2f}; B2 uses 2)", fontsize=8)
    paths.append(plotting.save(fig, os.path.join(workdir, "action_hist.png")))

    t = ev["text"]["p_rel=0.7"]
    g, ok = np.asarray(t["gate"]), np.asarray(t["text_ok"], bool)
    fig, ax = plotting.figure(size=(4.5, 3))
    bins = np.linspace(0, 1, 21)
    ax.hist(g[ok], bins=bins, alpha=0.6, label="correct text")
    ax.hist(g[~ok], bins=bins, alpha=0.6, label="wrong text")
    ax.set(xlabel="reliability gate g", ylabel="test images")
    ax.set_title(f"gate on test_id, p_rel = 0.7 (AUC {t.get('gate_auc', float('nan')):.2f})",
                 fontsize=8)
    ax.legend(fontsize=7)
    paths.append(plotting.save(fig, os.path.join(workdir, "gate_hist.png")))

    fig, ax = plotting.figure(size=(6, 3))
    meths = list(ev["splits"]["test_id"])
    x = np.arange(len(meths))
    for k, sname in enumerate(ev["splits"]):
        ax.bar(x + 0.27 * (k - 1), [ev["splits"][sname][m]["pixel_f1"] for m in meths], 0.27,
               label=sname)
    ax.set_xticks(x)
    ax.set_xticklabels(meths, rotation=30, fontsize=7, ha="right")
    ax.set(xlabel="method", ylabel="pixel F1 (forged images)")
    ax.legend(fontsize=7)
    paths.append(plotting.save(fig, os.path.join(workdir, "robustness_bars.png")))
    return paths
