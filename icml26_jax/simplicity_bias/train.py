"""The simplicity-bias experiment (spec §Experiment): online SGD of the single-index denoiser
on the mixed cumulant model at several d (pair-wise escape, fourth-cumulant escape, the
linear budget, correlated latents), the diffusion information exponents by quadrature, and
the digits clone test; claims 1-16, figures and ``results.json``.

Each part is ONE compiled program: its dimensions, step sizes, budgets and latent
correlations are rows of one vmapped batch (``online.run_online_group``, dimensions padded),
sharded over the devices; each part's result is checkpointed and restored on resume
(``core.checkpoint.cached``).
"""

from __future__ import annotations

import math
import os
import time
from typing import NamedTuple

import jax
import numpy as np
from absl import logging

from icml26_jax.core import checkpoint, distributed, results
from icml26_jax.core.flags import as_tuple
from icml26_jax.core import mesh as mesh_lib
from icml26_jax.simplicity_bias import configs, images, mcm, online, report, theory

PAPER = "simplicity_bias"
SMOKE_CLAIMS = ("pairwise_linear_slope", "hoc_invisible_at_linear_budget",
                "pairwise_learned_at_linear_budget", "exponent_pairwise", "exponent_cumulant",
                "exponent_correlated", "exponent_independent_control",
                "digits_gaussian_phase", "digits_specialisation")


def normalise_config(c) -> None:
    """Tuple fields given on the command line as ``a,b,c`` strings become tuples (in place):
    ``parts``, every ``<part>.dims``, ``correlated.latents``, ``images.b_levels`` and
    ``images.claim_b``."""
    c.parts = as_tuple(c.parts, str, name="parts")
    for part in ("pairwise", "cumulant", "linear_budget", "correlated"):
        c[part].dims = as_tuple(c[part].dims, int, name=f"{part}.dims")
    c.correlated.latents = as_tuple(c.correlated.latents, str, name="correlated.latents")
    c.images.b_levels = as_tuple(c.images.b_levels, float, name="images.b_levels")
    c.images.claim_b = as_tuple(c.images.claim_b, float, name="images.claim_b")


def validate_config(c) -> None:
    """Raises ``ValueError`` naming the first bad field of config ``c``."""
    if c.variant not in configs.VARIANTS:
        raise ValueError(f"variant must be one of {configs.VARIANTS}, got {c.variant!r}")
    parts = as_tuple(c.parts, str, name="parts")
    bad = [p for p in parts if p not in configs.PARTS]
    if bad or not parts:
        raise ValueError(f"parts must be a non-empty subset of {', '.join(configs.PARTS)}, "
                         f"got parts={c.parts!r}")
    if int(c.replicas) < 1:
        raise ValueError(f"replicas must be >= 1, got replicas={c.replicas}")
    if not float(c.eta) > 0:
        raise ValueError(f"eta must be > 0, got eta={c.eta}")
    if not 0.0 < float(c.a) < 1.0:
        raise ValueError(f"a must be in (0, 1), got a={c.a}")
    mcm.MCMConfig(d=2, beta_u=float(c.beta_u), beta_v=float(c.beta_v)).validate()
    mcm.MCMConfig(d=2, beta_u=float(c.cumulant.beta_u),
                  beta_v=float(c.cumulant.beta_v)).validate()
    if not 0.0 < float(c.thr) < 1.0:
        raise ValueError(f"thr must be in (0, 1), got thr={c.thr}")
    for part in ("pairwise", "cumulant", "linear_budget", "correlated"):
        dims = as_tuple(c[part].dims, int, name=f"{part}.dims")
        if len(dims) < 2 or min(dims) < 2:
            raise ValueError(f"{part}.dims needs >= 2 dimensions, each >= 2 (a scaling law "
                             f"needs several d), got {c[part].dims!r}")
    for lat in as_tuple(c.correlated.latents, str, name="correlated.latents"):
        if lat not in mcm.LATENT_CORRS:
            raise ValueError(f"correlated.latents entries must be in {mcm.LATENT_CORRS}, "
                             f"got {lat!r}")
    e = c.exponent
    if not (0.0 < float(e.m_min) < float(e.m_max)
            and float(e.m_u_fixed) ** 2 + float(e.m_max) ** 2 <= 1.0):
        raise ValueError(f"exponent needs 0 < m_min < m_max and m_u_fixed^2 + m_max^2 <= 1, "
                         f"got m_min={e.m_min}, m_max={e.m_max}, m_u_fixed={e.m_u_fixed}")
    image_config(c).validate()


