"""Every paper's smoke run (cut to a few steps: SHRINK): 2 processes x 2 CPU devices == 1
process x 4 devices.

The two runs execute ``experiments/<paper>.py`` exactly as a user would (gloo collectives on
127.0.0.1 for the pair), each process under ``tests.write_audit`` so that the files it writes
are recorded. Asserted for each of the 19 papers:

- both runs exit 0 within their hard timeouts;
- every numeric metric of results.json (timings and process / device counts excluded) and
  every claim's ``measured`` agree within rtol 1e-5 (unless ``TOL`` below says why not),
  and every claim's ``holds`` is the same;
- only process 0 writes: process 1 creates or writes no file under the workdir (the array
  shards of orbax checkpoints are written from C++ and are not seen, by design) and prints
  nothing on stdout; process 0 writes results.json.
"""

import os
import re
import sys

import numpy as np
import pytest

from icml26_jax.core import testing

PAPERS = (
    "adarope", "atc_cusum", "baguan_ts", "cof_t2i", "discrete_diffusion", "dsgd_hp", "fml",
    "fpda", "gp2scale", "grace", "grad_smoothing", "lad", "mragent", "oddshap",
    "rank_learner", "safe_flow_rl", "simplicity_bias", "tgsf", "trace",
)

# paper -> (rtol, atol, why). Reductions over devices are summed in a different order on 2
# processes (gloo) than on 1; that is all that may differ.
TOL: dict[str, tuple[float, float, str]] = {
    "dsgd_hp": (1e-4, 1e-12, "gossip on the complete graph is an all-reduce over users, summed in "
                "another order by gloo; optimality gaps are quadratic in x - x* ~ 0.02, so float32 "
                "rounding of x (~1e-7) shows as up to 3e-5 relative on them, and the complete "
                "graph's consensus distance, exactly 0, comes out as 4e-14"),
    "grace": (1e-5, 1e-6, "export/max_abs_logit_diff is the float32 rounding gap between the "
              "fake-quant and the packed INT4 logits (3e-6): rounding noise itself, 1e-7 apart"),
    "grad_smoothing": (1e-5, 1e-6, "smoothing_structures_depth is a difference of two CKAs near "
                       "0.95; their float32 rounding (3e-8 absolute, measured) is 3.5e-5 of it"),
    "cof_t2i": (1e-5, 1e-6, "aesthetics_second is F3 - F2 of two refinement means near 0.9996: "
                "their float32 rounding (1.6e-7 absolute, measured) is 1e-3 of the difference"),
    # XLA:CPU splits the loops of a one-device program into as many parallel tasks as the
    # client has devices (`outer_dimension_partitions` in the compiled HLO: 4 here, 2 on each
    # process of the pair), so training replicated on every process rounds differently. In one
    # process, one trace training step already differs between 3 and 4 CPU devices (5e-12 of
    # the parameters' squared norm). A CPU-backend detail (not checked on GPU or TPU here).
    "trace": (1e-3, 1e-4, "its training (one device, replicated) differs in the last float32 bits "
              "between a 2- and a 4-device CPU client (see above); after 20 steps the "
              "soft-routing weights differ by 4e-5 relative, the correlations near 0.03 built "
              "on them by 6.5e-5 absolute, and posteriors below 1e-20 by 10 %"),
    "baguan_ts": (1e-3, 0.0, "its training (one device, replicated) differs in the last float32 "
                  "bits between a 2- and a 4-device CPU client (see above): 1.1e-4 relative on "
                  "a forecast quantile after 20 steps"),
}

# Metrics that measure the machine, not the method (memory, slopes and ratios of timings):
# paper -> "/"-paths under metrics, dropped from both runs before comparing.
MACHINE_METRICS = {
    "gp2scale": ("scaling/rows/rss_mb", "scaling/slope", "scaling/speedup"),
}

