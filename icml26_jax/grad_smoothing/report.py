"""Claims, figures and printed tables of the Gradient Smoothing experiment (spec §Claims)."""

from __future__ import annotations

import os

import numpy as np

from icml26_jax.core import plotting, results
from icml26_jax.grad_smoothing import metrics as gm

FIGURES = ("val_loss.png", "depth_cka.png", "update_norms.png", "lr_sweep.png")
FIGURES_FULL = ("val_loss_muon.png", "vit_accuracy.png")
ARMS = ("base", "smoothed", "permuted")


def evaluate(c, s1, s2, sel_arms, sel_lrs, best, timing, entropy):
    """``(metrics, claims)`` from stage 1 (selection), stage 2 (evaluation) and timing."""
    S = len(c.eval_seeds)
    per = lambda key, arm: np.asarray(s2[key])[:, ARMS.index(arm) * S:(ARMS.index(arm) + 1) * S]  # noqa: E731,E501
    final = {a: per("val_loss", a)[-1] for a in ARMS}  # [S]
    m = {"seeds": list(c.eval_seeds), "selected_lr": best, "entropy_rate": float(entropy),
         "steps_logged": np.asarray(s2["steps"]).tolist(),
         "lr_sweep": {f"{a}@{lr:g}": float(np.asarray(s1["val_loss"])[-1, i])
                      for i, (a, lr) in enumerate(zip(sel_arms, sel_lrs))},
         "final_val_loss": {a: final[a].tolist() for a in ARMS},
         "excess_val_loss": {a: (final[a] - entropy).tolist() for a in ARMS},
         "val_curves": {a: per("val_loss", a).T.tolist() for a in ARMS},
         "adjacent_cka_final": {a: per("cka", a)[-1].tolist() for a in ARMS},
         "dw_cosine_final": {a: per("dw_cosine", a)[-1].tolist() for a in ARMS},
         "update_norms_mean": {a: per("update_norms", a).mean((0, 1)).tolist() for a in ARMS},
         "step_time_s": timing}
    claims = []
    # 1. Smoothing lowers the final validation loss.
    d = final["smoothed"] - final["base"]
    wins = int(np.sum(d < 0))
    need = max(1, int(np.ceil(0.8 * S)))
    claims.append(results.check("smoothing_lowers_val_loss", d.mean(),
                         f"mean <= -0.01 and < 0 on >= {need} of {S} seeds (held on {wins})",
                         d.mean() <= -0.01 and wins >= need))
    m["delta_val_loss"] = d.tolist()
    # 2. Smoothed reaches the base's final loss sooner.
    steps = np.asarray(s2["steps"])
    hits = []
    for i in range(S):
        h = gm.steps_to_target(steps, per("val_loss", "smoothed")[:, i], final["base"][i])
        hits.append(float(h) if h is not None else float("inf"))
    med = float(np.median(hits))
    m["steps_to_base_final"] = [h if np.isfinite(h) else None for h in hits]
    claims.append(results.check("smoothing_reaches_target_sooner", med if np.isfinite(med) else
                         float(c.steps) * 10, f"median step <= 0.9 x {c.steps} = "
                         f"{0.9 * c.steps:g} (inf: never)", med <= 0.9 * c.steps))
    # 3. The depth neighbours matter (permuted control).
    Lb, Ls, Lp = (float(final[a].mean()) for a in ARMS)
    ok = Ls < Lp and (Lb - Lp) <= 0.5 * (Lb - Ls)
    claims.append(results.check("depth_neighbours_matter", Lp - Ls,
                         f"L_smoothed < L_permuted and L_base - L_permuted ({Lb - Lp:+.4f}) <= "
                         f"0.5 (L_base - L_smoothed) ({0.5 * (Lb - Ls):+.4f}); measured = "
                         "L_permuted - L_smoothed", ok))
    # 4. Smoothing structures representations across depth (adjacent CKA).
    cka = {a: per("cka", a)[-1].mean(-1) for a in ARMS}  # [S]
    more = int(np.sum(cka["smoothed"] > cka["base"]))
    claims.append(results.check("smoothing_structures_depth",
                         float(np.mean(cka["smoothed"] - cka["base"])),
                         f"adjacent CKA higher on >= {need} of {S} seeds (held on {more}); "
                         "measured = mean difference", more >= need))
    # 5. Overhead.
    ratio = timing["smoothed"] / timing["base"]
    claims.append(results.at_most("smoothing_overhead_small", ratio, 1.05))
    return m, claims


def _finals(c, s2) -> dict:
    S = len(c.eval_seeds)
    v = np.asarray(s2["val_loss"])[-1]
    return {a: v[i * S:(i + 1) * S] for i, a in enumerate(ARMS)}