def image_config(c) -> images.CloneConfig:
    """The :class:`images.CloneConfig` of config ``c``."""
    i = c.images
    return images.CloneConfig(int(i.epochs), int(i.batch), float(i.lr), int(i.hidden),
                              as_tuple(i.b_levels, float), int(i.n_checkpoints))


# --------------------------------------------------------------------------- online parts


def _mesh(c, n_arms: int = 1):
    if not c.shard or jax.device_count() == 1:
        return None
    m = mesh_lib.runs_mesh(int(c.replicas) * n_arms)
    return m if m.size > 1 else None


class Arm(NamedTuple):
    """One configuration of a part: its output name, MCM, step-size rule and budget."""

    name: str  # e.g. "d64" or "nonlinear/d64"
    key: jax.Array
    mcm_cfg: mcm.MCMConfig
    eta: float
    q: float
    n_steps: int


def _group(c, arms, records: int, link: str, **kw) -> dict:
    """Runs the arms as ONE program (``online.run_online_group``: dimensions, step sizes,
    budgets and latent correlations vmapped, replicas sharded) -> ``{name: {ns, m_u, m_v,
    delta}}``."""
    ocs = [online.OnlineConfig(
        d=a.mcm_cfg.d, delta=float(c.eta) * float(a.eta) * a.mcm_cfg.d ** (-float(a.q)),
        n_steps=int(a.n_steps), n_records=int(min([records] + [x.n_steps for x in arms])),
        replicas=int(c.replicas), link=link, thr=float(c.thr), a=float(c.a)) for a in arms]
    res = online.run_online_group([a.key for a in arms], [a.mcm_cfg for a in arms], ocs,
                                  mesh=_mesh(c, len(arms)), **kw)
    return {a.name: {"ns": np.asarray(r.ns, np.int64), "m_u": np.asarray(r.m_u, np.float32),
                     "m_v": np.asarray(r.m_v, np.float32), "delta": float(oc.delta)}
            for a, r, oc in zip(arms, res, ocs)}


def _cached_part(c, workdir, part, compute) -> dict:
    """A part's result, checkpointed as a whole and restored on resume."""
    fp = checkpoint.config_fingerprint({
        "part": part, "sub": c[part].to_dict(),
        "glob": {k: c[k] for k in ("seed", "replicas", "beta_u", "beta_v", "a", "eta", "thr")}})
    return checkpoint.cached(os.path.join(workdir, "ckpt", part), fingerprint=fp,
                             compute=compute, name=part)


def _key(c, part: str, d: int, extra: int = 0):
    k = jax.random.fold_in(jax.random.key(int(c.seed)), configs.PARTS.index(part))
    return jax.random.fold_in(jax.random.fold_in(k, d), extra)


def _mcm(c, d, **kw):
    return mcm.MCMConfig(d, float(c.beta_u), float(c.beta_v), **kw)


def part_pairwise(c, workdir) -> dict:
    """Link both, delta = eta / d, n = 20 d: the covariance spike u escapes at n ~ d log d."""
    p = c.pairwise
    arms = [Arm(f"d{d}", _key(c, "pairwise", d), _mcm(c, d), p.eta, p.q, p.n_over_d * d)
            for d in as_tuple(p.dims, int)]
    return _cached_part(c, workdir, "pairwise", lambda: _group(c, arms, p.records, "both"))