# Both runs compile with XLA's optimisation passes off and XLA:CPU's older elemental emitters
# (the fusion emitters compile about twice as slowly): at these sizes compiling is most of a
# run, and both runs of a pair use the same setting. Measured on the 1 x 4 runs: fpda 58 s ->
# 35 s with the passes off; then XLA compile time 22.6 -> 10.8 s (fpda), 16.6 -> 6.8 s
# (discrete_diffusion), 24.1 -> 10.7 s (tgsf) with the older emitters, and the 19 pairs of a
# full suite 1,714 -> 1,265 s. The notebook kernels use the same settings; the pytest process
# uses the emitters too (tests/conftest.py) and the passes where each test package says so.
ENV = testing.fast_compile_env()

# Metrics compared at their own tolerance (paper -> {"/"-path under metrics: (rtol, atol,
# why)}), taken out of the common comparison. gp2scale's CG columns are split over one device
# per process on CPU (core.mesh.columns_mesh): 2 blocks on the pair, 1 on the 1 x 4 run, and
# the column reductions of a 5-column and a 9-column block round differently.
OWN_TOL: dict[str, dict[str, tuple[float, float, str]]] = {
    "gp2scale": {
        "camera/mean_cg_iters": (5e-3, 0.0, "the mean count of CG iterations until each "
                                 "column's residual falls below 1e-8 of its start: a rounding "
                                 "difference moves one column across that line by one "
                                 "iteration (93.33 vs 93.44 over 9 evaluations)"),
        "exactness/posterior_var_err": (0.0, 1e-12, "the sparse posterior variance's distance "
                                        "to the dense one, 2e-13: rounding error itself"),
    },
}

# Claims whose `measured` is a wall-clock quantity (a ratio of step times, a scaling slope of
# timings): they differ between any two runs; their metrics are skipped by name already.
TIMED_CLAIMS = {
    "grad_smoothing": {"smoothing_overhead_small"},
    "gp2scale": {"loglik_time_slope", "speedup_vs_dense_1e4"},
}

_GLOO = re.compile(r"\[Gloo\] Rank |\d* ?is connected to \d+ peer ranks\. Expected number of "
                   r"connected peer ranks is : \d+")
_ORBAX_OWN = re.compile(r"(^|/)(array_metadatas/process_1|ocdbt\.process_1)(/|$)")

# paper -> flags appended to its smoke config. The pair checks the multi-process code paths
# (sharded replica axes, gathers, checkpoints, who writes), not the science: the longest loops
# are cut to a few steps, still chunked so that checkpoints are written and resumed from, and
# every replica axis keeps at least as many entries as the 4 devices (with fewer, runs_mesh
# gives the two runs meshes of different sizes, e.g. 1 device against one per process, and
# XLA:CPU rounds the two programs differently: safe_flow_rl's 1 smoke seed moved ood_nll by
# 1e-4 relative, so the pair trains 4).
SHRINK: dict[str, tuple[str, ...]] = {
    "adarope": ("--config.steps=20", "--config.chunk=10", "--config.eval_size=32",
                "--config.extension.steps=4", "--config.extension.chunk=2",
                "--config.analysis_size=8"),
    "atc_cusum": (),
    "baguan_ts": ("--config.train.trunk_steps=20", "--config.train.chunk=10"),
    "cof_t2i": ("--config.ae_steps=4", "--config.steps=4", "--config.warmup=1",
                "--config.chunk=2"),
    "discrete_diffusion": ("--config.steps=10", "--config.floor_seqs=200",
                           "--config.num_samples=8"),
    "dsgd_hp": ("--config.speedup.runs=16", "--config.speedup.T=100",
                "--config.speedup.log_every=50", "--config.network.runs=8",
                "--config.network.T=100", "--config.network.log_every=50",
                "--config.transient.T=100", "--config.transient.log_every=50",
                "--config.transient.runs=8", "--config.logreg.runs=8", "--config.logreg.T=100",
                "--config.logreg.log_every=50", "--config.nonconvex.runs=8",
                "--config.nonconvex.T=100", "--config.nonconvex.log_every=50"),
    "fml": ("--config.rounds=6",),
    "fpda": ("--config.steps_sup=4", "--config.steps_dapo=4", "--config.chunk=2"),
    "gp2scale": ("--config.scaling_ns=(500,1000)", "--config.slq_n=500", "--config.dense_n=500",
                 "--config.slq_repeats=2", "--config.am_iters=4", "--config.am_chunk=2",
                 "--config.matern_steps=4", "--config.adam_steps=4", "--config.ns_k3_steps=2"),
    "grace": ("--config.vision_steps=4", "--config.teacher_steps=4", "--config.student_steps=4",
              "--config.qat_steps=4", "--config.tau_auto_steps=2", "--config.chunk=2",
              "--config.n_train=400"),
    "grad_smoothing": ("--config.steps=10", "--config.log_every=5", "--config.timing_steps=2"),
    "lad": ("--config.train_steps=10",),
    "mragent": (),
    "oddshap": ("--config.train_steps=10", "--config.games=soum30,gbt_synth16",
                "--config.num_seeds=2", "--config.budget_fracs=(0.25,)"),
    "rank_learner": (),
    "safe_flow_rl": ("--config.num_seeds=4", "--config.dataset_size=2000",
                     "--config.critic_steps=20", "--config.flow_steps=20",
                     "--config.refiner_steps=10",
                     "--config.actor_steps=10", "--config.chunk=10",
                     "--config.eval_episodes=4", "--config.val_episodes=4"),
    "simplicity_bias": ("--config.images.epochs=10",),
    "tgsf": ("--config.steps=10", "--config.e2_steps=10", "--config.chunk=5",
             "--config.ff_steps=4"),
    "trace": ("--config.steps=20", "--config.eval_every=10", "--config.n_per_domain=200",
              "--config.n_val=64"),
}

