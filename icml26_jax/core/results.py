"""``results.json`` of a run, the claims it checks, and plain-text tables of both.

Every run writes ``<workdir>/results.json``::

    claims = [results.at_least("speedup", speedup, 1.5),
              results.in_range("final_loss", loss, 0.0, 0.1)]
    results.write_results(workdir, paper="dsgd_hp", variant="smoke", seed=0, config=config,
                          metrics=metrics, claims=claims, runtime_s=time.time() - t0)
    print(results.claims_table(claims))
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
import tempfile
from collections.abc import Mapping, Sequence

import jax
import numpy as np
from absl import logging

from icml26_jax.core import distributed

RESULTS_FILE = "results.json"
_REQUIRED = {"paper": str, "variant": str, "seed": int, "config": dict, "metrics": dict,
             "claims": list, "runtime_s": numbers.Real}
_CLAIM_KEYS = {"name": str, "measured": (numbers.Real, type(None)), "threshold": str,
               "holds": bool, "expected": bool}


@dataclasses.dataclass(frozen=True)
class Claim:
    """One checked claim: a measured number against a threshold.

    Attributes:
      name: what is measured, e.g. ``"speedup_vs_adam"``.
      measured: the measured value (NaN if the run diverged).
      threshold: the condition as text, e.g. ``"[0.9, 1.1]"`` or ``">= 1.5"``.
      holds: whether ``measured`` satisfies the threshold (False for NaN).
      expected: False only for a limitation the spec documents as expected to fail.
    """

    name: str
    measured: float
    threshold: str
    holds: bool
    expected: bool = True

    def to_dict(self) -> dict:
        """The claim as a JSON-ready dict (NaN/inf ``measured`` becomes None)."""
        return {"name": self.name, "measured": to_jsonable(self.measured),
                "threshold": self.threshold, "holds": bool(self.holds),
                "expected": bool(self.expected)}


def _claim(name, measured, threshold, check, expected) -> Claim:
    measured = float(measured)
    # Comparisons with NaN are False anyway; the explicit test documents the intent.
    holds = not math.isnan(measured) and bool(check(measured))
    return Claim(str(name), measured, threshold, holds, bool(expected))


def in_range(name: str, measured, lo, hi, *, expected: bool = True) -> Claim:
    """Claim that ``lo <= measured <= hi``; threshold ``"[lo, hi]"``."""
    if lo > hi:
        raise ValueError(f"in_range({name!r}): lo={lo} must be <= hi={hi}")
    return _claim(name, measured, f"[{lo:g}, {hi:g}]", lambda m: lo <= m <= hi, expected)


def at_most(name: str, measured, bound, *, expected: bool = True) -> Claim:
    """Claim that ``measured <= bound``; threshold ``"<= bound"``."""
    return _claim(name, measured, f"<= {bound:g}", lambda m: m <= bound, expected)


def at_least(name: str, measured, bound, *, expected: bool = True) -> Claim:
    """Claim that ``measured >= bound``; threshold ``">= bound"``."""
    return _claim(name, measured, f">= {bound:g}", lambda m: m >= bound, expected)


def check(name: str, measured, threshold: str, holds, *, expected: bool = True) -> Claim:
    """Claim whose condition the caller evaluated (``holds``), e.g. a conjunction reported
    by its margin; ``threshold`` is the condition as text. A non-finite ``measured`` (a
    diverged run, a missing setting) never holds."""
    measured = float(measured)
    return Claim(str(name), measured, str(threshold),
                 bool(holds) and math.isfinite(measured), bool(expected))


def to_jsonable(tree):
    """Converts a pytree of arrays/scalars/configs to plain JSON values.

    Arrays become (nested) lists, NumPy/JAX scalars Python numbers, NaN and inf None (JSON
    has no NaN), tuples lists, dict keys strings, ``ConfigDict``s and dataclasses dicts.
    """
    if hasattr(tree, "to_dict") and callable(tree.to_dict):  # ConfigDict, Claim
        return to_jsonable(tree.to_dict())
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return to_jsonable(dataclasses.asdict(tree))
    if isinstance(tree, Mapping):
        return {str(k): to_jsonable(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [to_jsonable(v) for v in tree]
    if isinstance(tree, (bool, np.bool_)):
        return bool(tree)
    if isinstance(tree, (str, type(None))):
        return tree
    if isinstance(tree, (jax.Array, np.ndarray, np.generic)):
        arr = np.asarray(jax.device_get(tree))
        return to_jsonable(arr.tolist()) if arr.ndim else to_jsonable(arr.item())
    if isinstance(tree, numbers.Integral):
        return int(tree)
    if isinstance(tree, numbers.Real):
        return float(tree) if math.isfinite(tree) else None
    raise TypeError(f"cannot convert {type(tree).__name__} to JSON: {tree!r}")


def _file_mode() -> int:
    """The mode ``open`` gives a new file under the current umask (0644 under umask 022)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_results(workdir: str | os.PathLike, *, paper: str, variant: str, seed: int, config,
                  metrics, claims: Sequence[Claim | Mapping], runtime_s: float,
                  **extra) -> str | None:
    """Writes ``<workdir>/results.json`` on process 0 (atomically); other processes skip.

    Args:
      workdir: run directory (created if missing).
      paper: the paper's slug.
      variant: config variant, e.g. ``"default"`` or ``"smoke"``.
      seed: the run's seed.
      config: the run's config (dict or ``ConfigDict``).
      metrics: measured numbers (pytree of scalars/arrays).
      claims: :class:`Claim`s (or their dicts).
      runtime_s: wall-clock seconds of the run.
      **extra: further top-level keys (e.g. ``figures=[...]``).

    Returns:
      The path written, or None on processes other than 0.
    """
    d = to_jsonable({"paper": paper, "variant": variant, "seed": int(seed), "config": config,
                     "metrics": metrics, "claims": list(claims), "runtime_s": float(runtime_s),
                     **extra})
    validate_results(d)
    if not distributed.is_primary():
        return None
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, RESULTS_FILE)
    # A reader (or a killed run) never sees a half-written file: write aside, then rename.
    fd, tmp = tempfile.mkstemp(dir=workdir, prefix=".results.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(d, f, indent=2, allow_nan=False)
            f.write("\n")
        os.chmod(tmp, _file_mode())  # mkstemp makes it 0600; results are for every reader
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    if variant == "smoke" and d["claims"]:
        held = sum(bool(c["holds"]) for c in d["claims"])
        logging.info("smoke variant: %d/%d claims hold at toy size; smoke runs check the code "
                     "path, their claims are not results (run the default variant)", held,
                     len(d["claims"]))
    return path


def load_results(path_or_workdir: str | os.PathLike) -> dict:
    """Reads a ``results.json`` (given the file or the directory holding it)."""
    path = os.fspath(path_or_workdir)
    if os.path.isdir(path):
        path = os.path.join(path, RESULTS_FILE)
    with open(path) as f:
        return json.load(f)


def validate_results(d) -> None:
    """Raises ``ValueError`` naming the first missing or mistyped key of a results dict."""
    if not isinstance(d, Mapping):
        raise ValueError(f"results must be a dict, got {type(d).__name__}")
    for key, typ in _REQUIRED.items():
        if key not in d:
            raise ValueError(f"results is missing the key {key!r}")
        if not isinstance(d[key], typ) or isinstance(d[key], bool):
            raise ValueError(f"results[{key!r}] must be {_typename(typ)}, "
                             f"got {type(d[key]).__name__}: {d[key]!r}")
    for i, c in enumerate(d["claims"]):
        if not isinstance(c, Mapping):
            raise ValueError(f"results['claims'][{i}] must be a dict, got {type(c).__name__}")
        for key, typ in _CLAIM_KEYS.items():
            if key not in c:
                raise ValueError(f"results['claims'][{i}] is missing the key {key!r}")
            v = c[key]
            if not isinstance(v, typ) or (typ is not bool and isinstance(v, bool)):
                raise ValueError(f"results['claims'][{i}][{key!r}] must be {_typename(typ)}, "
                                 f"got {type(v).__name__}: {v!r}")


def _typename(typ) -> str:
    typs = typ if isinstance(typ, tuple) else (typ,)
    return " or ".join("a number" if t is numbers.Real else "null" if t is type(None)
                       else t.__name__ for t in typs)


def format_table(rows: Sequence[Sequence], headers: Sequence[str], *, title: str | None = None,
                 floatfmt: str = ".3g") -> str:
    """An aligned plain-text table.

    Floats use ``floatfmt``, bools print as yes/no and None as ``-``; numbers are
    right-aligned, text left-aligned.
    """
    def cell(v) -> str:
        if v is None:
            return "-"
        if isinstance(v, (bool, np.bool_)):
            return "yes" if v else "no"
        if isinstance(v, (float, np.floating)):
            return format(float(v), floatfmt)
        return str(v)

    rows = [list(r) for r in rows]
    for i, r in enumerate(rows):
        if len(r) != len(headers):
            raise ValueError(f"row {i} has {len(r)} cells, expected {len(headers)}: {r}")
    cells = [[cell(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[j]) for r in cells]) for j, h in enumerate(headers)]
    numeric = [all(isinstance(r[j], numbers.Number) and not isinstance(r[j], bool)
                   for r in rows if r[j] is not None) and bool(rows) for j in range(len(headers))]

    def line(values) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [title] if title else []
    out += [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out)