def evaluate_full(c, main, muon, shallow, v) -> tuple[dict, list]:
    """Metrics and claims 6-8 of the ``full`` variant: the Muon protocol, the depth
    comparison and the ViT (``train.protocol`` outputs and ``vit.run_vit``'s dict)."""
    m, claims = {}, []
    # 6. Claim 1 with Muon as the base.
    fm = _finals(muon["config"], muon["s2"])
    d = fm["smoothed"] - fm["base"]
    S = len(d)
    need = max(1, int(np.ceil(0.8 * S)))
    wins = int(np.sum(d < 0))
    claims.append(results.check("smoothing_lowers_val_loss_muon", d.mean(),
                         f"mean <= -0.01 and < 0 on >= {need} of {S} seeds (held on {wins})",
                         d.mean() <= -0.01 and wins >= need))
    m["muon"] = {"selected_lr": muon["best"], "alpha_sweep": muon["alpha_sweep"],
                 "selected_alpha_mode": [float(muon["config"].alpha), muon["config"].mode],
                 "final_val_loss": {a: fm[a].tolist() for a in ARMS},
                 "delta_val_loss": d.tolist(),
                 "lr_sweep": {f"{a}@{lr:g}": float(np.asarray(muon["s1"]["val_loss"])[-1, i])
                              for i, (a, lr) in enumerate(zip(muon["sel_arms"],
                                                              muon["sel_lrs"]))},
                 "val_curves": {a: np.asarray(muon["s2"]["val_loss"])[
                     :, i * S:(i + 1) * S].T.tolist() for i, a in enumerate(ARMS)}}
    # 7. ViT generalisation gain (test accuracy points, paired over folds x seeds).
    acc = {a: np.asarray(v["test_acc"][a]) for a in ("base", "smoothed")}
    da = 100.0 * (acc["smoothed"] - acc["base"])
    P = len(da)
    need_v = int(np.ceil(0.7 * P))
    fav = int(np.sum(da > 0))
    claims.append(results.check("vit_generalisation_gain", da.mean(),
                         f"mean >= +0.5 points and favourable on >= {need_v} of {P} pairs "
                         f"(held on {fav})", da.mean() >= 0.5 and fav >= need_v))
    m["vit"] = dict(v, delta_acc_points=da.tolist(),
                    train_loss_delta=(np.asarray(v["train_loss"]["smoothed"])
                                      - np.asarray(v["train_loss"]["base"])).tolist())
    # 8. The gain grows with depth (soft).
    fd = _finals(main["config"], main["s2"])
    fs = _finals(shallow["config"], shallow["s2"])
    g_deep = float(np.mean(fd["base"] - fd["smoothed"]))
    g_shallow = float(np.mean(fs["base"] - fs["smoothed"]))
    claims.append(results.check("gain_grows_with_depth", g_deep - g_shallow,
                         f">= 0 (gain = L_base - L_smoothed: depth {main['config'].depth} "
                         f"{g_deep:+.4f}, depth {shallow['config'].depth} {g_shallow:+.4f})",
                         g_deep - g_shallow >= 0))
    m["depth_comparison"] = {
        "depths": [int(main["config"].depth), int(shallow["config"].depth)],
        "gain": [g_deep, g_shallow], "selected_lr_shallow": shallow["best"],
        "final_val_loss_shallow": {a: fs[a].tolist() for a in ARMS}}
    return m, claims


def plots_full(c, m, workdir: str) -> None:
    """``val_loss_muon.png`` and ``vit_accuracy.png`` of the ``full`` variant."""
    steps = np.asarray(m["steps_logged"])
    fig, ax = plotting.figure()
    for a in ARMS:
        v = np.asarray(m["muon"]["val_curves"][a])
        ax.plot(steps, v.mean(0), label=a)
        ax.fill_between(steps, v.min(0), v.max(0), alpha=0.2)
    ax.axhline(m["entropy_rate"], color="gray", ls=":", lw=1, label="HMM entropy rate")
    ax.set(xlabel="step", ylabel="validation loss (nats/token)",
           title="Muon: validation loss (mean, range over seeds)")
    ax.legend()
    plotting.save(fig, os.path.join(workdir, "val_loss_muon.png"))
    fig, ax = plotting.figure()
    ep = np.asarray(m["vit"]["epochs_logged"])
    for a in ("base", "smoothed"):
        v = 100 * np.asarray(m["vit"]["test_acc_curves"][a])
        ax.plot(ep, v.mean(0), marker="o", label=a)
        ax.fill_between(ep, v.min(0), v.max(0), alpha=0.2)
    ax.set(xlabel="epoch", ylabel="test accuracy (%)",
           title=f"ViT on {m['vit']['source']} (mean, range over folds x seeds)")
    ax.legend()
    plotting.save(fig, os.path.join(workdir, "vit_accuracy.png"))