TIMEOUT_S = 300  # hard limit of each run (the slowest take about a minute on 2 busy cores)

# Seconds per pair (both runs) under `pytest -n 2` on 2 cores, in a full suite of the sixth
# sitting (before the suite compiled with the elemental emitters): safe_flow_rl 146, tgsf
# 105, cof_t2i 102, grad_smoothing 97, grace 90, gp2scale 88, fpda 82, baguan_ts 78,
# discrete_diffusion 70, fml 67, oddshap 62, rank_learner 51, adarope 50, atc_cusum 50,
# dsgd_hp 44, lad 41, simplicity_bias 35, mragent 24, trace 24: 1,311 s of the suite's 4,208
# worker-seconds, mostly start-up and compilation in each of the three processes, not steps.


def _run(paper, workdir, audit_dir, num_processes):
    cmd = [sys.executable, "-m", "tests.write_audit",
           os.path.join(audit_dir, "writes_{process_id}.json"), str(workdir),
           os.path.join("experiments", f"{paper}.py"),
           f"--config=icml26_jax/{paper}/configs.py:smoke", f"--workdir={workdir}",
           *SHRINK[paper]]
    if num_processes == 1:
        cmd.append("--num_cpu_devices=4")
    else:
        cmd += ["--num_cpu_devices=2", "--coordinator_address=127.0.0.1:{port}",
                "--num_processes={num_processes}", "--process_id={process_id}"]
    return testing.run_processes(cmd, num_processes, timeout=TIMEOUT_S, env=ENV)


_GLOO_TEXT = "[Gloo] Rank # is connected to # peer ranks. Expected number of connected peer " \
    "ranks is : #"


def _is_gloo_piece(line: str) -> bool:
    return re.sub(r"\d+", "#", line) in _GLOO_TEXT


def _pop(metrics: dict, path: str):
    *parents, leaf = path.split("/")
    for k in parents:
        metrics = metrics[k]
    return metrics.pop(leaf)  # a KeyError if the metric is renamed: update the table


