"""Analysis of a scaling run (spec §Analysis, §Claims): the IsoFLOP table, best sizes and
L*, the paired low-var - NELBO differences, the fits across budgets (N* and L* - H power
laws, the compute multiplier with its bootstrap CI), the Pareto frontier of (NFE, oracle
Gen-PPL), and the claims computed from them. Pure NumPy on the host."""

from __future__ import annotations

import numpy as np

from icml26_jax.core import results
from icml26_jax.core.flags import as_tuple
from icml26_jax.discrete_diffusion import model as model_lib
from icml26_jax.discrete_diffusion import scaling

PAIR = ("mdlm", "mdlm_lowvar")  # the MDLM objectives trained as one vmapped group
DEFAULT_CLAIMS = ("isoflop_interior_minimum", "family_ordering", "lowvar_improves_mdlm",
                  "perplexity_misleads_across_families", "pareto_frontier_shape")
FULL_CLAIMS = DEFAULT_CLAIMS + ("lowvar_compute_multiplier", "lowvar_optimum_smaller",
                                "scaling_exponents_in_range")


def pareto_frontier(points) -> list[int]:
    """Indices of the (cost, quality) points not dominated (lower is better in both)."""
    pts = np.asarray(points, np.float64)
    keep = []
    for i, (a, b) in enumerate(pts):
        dominated = np.any((pts[:, 0] <= a) & (pts[:, 1] <= b)
                           & ((pts[:, 0] < a) | (pts[:, 1] < b)))
        if not dominated:
            keep.append(i)
    return keep


def isoflop_table(runs: list[dict], sizes, families) -> dict:
    """``{budget: {family: {"N": [...], "size": [...], "loss": [...] (seed mean),
    "seeds": [[...]]}}}`` over the sizes present."""
    table: dict = {}
    for r in runs:
        fam_t = table.setdefault(r["budget"], {}).setdefault(r["family"], {})
        fam_t.setdefault(r["size"], []).append(r["val"])
    out = {}
    for C, fams in table.items():
        out[C] = {}
        for f in families:
            if f not in fams:
                continue
            ss = [s for s in sizes if s in fams[f]]
            out[C][f] = {"size": ss, "N": [model_lib.non_embedding_params(s) for s in ss],
                         "loss": [float(np.mean(fams[f][s])) for s in ss],
                         "seeds": [list(map(float, fams[f][s])) for s in ss]}
    return out


def best_size(entry: dict) -> str:
    return entry["size"][int(np.argmin(entry["loss"]))]


def summarise(c, runs: list[dict], pareto: dict, floor: tuple[float, float]) -> dict:
    """Metrics of the study: the IsoFLOP table, best sizes, L*, the MDLM pair differences,
    fits (>= 3 budgets), the Pareto table and its frontier."""
    sizes, fams = as_tuple(c.sizes, str, name="sizes"), as_tuple(c.families, str, name="families")
    iso = isoflop_table(runs, sizes, fams)
    budgets = sorted(iso)
    m = {"floor": floor[0], "floor_se": floor[1], "budgets": budgets,
         "isoflop": {f"{C:.3g}": v for C, v in iso.items()}, "best_size": {}, "l_star": {},
         "fits": {}, "lowvar_minus_nelbo": {}}
    for C in budgets:
        key = f"{C:.3g}"
        m["best_size"][key] = {f: best_size(e) for f, e in iso[C].items()}
        m["l_star"][key] = {f: float(min(e["loss"])) for f, e in iso[C].items()}
        if all(f in iso[C] for f in PAIR):
            a, b = iso[C]["mdlm_lowvar"], iso[C]["mdlm"]
            m["lowvar_minus_nelbo"][key] = {
                s: [lv - nb for lv, nb in zip(a["seeds"][i], b["seeds"][b["size"].index(s)])]
                for i, s in enumerate(a["size"]) if s in b["size"]}
        m["fits"][key] = {}
        for f, e in iso[C].items():
            if len(e["N"]) >= 3:
                fit = scaling.fit_isoflop(e["N"], e["loss"])
                m["fits"][key][f] = fit._asdict()
    if len(budgets) >= 3:
        m["power_laws"] = {}
        for f in fams:
            pts = [(C, m["fits"][f"{C:.3g}"].get(f)) for C in budgets]
            pts = [(C, d) for C, d in pts if d is not None and d["interior"]]
            ls = [(C, m["l_star"][f"{C:.3g}"][f]) for C in budgets if f in iso[C]]
            entry = {}
            if len(pts) >= 3:
                entry["n_star"] = scaling.fit_power_law([p[0] for p in pts],
                                                        [p[1]["n_star"] for p in pts])._asdict()
            if len(ls) >= 3 and all(v > floor[0] for _, v in ls):
                pl = scaling.fit_power_law([p[0] for p in ls], [v - floor[0] for _, v in ls])
                entry["l_star"] = dict(pl._asdict(), gamma=-pl.slope)
            m["power_laws"][f] = entry
        if all(f in fams for f in PAIR):
            m["compute_multiplier"] = _multiplier(iso, budgets, floor[0])
    m["pareto"] = {f"{C:.3g}": p for C, p in pareto.items()}
    m["frontier"] = {}
    for C, p in pareto.items():
        pts, labels = [], []
        for f, d in p.items():
            for T, n_, g in zip(d["T"], d["nfe"], d["gen_ppl"]):
                pts.append((n_, g))
                labels.append(f"{f}@T={int(T)}")
        front = pareto_frontier(pts) if pts else []
        m["frontier"][f"{C:.3g}"] = sorted(
            [labels[i] for i in front], key=lambda s: pts[labels.index(s)][0])
    return m


