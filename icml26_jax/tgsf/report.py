"""Claims, printed summary and figures of the TGsF experiments (spec §Claims, §Experiment).

Every claim is computed from the run's measured metrics (means over the vmapped seeds and the
held-out cameras; "extrapolation" = t in {0.8, 0.9, 1.0}); a claim whose arms did not run is
left out. Thresholds are the spec's, fixed before any run.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from icml26_jax.core import plotting, results
from icml26_jax.tgsf import camera as camlib
from icml26_jax.tgsf import ff
from icml26_jax.tgsf import fit as fitlib
from icml26_jax.tgsf import render


def _get(m: dict, *path):
    for p in path:
        if not isinstance(m, dict) or p not in m:
            return None
        m = m[p]
    return m


def e1_claims(e1: dict) -> list:
    out = []
    o1, o2 = _get(e1, "S1:order1"), _get(e1, "S1:order2")
    if o1 and o2:
        masked = o2["masked_psnr_extrap"] - o1["masked_psnr_extrap"]
        full = o2["psnr_extrap"] - o1["psnr_extrap"]
        out.append(results.check(
            "order2_beats_order1_extrapolation", masked,
            f"masked >= 3 dB and full-frame >= 1.5 dB (full-frame {full:.2f} dB)",
            masked >= 3.0 and full >= 1.5))
        gap = np.asarray(o2["masked_psnr_t"]) - np.asarray(o1["masked_psnr_t"])
        t = np.asarray(o1["times"])
        grow = gap[np.argmin(np.abs(t - 1.0))] - gap[np.argmin(np.abs(t - 0.8))]
        out.append(results.check("order2_gap_grows_with_horizon", grow, "> 0", grow > 0))
        out.append(results.at_least("order2_interpolation_gain",
                                    o2["masked_psnr_interp"] - o1["masked_psnr_interp"], 0.3))
        out.append(results.at_most("acceleration_recovered",
                                   float(np.nanmean(o2["acc_rel_error"])), 0.15))
    s3 = (_get(e1, "S3:order1"), _get(e1, "S3:order2"))
    if all(s3):
        out.append(results.at_least("order2_helps_non_polynomial",
                                    s3[1]["masked_psnr_extrap"] - s3[0]["masked_psnr_extrap"],
                                    0.5))
    s4 = (_get(e1, "S4:order1"), _get(e1, "S4:order2"))
    if all(s4) and o2:
        diff = abs(s4[1]["masked_psnr_extrap"] - s4[0]["masked_psnr_extrap"])
        ratio = float(np.nanmean(s4[1]["fg_acc_norm"]) / np.nanmean(o2["fg_acc_norm"]))
        out.append(results.check(
            "order2_harmless_on_constant_velocity", diff,
            f"<= 0.3 dB and fg ||a|| S4 / S1 < 0.1 (ratio {ratio:.3f})",
            diff <= 0.3 and ratio < 0.1))
    s5 = (_get(e1, "S5:order2"), _get(e1, "S5:order2_no_temporal"))
    if all(s5):
        out.append(results.at_least("temporal_opacity_handles_transient",
                                    s5[0]["masked_psnr_all"] - s5[1]["masked_psnr_all"], 1.0))
    return out


def e2_claims(e2: dict) -> list:
    out = []
    dec, cpl, pho = (_get(e2, f"{s}:default") for s in ("decoupled", "coupled3d", "photo"))
    if dec and pho:
        out.append(results.at_least("decoupled_beats_photometric",
                                    dec["masked_psnr_extrap"] - pho["masked_psnr_extrap"], 1.0))
    if dec and cpl:
        gain = dec["masked_psnr_extrap"] - cpl["masked_psnr_extrap"]
        ratio = dec["motion_epe"] / cpl["motion_epe"]
        out.append(results.check("decoupled_beats_coupled", gain,
                                 f">= 0.5 dB and EPE decoupled / coupled3d <= 0.8 "
                                 f"(ratio {ratio:.3f})", gain >= 0.5 and ratio <= 0.8))
    dn, cn = _get(e2, "decoupled:none"), _get(e2, "coupled3d:none")
    if dn and cn:
        out.append(results.at_most("coupled_matches_with_clean_labels",
                                   abs(dn["masked_psnr_extrap"] - cn["masked_psnr_extrap"]),
                                   0.3))
    return out


def claims(c, m: dict) -> list:
    """All claims whose experiments ran."""
    out = []
    if "e1" in m:
        out += e1_claims(m["e1"])
    if "e2" in m:
        out += e2_claims(m["e2"])
    if "e3" in m:
        out += ff.claims(m["e3"])
    return out


def _arm_rows(block: dict) -> list:
    rows = []
    for name, x in block.items():
        if name.startswith("_"):
            continue
        rows.append([name, f"{x['psnr_interp']:.2f}", f"{x['masked_psnr_interp']:.2f}",
                     f"{x['psnr_extrap']:.2f}", f"{x['masked_psnr_extrap']:.2f}",
                     f"{x['ssim_extrap']:.3f}", f"{np.nanmean(x['fg_acc_norm']):.3f}",
                     f"{np.nanmean(x['opacity_factor_t1']):.3f}",
                     f"{x['motion_epe']:.4f}" if "motion_epe" in x else "-"])
    return rows


HEADERS = ["arm", "PSNR int", "mPSNR int", "PSNR ext", "mPSNR ext", "SSIM ext", "fg |a|",
           "op(t=1)", "3D EPE"]


def summary(c, m: dict, claims_) -> str:
    """The printed report: one table per experiment, then the claims."""
    out = []
    if "e1" in m:
        out.append(results.format_table(_arm_rows(m["e1"]), HEADERS, title=(
            f"E1 representation: multi-view, photometric, {c.image_size}x{c.image_size}, "
            f"N={c.num_gaussians}, {c.steps} steps, {c.num_seeds} seed(s)")))
    if "e2" in m:
        out.append(results.format_table(_arm_rows(m["e2"]), HEADERS, title=(
            f"E2 TGs-Flow: monocular {c.e2_scene}, order 2, {c.e2_steps} steps, "
            f"{c.num_seeds} seed(s)")))
    if "e3" in m:
        out.append(ff.summary_table(c, m["e3"]))
    return "\n".join(out + [results.claims_table(claims_)])


def _flow_rgb(flow, scale=None):
    """Flow [H, W, 2] as colours: hue = direction, value = magnitude / scale."""
    from matplotlib.colors import hsv_to_rgb

    flow = np.asarray(flow, np.float64)
    mag = np.linalg.norm(flow, axis=-1)
    scale = scale or max(float(np.max(mag)), 1e-6)
    hue = (np.arctan2(flow[..., 1], flow[..., 0]) / (2 * np.pi)) % 1.0
    return hsv_to_rgb(np.stack([hue, np.ones_like(hue), np.clip(mag / scale, 0, 1)], -1))


@jax.jit
def _arm_flow(g, arm, cam, t, cam2, t2):
    """``render.render_flow`` of one fit with its arm applied: one compiled program for every
    arm (run eagerly it compiled ~40 small ones)."""
    return render.render_flow(fitlib.apply_arm(g, arm), cam, t, cam2, t2)


def flow_example(views: dict, fd, g, arms: list, scene, view: int = 5, horizon: int = 1
                 ) -> dict:
    """GT, pseudo and rendered flow (each E2 arm with flow or scene-flow supervision, seed 0)
    for one training view and horizon, as arrays for ``flow.png``."""
    # Indexed on the host: indexing a device array eagerly compiles a program per shape.
    cam = camlib.index(jax.tree.map(np.asarray, fd.cams), view)
    cam2 = camlib.index(camlib.index(jax.tree.map(np.asarray, fd.cams2), view), horizon)
    t, t2 = float(np.asarray(fd.times)[view]), float(np.asarray(fd.times2)[view, horizon])
    out = {"gt": np.asarray(views["flow"][view, horizon]),
           "pseudo": np.asarray(fd.flow)[view, horizon],
           "valid": np.asarray(fd.flow_valid)[view, horizon]}
    for i, (_, name, arm) in enumerate(arms):
        flow, alpha = _arm_flow(jax.tree.map(lambda x: x[i, 0], g), arm, cam, t, cam2, t2)
        out[name] = np.where(np.asarray(alpha)[..., None] > 0.5, np.asarray(flow), 0.0)
    return out


def plots(c, workdir: str, m: dict, art: dict) -> list:
    """The figures of spec §Experiment; returns their paths."""
    paths = []
    panels = []
    if "e1" in m:
        scenes_ = sorted({k.split(":")[0] for k in m["e1"] if not k.startswith("_")})
        panels += [("E1 " + s, {k.split(":")[1]: v for k, v in m["e1"].items()
                                if k.startswith(s + ":")}) for s in scenes_]
    if "e2" in m:
        panels.append((f"E2 {c.e2_scene} (monocular)",
                       {k: v for k, v in m["e2"].items() if not k.startswith("_")}))
    if panels:
        fig, axes = plotting.figure(1, len(panels), size=(4.0, 3.2))
        axes = np.atleast_1d(axes)
        for ax, (title, arms) in zip(axes, panels):
            for name, x in arms.items():
                ax.plot(x["times"], x["masked_psnr_t"], marker="o", ms=3, label=name)
            ax.axvspan(0.7, 1.02, color="0.9", zorder=0)
            ax.set(title=title, xlabel="t (shaded: extrapolation)", ylabel="masked PSNR (dB)")
            ax.legend(fontsize=7)
        paths.append(plotting.save(fig, os.path.join(workdir, "extrapolation_psnr.png")))
    rows = []
    if "e1" in art:
        rows += [(k, v) for k, v in art["e1"]["renders"].items()]
    if "e2" in art:
        rows += [("E2 " + k, v) for k, v in art["e2"]["renders"].items()]
    if rows:
        ncol = min(6, len(rows))
        nrow = -(-len(rows) // ncol)
        fig, axes = plotting.figure(nrow, ncol, size=(1.8, 1.9))
        axes = np.atleast_1d(axes).reshape(-1)
        for ax in axes:
            ax.axis("off")
        for ax, (name, img) in zip(axes, rows):
            ax.imshow(np.clip(img, 0, 1), interpolation="nearest")
            ax.set_title(name, fontsize=7)
        fig.suptitle("held-out camera at t = 1.0 (extrapolation)", fontsize=9)
        paths.append(plotting.save(fig, os.path.join(workdir, "renders.png")))
    if "e2" in art:
        f = art["e2"]["flow"]
        names = [k for k in f if k != "valid"]
        scale = float(np.max(np.linalg.norm(f["gt"], axis=-1))) or 1.0
        fig, axes = plotting.figure(1, len(names), size=(1.9, 2.0))
        for ax, name in zip(np.atleast_1d(axes), names):
            ax.imshow(_flow_rgb(f[name], scale), interpolation="nearest")
            ax.set_title(name, fontsize=7)
            ax.axis("off")
        fig.suptitle("forward flow t -> t + delta (hue: direction, value: magnitude)",
                     fontsize=8)
        paths.append(plotting.save(fig, os.path.join(workdir, "flow.png")))
    if "e3" in art:
        paths += ff.plots(c, workdir, m["e3"], art["e3"])
    return paths