def claims_table(claims: Sequence[Claim | Mapping]) -> str:
    """Table of claims: name, measured, threshold, holds (``(expected to fail)`` marked)."""
    rows = []
    for c in claims:
        # asdict, not to_dict: a diverged claim shows "nan" rather than "-".
        c = dataclasses.asdict(c) if isinstance(c, Claim) else c
        holds = ("yes" if c["holds"] else "no") + ("" if c.get("expected", True)
                                                   else " (expected to fail)")
        rows.append([c["name"], c["measured"], c["threshold"], holds])
    return format_table(rows, ["claim", "measured", "threshold", "holds"], floatfmt=".4g")


SUMMARY_FILE = "summary.json"


def _lookup(metrics: Mapping, path: str):
    node = metrics
    for part in path.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            raise ValueError(f"metric {path!r} is not in every run's metrics (missing {part!r})")
        node = node[part]
    return node


def _mean_sd(values) -> tuple[float | None, float | None]:
    v = np.asarray([np.nan if x is None else float(x) for x in values], np.float64)
    if not v.size or not np.all(np.isfinite(v)):
        return None, None
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def summarise_seeds(runs: Sequence[Mapping], metrics: Sequence[str] = ()) -> dict:
    """Summary of the same experiment run on several seeds (the confirmatory run).

    Args:
      runs: ``results.json`` dicts (see :func:`load_results`) of one paper and variant.
      metrics: ``/``-separated paths into ``metrics`` to summarise too, e.g.
        ``"arms/grace/acc"``; each must hold a number in every run.

    Returns:
      A JSON-ready dict: ``paper``, ``variant``, ``seeds``, ``runtime_s`` (per seed),
      ``claims`` (per claim: ``name``, ``threshold``, ``expected``, per-seed ``measured``
      and ``holds``, ``mean``, ``sd`` (sample, ddof=1), ``holds_on`` (how many seeds)) and
      ``metrics`` (per path: per-seed ``values``, ``mean``, ``sd``). Mean and sd are None
      when a seed's value is not finite.

    Raises:
      ValueError: no runs, runs of different papers/variants, repeated seeds, claims that
        differ between runs, or a metric path missing from a run.
    """
    runs = list(runs)
    if not runs:
        raise ValueError("summarise_seeds needs at least one results dict")
    for r in runs:
        validate_results(r)
    first = runs[0]
    for r in runs[1:]:
        for key in ("paper", "variant"):
            if r[key] != first[key]:
                raise ValueError(f"runs differ in {key!r}: {first[key]!r} vs {r[key]!r}")
    seeds = [r["seed"] for r in runs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"repeated seeds {seeds}: summarise distinct runs")
    names = [c["name"] for c in first["claims"]]
    for r in runs[1:]:
        other = [c["name"] for c in r["claims"]]
        if other != names:
            raise ValueError(f"seed {r['seed']} has claims {other}, seed {first['seed']} {names}")
    claims = []
    for i, name in enumerate(names):
        cs = [r["claims"][i] for r in runs]
        mean, sd = _mean_sd([c["measured"] for c in cs])
        claims.append({"name": name, "threshold": cs[0]["threshold"],
                       "expected": cs[0]["expected"],
                       "measured": [c["measured"] for c in cs],
                       "holds": [c["holds"] for c in cs], "mean": mean, "sd": sd,
                       "holds_on": sum(bool(c["holds"]) for c in cs)})
    summary_metrics = {}
    for path in metrics:
        values = [_lookup(r["metrics"], path) for r in runs]
        bad = [v for v in values if not isinstance(v, numbers.Real) and v is not None]
        if bad:
            raise ValueError(f"metric {path!r} must be a number in every run, got {bad[0]!r}")
        mean, sd = _mean_sd(values)
        summary_metrics[path] = {"values": values, "mean": mean, "sd": sd}
    return to_jsonable({"paper": first["paper"], "variant": first["variant"], "seeds": seeds,
                        "runtime_s": [r["runtime_s"] for r in runs], "claims": claims,
                        "metrics": summary_metrics})