def part_cumulant(c, workdir) -> dict:
    """beta_u = 0, link v, delta = 2 / d^2, up to 8 d^3: the fourth-cumulant spike v escapes
    at n ~ d^3. A d stops one d^3 after its median |m_v| crossed thr; host checks every
    ``segment_d3`` d_max^3 steps."""
    p = c.cumulant
    dims = as_tuple(p.dims, int)
    cfg = lambda d: mcm.MCMConfig(d, float(p.beta_u), float(p.beta_v))  # noqa: E731
    arms = [Arm(f"d{d}", _key(c, "cumulant", d), cfg(d), p.eta, p.q, int(p.n_over_d3 * d ** 3))
            for d in dims]

    def log(n, meds):
        logging.log_every_n_seconds(logging.INFO, "cumulant: n = %d, median |m_v| by d: %s",
                                    10, n, ", ".join(f"{d}: {m:.2f}" for d, m in zip(dims, meds)))

    return _cached_part(c, workdir, "cumulant", lambda: _group(
        c, arms, p.records, "v", stop_extra=[int(p.extra_d3 * d ** 3) for d in dims],
        watch="v", segment_steps=max(1, int(p.segment_d3 * max(dims) ** 3)), progress=log))


def part_linear_budget(c, workdir) -> dict:
    """Independent latents, link both, delta = 1/d, n = 100 d: u is learned, v is not."""
    p = c.linear_budget
    arms = [Arm(f"d{d}", _key(c, "linear_budget", d), _mcm(c, d), p.eta, p.q, p.n_over_d * d)
            for d in as_tuple(p.dims, int)]
    return _cached_part(c, workdir, "linear_budget",
                        lambda: _group(c, arms, p.records, "both"))


def part_correlated(c, workdir) -> dict:
    """Link both, delta = 0.25 / d, n = 150 d, for each latent correlation (same keys: paired
    spikes, init and noise), and `sign` at delta = 1/d, n = 50 d next to its PCA leakage;
    every (latents, d) in one program."""
    p = c.correlated
    tau = float(p.sign_tau)
    arms = []
    for d in as_tuple(p.dims, int):
        k = _key(c, "correlated", d)
        arms += [Arm(f"{lat}/d{d}", k, _mcm(c, d, latent_corr=lat, tau=tau), p.eta, p.q,
                     p.n_over_d * d) for lat in as_tuple(p.latents, str) if lat != "sign"]
        arms.append(Arm(f"sign/d{d}", k, _mcm(c, d, latent_corr="sign", tau=tau), p.sign_eta,
                        p.q, p.sign_n_over_d * d))

    def compute():
        flat = _group(c, arms, p.records, "both")
        out = {}
        for name, r in flat.items():
            lat, dd = name.split("/")
            out.setdefault(lat, {})[dd] = r
        return out

    return _cached_part(c, workdir, "correlated", compute)


# --------------------------------------------------------------------------- exponents


def exponent_curves(c) -> dict:
    """The diffusion information exponents by float64 quadrature (spec claims 9-12, plus the
    optional Tsodyks latent, k = 3, reported): for each case the grid m, |L(m) - L(0)| and
    the fitted log-log slope."""
    e = c.exponent
    a = float(c.a)
    b = math.sqrt(1.0 - a * a)
    m = np.geomspace(float(e.m_min), float(e.m_max), int(e.points))
    bu, bv, mu0 = float(c.beta_u), float(c.beta_v), float(e.m_u_fixed)
    base = mcm.MCMConfig(2, bu, bv)
    cases = {
        # along u (link u): Var(s) - 1 = beta_u m_u^2, k = 2
        "pairwise": (base, "u", lambda cfg, x: (x, 0.0), (0.0, 0.0)),
        # along v with beta_u = 0 (link v): kappa_4(s) ~ m_v^4, k = 4
        "cumulant": (mcm.MCMConfig(2, 0.0, bv), "v", lambda cfg, x: (0.0, x), (0.0, 0.0)),
        # along v at m_u = 0.9 (link both): the mixed term m_u^3 m_v is linear, k = 1
        "correlated": (base._replace(latent_corr="nonlinear"), "both",
                       lambda cfg, x: (mu0, x), (mu0, 0.0)),
        # same with independent latents: k = 4
        "independent_control": (base, "both", lambda cfg, x: (mu0, x), (mu0, 0.0)),
        # optional: Tsodyks latent (third cumulant), link v, beta_u = 0: k = 3
        "tsodyks": (mcm.MCMConfig(2, 0.0, bv, nu="tsodyks", rho=float(e.tsodyks_rho)), "v",
                    lambda cfg, x: (0.0, x), (0.0, 0.0)),
    }
    out = {"m": m}
    for name, (cfg, link, at, zero) in cases.items():
        l0 = theory.population_loss(*zero, cfg, link, a, b)
        dl = lambda x, cfg=cfg, link=link, at=at, l0=l0: theory.population_loss(  # noqa: E731
            *at(cfg, x), cfg, link, a, b) - l0
        out[name] = {"delta_loss": np.array([dl(x) for x in m]),
                     "k": theory.fit_exponent(dl, m)}
    return out