def _multiplier(iso, budgets, floor) -> dict:
    """k = C_NELBO(L) / C_low-var(L) from the L*(C) envelopes, with a 90% bootstrap CI over
    sizes (resampled IsoFLOP points) and seeds."""

    def envelope(f, rng=None):
        cs, ls = [], []
        for C in budgets:
            e = iso[C][f]
            loss = np.asarray([np.mean(s if rng is None else rng.choice(s, len(s)))
                               for s in e["seeds"]])
            if rng is not None:
                idx = np.unique(rng.choice(len(loss), len(loss)))
                loss = loss[idx] if idx.size else loss
            cs.append(C)
            ls.append(float(loss.min()))
        return np.asarray(cs), np.asarray(ls)

    def stat(rng=None):
        try:
            c1, l1 = envelope("mdlm", rng)
            c2, l2 = envelope("mdlm_lowvar", rng)
            return scaling.compute_multiplier(c1, l1, c2, l2, floor)
        except ValueError:
            return float("nan")

    k = stat()
    lo, hi = scaling.bootstrap_ci(stat, n=500, level=0.9, seed=0)
    return {"k": k, "ci90": [lo, hi]}


def claims(m: dict, c) -> list[results.Claim]:
    """The claims the variant evaluates (spec §Claims; thresholds fixed before any run)."""
    if c.variant == "smoke":
        return []
    fams = as_tuple(c.families, str, name="families")
    sizes = as_tuple(c.sizes, str, name="sizes")
    budgets = m["budgets"]
    full = c.variant in ("full", "gpu")  # the gpu variant runs the full grid
    out = []
    # 1. isoflop_interior_minimum
    if full:
        n_ok = min(sum(bool(m["fits"][f"{C:.3g}"].get(f, {}).get("interior", False))
                       and m["fits"][f"{C:.3g}"][f]["curvature"] > 0 for C in budgets)
                   for f in fams)
        out.append(results.at_least("isoflop_interior_minimum", n_ok, 2))
    else:
        C = f"{budgets[0]:.3g}"
        interior = sum(m["best_size"][C][f] not in (sizes[0], sizes[-1])
                       for f in m["best_size"][C])
        out.append(results.at_least("isoflop_interior_minimum", interior,
                                    min(3, len(m["best_size"][C]))))
    # 2. family_ordering: margin of the ordering (min over budgets; > 0 holds)
    need = ("ar", "mdlm_lowvar", "duo")
    if all(f in fams for f in need):
        margins = []
        for C in budgets:
            ls = m["l_star"][f"{C:.3g}"]
            above = min(ls[f] for f in ls) - (m["floor"] + 2 * m["floor_se"])
            margins.append(min(ls["mdlm_lowvar"] - ls["ar"], ls["duo"] - ls["mdlm_lowvar"],
                               above))
        out.append(_positive("family_ordering", min(margins),
                             "L*_AR < L*_MDLM-low-var < L*_Duo, all > H + 2 s.e."))
    # 3. lowvar_improves_mdlm: 1 when both conditions hold at every budget with 3 seeds
    if all(f in fams for f in PAIR):
        ok = []
        for C in budgets:
            d = m["lowvar_minus_nelbo"].get(f"{C:.3g}", {})
            if not d or len(next(iter(d.values()))) < 3:
                continue
            means = {s: float(np.mean(v)) for s, v in d.items()}
            best = m["best_size"][f"{C:.3g}"]["mdlm_lowvar"]
            ok.append(sum(v < 0 for v in means.values()) >= min(2, len(means))
                      and all(v < 0 for v in d[best]))
        if ok:
            out.append(results.at_least("lowvar_improves_mdlm", float(all(ok)), 1.0))
    # 6. perplexity_misleads_across_families
    if all(f in fams for f in ("mdlm_lowvar", "duo")) and m["pareto"]:
        margins = []
        for C, p in m["pareto"].items():
            ls = m["l_star"][C]
            for T in (4, 8, 16):
                if T not in list(p["duo"]["T"]) or T not in list(p["mdlm_lowvar"]["T"]):
                    continue
                i, j = list(p["duo"]["T"]).index(T), list(p["mdlm_lowvar"]["T"]).index(T)
                margins.append(min(ls["duo"] - ls["mdlm_lowvar"],
                                   p["mdlm_lowvar"]["gen_ppl"][j] - p["duo"]["gen_ppl"][i],
                                   p["duo"]["unigram"][i] - 0.95 * m["data_unigram"]))
        if margins:
            out.append(_positive("perplexity_misleads_across_families", min(margins),
                                 "NELBO(Duo) > NELBO(MDLM-low-var), Gen-PPL(Duo) < "
                                 "Gen-PPL(MDLM-low-var) at T=4,8,16, unigram(Duo) >= 0.95 data"))
    # 7. pareto_frontier_shape
    if all(f in fams for f in ("ar", "mdlm_lowvar", "duo")) and m["frontier"]:
        ok = []
        for C, front in m["frontier"].items():
            p = m["pareto"][C]
            best_ppl = min((g, f) for f, d in p.items() for g in d["gen_ppl"])[1]
            ok.append(front[0] == "duo@T=4" and best_ppl == "ar"
                      and not any(s.startswith("mdlm_lowvar@") for s in front))
        out.append(results.at_least("pareto_frontier_shape", float(all(ok)), 1.0))
    if full:
        if "compute_multiplier" in m:
            k, (lo, _) = m["compute_multiplier"]["k"], m["compute_multiplier"]["ci90"]
            out.append(results.at_least("lowvar_compute_multiplier",
                                        min(k - 1.05, lo - 1.0) + 1.05, 1.05))
        if all(f in fams for f in PAIR):
            n_le = sum(m["fits"][f"{C:.3g}"].get("mdlm_lowvar", {}).get("n_star", np.nan)
                       <= m["fits"][f"{C:.3g}"].get("mdlm", {}).get("n_star", np.nan)
                       for C in budgets)
            out.append(results.at_least("lowvar_optimum_smaller", n_le, 3))
        pl = m.get("power_laws", {})
        margin = []
        for f in need:
            a = pl.get(f, {}).get("n_star", {}).get("slope", np.nan)
            r2 = pl.get(f, {}).get("l_star", {}).get("r2", np.nan)
            margin.append(min(a - 0.3, 0.9 - a, r2 - 0.9))
        out.append(_positive("scaling_exponents_in_range", min(margin),
                             "a in [0.3, 0.9] and R^2 >= 0.9 for AR, MDLM-low-var, Duo"))
    return out


def _positive(name: str, margin: float, what: str) -> results.Claim:
    """A claim whose measured value is the margin of a conjunction (> 0 holds)."""
    return results.check(name, margin, f"> 0 ({what})", margin > 0)