def write_summary(workdir: str | os.PathLike, summary: Mapping) -> str | None:
    """Writes ``<workdir>/summary.json`` (process 0 only); returns the path or None."""
    if not distributed.is_primary():
        return None
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, SUMMARY_FILE)
    with open(path, "w") as f:
        json.dump(to_jsonable(summary), f, indent=2, allow_nan=False)
        f.write("\n")
    return path


def seeds_table(summary: Mapping) -> str:
    """Tables of a :func:`summarise_seeds` result: claims, then metrics, as mean ± sd."""
    n = len(summary["seeds"])

    def pm(mean, sd) -> str:
        return "-" if mean is None else f"{mean:.4g} ± {sd:.2g}"

    def per_seed(values) -> str:
        return " / ".join("-" if v is None else format(float(v), ".4g") for v in values)

    rows = [[c["name"], pm(c["mean"], c["sd"]), per_seed(c["measured"]), c["threshold"],
             f"{c['holds_on']}/{n}"] for c in summary["claims"]]
    seeds = "/".join(str(s) for s in summary["seeds"])
    out = format_table(rows, ["claim", "mean ± sd", f"seeds {seeds}", "threshold", "holds"],
                       title=f"{summary['paper']} ({summary['variant']}), {n} seeds")
    if summary.get("metrics"):
        rows = [[k, pm(v["mean"], v["sd"]), per_seed(v["values"])]
                for k, v in summary["metrics"].items()]
        out += "\n\n" + format_table(rows, ["metric", "mean ± sd", f"seeds {seeds}"])
    return out