# --------------------------------------------------------------------------- images


def part_images(c, workdir) -> dict:
    """The digits clone test (or a prepared TFDS image set, ``images.tfds_name``)."""
    i = c.images
    if i.tfds_name:
        x = images.load_images(i.tfds_name, "train", i.tfds_data_dir, int(i.tfds_size),
                               int(i.tfds_limit))
        perm = np.random.default_rng(int(c.seed)).permutation(len(x))
        n_tr = int(0.78 * len(x))
        x_tr, x_te = images.standardise(x[perm[:n_tr]], x[perm[n_tr:]])
        source = f"tfds:{i.tfds_name}"
    else:
        x_tr, x_te = images.load_digits_split(int(c.seed))
        source = "sklearn.datasets.load_digits"
    fp = checkpoint.config_fingerprint({"images": i.to_dict(), "seed": c.seed})
    res = checkpoint.cached(os.path.join(workdir, "ckpt", "images"), fingerprint=fp,
                            compute=lambda: images.clone_curves(
                                int(c.seed), x_tr, x_te, image_config(c)._replace(
                                    n_clone=int(x_te.shape[0]))), name="images")
    res = dict(res)
    res["source"] = source
    return res


# --------------------------------------------------------------------------- metrics, claims


def final_overlap(m) -> float:
    """Mean over replicas and over the last 20 % of the records of |m| [R, n_rec]."""
    m = np.abs(np.asarray(m))
    k = max(1, int(round(0.2 * m.shape[1])))
    return float(m[:, -k:].mean())


def _slope(x, y) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or not np.all(np.isfinite(y)):
        return math.nan
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def collapse_spread(runs: dict, points: int = 50) -> float:
    """Max over a common n/d grid of (max - min over d) of the median |m_u| curves,
    interpolated in log n/d; the grid spans the n/d range every d recorded."""
    curves = []
    for d in report.dims_of(runs):
        r = runs[f"d{d}"]
        curves.append((np.log(r["ns"] / d), np.median(np.abs(r["m_u"]), axis=0)))
    lo = max(c[0][0] for c in curves)
    hi = min(c[0][-1] for c in curves)
    grid = np.linspace(lo, hi, points)
    vals = np.stack([np.interp(grid, x, y) for x, y in curves])
    return float(np.max(vals.max(0) - vals.min(0)))


