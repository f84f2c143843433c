r"""How fast bad input fails: the wall time from starting ``experiments/<paper>.py`` to its
``error:`` line and exit code 2, for the 19 entry scripts x {unwritable ``--workdir``,
unknown config field, wrongly typed field} of ``core.testing.bad_input_flags``
(``tests/test_entry_errors.py`` checks the exit code, the stderr lines and that no backend
starts). Target: under 10 s each.

    python benchmarks/entry_errors.py            # every script and case, one run each
    python benchmarks/entry_errors.py --repeats=3

Prints a table (wall and CPU seconds per case, slowest last) and writes
``benchmarks/results/entry_errors.json``. Wall times on shared CPUs include whatever else
runs; the CPU seconds (user + system of the child process) do not.
"""

import json
import os
import resource
import tempfile
import time

from absl import app, flags

from icml26_jax.core import testing, timing
from icml26_jax.core.results import format_table

REPO_ROOT = testing.REPO_ROOT
REPEATS = flags.DEFINE_integer("repeats", 1, "Runs per script and case (median reported).",
                               lower_bound=1)
TARGET_S = 10.0


def main(argv):
    del argv
    rows, out, cpu = [], {}, {}
    for paper in testing.ENTRY_PAPERS:
        for case in testing.BAD_INPUT_CASES:
            times, cpus = [], []
            for _ in range(REPEATS.value):
                with tempfile.TemporaryDirectory() as tmp:
                    args, _ = testing.bad_input_flags(paper, case, tmp)
                    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    t0 = time.perf_counter()
                    proc = testing.run_entry(paper, *args, env=testing.NO_BACKEND_ENV, cwd=tmp,
                                             timeout=120, check=False)
                    times.append(time.perf_counter() - t0)
                    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
                if proc.returncode != 2:
                    raise SystemExit(f"{paper} {case}: exit {proc.returncode}: {proc.stderr}")
            seconds = sorted(times)[len(times) // 2]
            out[f"{paper}/{case}"] = seconds
            cpu[f"{paper}/{case}"] = sorted(cpus)[len(cpus) // 2]
            rows.append([paper, case, seconds, cpu[f"{paper}/{case}"]])
    rows.sort(key=lambda r: r[2])
    print(format_table(rows, ["script", "case", "wall s to error", "CPU s"], floatfmt=".2f"))
    worst = max(out.values())
    print(f"slowest {worst:.2f} s (target < {TARGET_S:.0f} s): "
          f"{'met' if worst < TARGET_S else 'MISSED'}")
    path = os.path.join(REPO_ROOT, "benchmarks", "results", "entry_errors.json")
    with open(path, "w") as f:
        json.dump({"seconds": out, "cpu_seconds": cpu, "slowest_s": worst,
                   "slowest_cpu_s": max(cpu.values()), "target_s": TARGET_S,
                   "repeats": REPEATS.value, "machine": timing.machine()}, f, indent=2)
        f.write("\n")
    print("wrote", path)


if __name__ == "__main__":
    app.run(main)