def plots(c, m, workdir: str) -> None:
    steps = np.asarray(m["steps_logged"])
    # Left: the curves; right: each arm minus base on the same seed (the claim is a
    # difference of ~0.02 nats on a curve that falls by ~2, invisible on the left).
    fig, (ax, dx) = plotting.figure(1, 2)
    base = np.asarray(m["val_curves"]["base"])  # [S, K]
    for i, a in enumerate(ARMS):
        v = np.asarray(m["val_curves"][a])
        ax.plot(steps, v.mean(0), color=f"C{i}", label=a)
        ax.fill_between(steps, v.min(0), v.max(0), color=f"C{i}", alpha=0.2)
        if a != "base":
            d = v - base
            dx.plot(steps, d.mean(0), color=f"C{i}", label=f"{a} - base")
            dx.fill_between(steps, d.min(0), d.max(0), color=f"C{i}", alpha=0.2)
    ax.axhline(m["entropy_rate"], color="gray", ls=":", lw=1, label="HMM entropy rate")
    ax.set(xlabel="step", ylabel="validation loss (nats/token)",
           title=f"Validation loss ({c.base})")
    ax.legend(fontsize=7)
    dx.axhline(0.0, color="k", lw=0.6, label="base (no smoothing)")
    dx.axhline(-0.01, color="k", lw=0.8, ls="--", label="claim: final mean <= -0.01")
    dx.set(xlabel="step", ylabel="difference to base, same seed (nats/token)",
           title="Arm - base (< 0: lower loss)")
    dx.legend(fontsize=7)
    fig.suptitle(f"lines: mean over {base.shape[0]} seeds; bands: min to max over seeds",
                 fontsize=8)
    plotting.save(fig, os.path.join(workdir, "val_loss.png"))
    fig, ax = plotting.figure()
    for a in ARMS:
        v = np.asarray(m["adjacent_cka_final"][a])  # [S, L-1]
        ax.plot(np.arange(1, v.shape[1] + 1), v.mean(0), marker="o", label=a)
    ax.set(xlabel="block pair (l, l+1)", ylabel="linear CKA", title="Adjacent-block CKA (end)")
    ax.legend()
    plotting.save(fig, os.path.join(workdir, "depth_cka.png"))
    fig, ax = plotting.figure()
    for a in ARMS:
        v = np.asarray(m["update_norms_mean"][a])
        ax.plot(np.arange(1, len(v) + 1), v, marker="o", label=a)
    ax.set(xlabel="block", ylabel="mean update norm", title="Per-block update norms")
    ax.legend()
    plotting.save(fig, os.path.join(workdir, "update_norms.png"))
    fig, ax = plotting.figure()
    for a in ("base", "smoothed"):
        pts = sorted((float(k.split("@")[1]), v) for k, v in m["lr_sweep"].items()
                     if k.startswith(a + "@"))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=a)
    ax.set(xscale="log", xlabel="peak learning rate",
           ylabel="final validation loss (nats/token)",
           title=f"LR selection (seed {c.selection_seed})")
    ax.legend()
    plotting.save(fig, os.path.join(workdir, "lr_sweep.png"))


def summary(c, m, claims) -> str:
    rows = [[a, float(np.mean(m["final_val_loss"][a])), float(np.std(m["final_val_loss"][a])),
             float(np.mean(m["excess_val_loss"][a])),
             float(np.mean(np.asarray(m["adjacent_cka_final"][a])))] for a in ARMS]
    out = [results.format_table(rows, ["arm", "val loss", "std", "excess over H", "adj. CKA"],
                                title=f"{c.base}, depth {c.depth}, {c.steps} steps, "
                                      f"{len(m['seeds'])} seeds (selected lr: "
                                      f"{m['selected_lr']}, alpha/mode: "
                                      f"{m.get('selected_alpha_mode')})", floatfmt=".4f")]
    if "muon" in m:
        mu = m["muon"]
        out.append(results.format_table(
            [[a, float(np.mean(mu["final_val_loss"][a])), float(np.std(mu["final_val_loss"][a]))]
             for a in ARMS], ["arm", "val loss", "std"],
            title=f"muon, depth {c.depth} (selected lr: {mu['selected_lr']}, alpha/mode: "
                  f"{mu['selected_alpha_mode']})", floatfmt=".4f"))
        v = m["vit"]
        out.append(results.format_table(
            [[a, 100 * float(np.mean(v["test_acc"][a])), 100 * float(np.std(v["test_acc"][a])),
              float(np.mean(v["train_loss"][a]))] for a in ("base", "smoothed")],
            ["arm", "test acc %", "std", "train loss"],
            title=f"ViT on {v['source']}, {len(v['pairs'])} folds x seeds (selected lr: "
                  f"{v['selected_lr']})", floatfmt=".3f"))
        dc = m["depth_comparison"]
        out.append(f"gain L_base - L_smoothed: depth {dc['depths'][0]} {dc['gain'][0]:+.4f}, "
                   f"depth {dc['depths'][1]} {dc['gain'][1]:+.4f}")
    out.append(results.claims_table(claims))
    return "\n\n".join(out)