def summarise(out: dict, c) -> dict:
    """Metrics of spec §Experiment from the raw part outputs."""
    thr = float(c.thr)
    met = {}
    if "pairwise" in out:
        runs = out["pairwise"]
        dims = report.dims_of(runs)
        ns = [online.escape_time(runs[f"d{d}"]["ns"], runs[f"d{d}"]["m_u"], thr) for d in dims]
        met["pairwise"] = {"dims": dims, "n_star_u": ns,
                           "n_star_u_over_d": [n / d for n, d in zip(ns, dims)],
                           "slope": _slope(dims, ns), "collapse_spread": collapse_spread(runs)}
    if "cumulant" in out:
        runs = out["cumulant"]
        dims = report.dims_of(runs)
        ns = [online.escape_time(runs[f"d{d}"]["ns"], runs[f"d{d}"]["m_v"], thr) for d in dims]
        r2 = [n / d ** 2 for n, d in zip(ns, dims)]
        met["cumulant"] = {"dims": dims, "n_star_v": ns,
                           "n_star_v_over_d3": [n / d ** 3 for n, d in zip(ns, dims)],
                           "n_star_v_over_d2": r2, "slope": _slope(dims, ns),
                           "superquadratic_ratio": r2[-1] / r2[0],
                           "steps_run_over_d3": [int(runs[f"d{d}"]["ns"][-1]) / d ** 3
                                                 for d in dims]}
    if "linear_budget" in out:
        runs = out["linear_budget"]
        dims = report.dims_of(runs)
        mu = [final_overlap(runs[f"d{d}"]["m_u"]) for d in dims]
        mv = [final_overlap(runs[f"d{d}"]["m_v"]) for d in dims]
        met["linear_budget"] = {"dims": dims, "m_u": mu, "m_v": mv,
                                "m_v_sqrt_d": [m * math.sqrt(d) for m, d in zip(mv, dims)],
                                "init_m_v_sqrt_d": [float(np.abs(runs[f"d{d}"]["m_v"][:, 0])
                                                          .mean() * math.sqrt(d))
                                                    for d in dims]}
    if "correlated" in out:
        cor = {}
        for lat, runs in out["correlated"].items():
            dims = report.dims_of(runs)
            cor[lat] = {"dims": dims,
                        "m_v": [final_overlap(runs[f"d{d}"]["m_v"]) for d in dims],
                        "m_u": [final_overlap(runs[f"d{d}"]["m_u"]) for d in dims]}
        cfg = mcm.MCMConfig(2, float(c.beta_u), float(c.beta_v), "sign",
                            float(c.correlated.sign_tau))
        cor["sign"]["pca_overlap_v"] = mcm.pca_overlap_v(cfg)
        if "nonlinear" in cor and "independent" in cor:
            cor["ratio_at_max_d"] = cor["nonlinear"]["m_v"][-1] / cor["independent"]["m_v"][-1]
        met["correlated"] = cor
    if "exponent" in out:
        met["exponent"] = {k: v["k"] for k, v in out["exponent"].items() if k != "m"}
    if "images" in out:
        im = out["images"]
        bl = [round(float(b), 6) for b in im["b_levels"]]  # float32 levels, printed clean
        met["images"] = {
            "source": im["source"], "b_levels": bl, "steps": int(im["steps"][-1]),
            "L_real": im["L_real"][-1], "L_clone": im["L_clone"][-1], "L_W": im["L_W"],
            "L_W_clone": im["L_W_clone"], "L_W_theory": im["L_W_theory"],
            "final_gap": im["gap"][-1],
            "gaussian_phase_gap": [gaussian_phase_gap(im, j) for j in range(len(bl))]}
    return met


def gaussian_phase_gap(im: dict, j: int, within: float = 1.15) -> float:
    """Max clone gap at noise level j over the checkpoints up to the first one where
    L_real <= within * L_W (inf if L_real never gets there: claim 13 fails)."""
    ok = np.asarray(im["L_real"])[:, j] <= within * float(im["L_W"][j])
    if not ok.any():
        return math.inf
    return float(np.max(np.asarray(im["gap"])[: int(np.argmax(ok)) + 1, j]))


def _b_index(met: dict, bs) -> list[int]:
    bl = met["images"]["b_levels"]
    idx = [int(np.argmin(np.abs(np.asarray(bl) - b))) for b in bs]
    if any(abs(bl[i] - b) > 1e-6 for i, b in zip(idx, bs)):
        raise ValueError(f"images.claim_b={tuple(bs)} must be among b_levels={tuple(bl)}")
    return idx