def _untimed(paper, results):
    timed = TIMED_CLAIMS.get(paper, set())
    for path in MACHINE_METRICS.get(paper, ()):
        _pop(results["metrics"], path)  # a KeyError if the metric is renamed
    return {**results, "claims": [c for c in results["claims"] if c["name"] not in timed]}


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("paper", PAPERS)
def test_two_processes_match_one(paper, tmp_path):
    single, multi = tmp_path / "single", tmp_path / "multi"
    (tmp_path / "audit1").mkdir()
    (tmp_path / "audit2").mkdir()
    res = _run(paper, multi, tmp_path / "audit2", 2)
    _run(paper, single, tmp_path / "audit1", 1)

    got, want = (_untimed(paper, testing.load_json(d / "results.json")) for d in (multi, single))
    for path, (rtol_p, atol_p, _) in OWN_TOL.get(paper, {}).items():
        a, b = (_pop(r["metrics"], path) for r in (got, want))
        np.testing.assert_allclose(a, b, rtol=rtol_p, atol=atol_p, err_msg=f"{paper}: {path}")
    rtol, atol, _ = TOL.get(paper, (1e-5, 0.0, ""))
    n = testing.assert_results_match(got, want, rtol=rtol, atol=atol, err_msg=paper)
    assert n > 0, f"{paper}: no numeric metric compared"

    writes0 = testing.load_json(tmp_path / "audit2" / "writes_0.json")
    writes1 = testing.load_json(tmp_path / "audit2" / "writes_1.json")
    assert "results.json" in writes0, writes0
    # Orbax checkpoints are written jointly: each process records its own array metadata.
    writes1 = [w for w in writes1 if not _ORBAX_OWN.search(w)]
    assert writes1 == [], f"{paper}: process 1 wrote {writes1[:10]}"
    # gloo's C++ runtime announces its connections on stdout ("[Gloo] Rank 1 is connected
    # to 1 peer ranks ...") from several threads, so announcements interleave and break
    # across lines: a lone "3" (1 of 21 runs), "1 is connected to" + "1 peer ranks. Expected
    # ..." (1 of 19 pairs, fpda). A line that is a piece of the announcement (numbers aside)
    # is gloo's, not the program's output.
    lines = (_GLOO.sub("", raw).strip() for raw in res[1].stdout.splitlines())
    printed = [line for line in lines if line and not _is_gloo_piece(line)]
    assert printed == [], f"{paper}: process 1 printed {printed[:5]}"


@pytest.mark.parametrize("flags, message", [
    (["--num_processes=2"], "error: --coordinator_address is required with --num_processes=2"),
    (["--num_processes=2", "--process_id=2", "--coordinator_address=127.0.0.1:1"],
     "error: --process_id must be in [0, 2) with --num_processes=2, got --process_id=2"),
    (["--num_processes=2", "--process_id=1", "--coordinator_address=localhost"],
     "error: --coordinator_address must be host:port"),
])
@pytest.mark.parametrize("paper", ["grace", "oddshap"])
def test_bad_multiprocess_setup_is_one_error_line(paper, flags, message, tmp_path):
    r = testing.run_entry(paper, f"--workdir={tmp_path}", *flags, variant="smoke",
                          timeout=120, check=False)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith(message), lines[-3:]
    assert not any("Traceback" in line for line in lines)
    assert not (tmp_path / "results.json").exists()


def test_every_entry_script_sets_up_processes_first():
    # The test above runs two papers; every other entry script must reach the same
    # validation the same way: common.setup(...) is the first statement of main().
    import ast

    for paper in PAPERS:
        path = os.path.join(testing.REPO_ROOT, "experiments", f"{paper}.py")
        with open(path) as f:
            tree = ast.parse(f.read())
        main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
        first = main.body[0]
        call = first.value if isinstance(first, ast.Expr) else None
        assert isinstance(call, ast.Call) and ast.unparse(call.func) == "common.setup", (
            f"{paper}: main() starts with {ast.unparse(first)!r}")


def test_every_paper_has_its_sizes_and_the_tables_name_papers():
    assert set(SHRINK) == set(PAPERS), set(SHRINK) ^ set(PAPERS)
    assert set(TOL) <= set(PAPERS) and set(OWN_TOL) <= set(PAPERS)
    assert set(MACHINE_METRICS) <= set(PAPERS) and set(TIMED_CLAIMS) <= set(PAPERS)