def claims(met: dict, c) -> list[results.Claim]:
    """Claims 1-16 of spec §Claims from the metrics (only those whose part ran; the smoke
    variant evaluates the smoke claims with their smoke thresholds)."""
    smoke = c.variant == "smoke"
    cl = []
    if "pairwise" in met:
        lo, hi = (0.6, 1.7) if smoke else (0.8, 1.5)
        cl.append(results.in_range("pairwise_linear_slope", met["pairwise"]["slope"], lo, hi))
        cl.append(results.at_most("pairwise_curve_collapse",
                                  met["pairwise"]["collapse_spread"], 0.15))
    if "cumulant" in met:
        cl.append(results.in_range("cumulant_cubic_slope", met["cumulant"]["slope"], 2.5, 3.5))
        cl.append(results.at_least("cumulant_superquadratic",
                                   met["cumulant"]["superquadratic_ratio"], 3.0))
    if "linear_budget" in met:
        lb = met["linear_budget"]
        cl.append(results.at_most("hoc_invisible_at_linear_budget", max(lb["m_v_sqrt_d"]), 1.5))
        cl.append(results.at_least("pairwise_learned_at_linear_budget", min(lb["m_u"]), 0.6))
    if "correlated" in met and "nonlinear" in met["correlated"]:
        cor = met["correlated"]
        cl.append(results.at_least("correlated_latents_linear", min(cor["nonlinear"]["m_v"]),
                                   0.07))
        if "ratio_at_max_d" in cor:
            cl.append(results.at_least("correlated_vs_independent_ratio",
                                       cor["ratio_at_max_d"], 3.0))
    if "exponent" in met:
        k = met["exponent"]
        cl.append(results.at_most("exponent_pairwise", abs(k["pairwise"] - 2.0), 0.1))
        cl.append(results.at_most("exponent_cumulant", abs(k["cumulant"] - 4.0), 0.2))
        cl.append(results.at_most("exponent_correlated", abs(k["correlated"] - 1.0), 0.1))
        cl.append(results.at_most("exponent_independent_control",
                                  abs(k["independent_control"] - 4.0), 0.2))
    if "images" in met:
        im = met["images"]
        idx = _b_index(met, as_tuple(c.images.claim_b, float, name="images.claim_b"))
        cl.append(results.at_most("digits_gaussian_phase",
                                  max(im["gaussian_phase_gap"][j] for j in idx), 0.03))
        cl.append(results.at_least("digits_specialisation",
                                   min(im["final_gap"][j] for j in idx), 0.1 if smoke else 0.3))
        if not smoke:
            cl.append(results.at_most("digits_beats_wiener",
                                      max(im["L_real"][j] / im["L_W"][j] for j in idx), 0.9))
            cl.append(results.at_least("digits_clone_worse_than_wiener",
                                       min(im["L_clone"][j] / im["L_W_clone"][j] for j in idx),
                                       1.1))
    if smoke:
        cl = [x for x in cl if x.name in SMOKE_CLAIMS]
    return cl


# --------------------------------------------------------------------------- run


def run(config, workdir: str) -> dict:
    """Runs the enabled parts of ``config``, writes ``results.json`` and the figures.

    Returns:
      The results dict (as written).
    """
    c = config
    validate_config(c)
    t_start = time.time()
    parts = as_tuple(c.parts, str, name="parts")
    if distributed.is_primary():  # only process 0 writes (orbax makes its own directories)
        os.makedirs(workdir, exist_ok=True)
    logging.info("simplicity_bias %s: parts %s, %d replicas on %d device(s)", c.variant,
                 ", ".join(parts), c.replicas, jax.device_count())
    fns = {"pairwise": part_pairwise, "cumulant": part_cumulant,
           "linear_budget": part_linear_budget, "correlated": part_correlated,
           "exponent": lambda c, w: exponent_curves(c), "images": part_images}
    out, runtime = {}, {}
    for p in configs.PARTS:
        if p in parts:
            t0 = time.time()
            out[p] = fns[p](c, workdir)
            runtime[p] = time.time() - t0
            logging.info("part %s: %.1f s", p, runtime[p])
    met = summarise(out, c)
    met["runtime_s"] = runtime
    cl = claims(met, c)
    figs = report.figures(out, met, c, workdir)
    res = dict(paper=PAPER, variant=c.variant, seed=int(c.seed), config=c, metrics=met,
               claims=cl, runtime_s=time.time() - t_start, figures=figs)
    results.write_results(workdir, **res)
    if distributed.is_primary():
        print(report.table(met))
        print(results.claims_table(cl))
    return results.to_jsonable(res)
