"""The absl flags every experiment script shares, and the ``main`` wrapper around them.

Usage in ``experiments/<paper>.py``::

    from icml26_jax.core import flags as common
    COMMON = common.define_flags("dsgd_hp")         # --workdir, --seed, distributed flags
    CONFIG = common.define_config("icml26_jax/dsgd_hp/configs.py", "Experiment config.")

    def main(argv):
        common.setup(argv, COMMON)                  # rejects extra argv, initialises JAX
        ...

    if __name__ == "__main__":
        common.run(main)
"""

from __future__ import annotations

import difflib
import logging as pylogging
import os
import sys
import tempfile
from typing import NamedTuple

from absl import app, flags, logging

from icml26_jax.core import distributed


class CommonFlags(NamedTuple):
    workdir: flags.FlagHolder
    seed: flags.FlagHolder
    coordinator_address: flags.FlagHolder
    num_processes: flags.FlagHolder
    process_id: flags.FlagHolder
    num_cpu_devices: flags.FlagHolder


def _calling_module() -> str:
    """The module name absl files the caller's flags under (``sys.argv[0]`` for a script)."""
    name = sys._getframe(2).f_globals.get("__name__", "")
    return sys.argv[0] if name == "__main__" else name


def define_flags(paper: str) -> CommonFlags:
    """Defines the shared flags; ``--workdir`` defaults to ``runs/<paper>``. They are key
    flags of the calling script, so its ``--help`` lists them beside its own."""
    common = CommonFlags(
        workdir=flags.DEFINE_string("workdir", f"runs/{paper}", "Where results.json, figures "
                                    "and checkpoints go; an existing run there is resumed."),
        seed=flags.DEFINE_integer("seed", 0, "Random seed of the run (noise, data order, init)."),
        coordinator_address=flags.DEFINE_string(
            "coordinator_address", None, "host:port of process 0 in a multi-process job."),
        num_processes=flags.DEFINE_integer("num_processes", 1, "Number of processes.", lower_bound=1),
        process_id=flags.DEFINE_integer("process_id", 0, "Index of this process.", lower_bound=0),
        num_cpu_devices=flags.DEFINE_integer(
            "num_cpu_devices", 8, "Simulated devices per process on the CPU backend "
            "(ignored on GPU/TPU, where the devices present are used).", lower_bound=1),
    )
    module = _calling_module()
    for holder in common:
        flags.FLAGS.register_key_flag_for_module(module, flags.FLAGS[holder.name])
    return common


def _load_config_file(path: str):
    """The config a ``--config=<file>[:<variant>]`` argument (or the default ``path``) names,
    loaded as ml_collections does: the file's ``get_config([variant])``."""
    import importlib.util

    for arg in sys.argv[1:]:
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1]
    file, _, variant = path.partition(":")
    spec = importlib.util.spec_from_file_location("_icml26_config", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(variant) if variant else module.get_config()


def seed_override(overrides) -> str | None:
    """The error message for a ``--config.seed`` override (every entry script copies
    ``--seed`` into ``config.seed``, so the override would be silently lost); None otherwise."""
    for arg in overrides:
        if arg[len("--config."):].split("=", 1)[0] == "seed":
            return (f"{arg}: the seed is set by --seed (the entry script copies it into "
                    "config.seed); use --seed=N")
    return None


def unknown_config_field(config, overrides) -> str | None:
    """The error message for the first ``--config.<a.b.c>`` override whose path is not a
    field of ``config``, naming the closest valid names; None when every path exists."""
    for arg in overrides:
        path = arg[len("--config."):].split("=", 1)[0]
        node, parts = config, path.split(".")
        for i, part in enumerate(parts):
            keys = list(node.keys()) if hasattr(node, "keys") else []
            if part in keys:
                node = node[part]
                continue
            where = "config." + ".".join(parts[:i]) if i else "config"
            close = difflib.get_close_matches(part, keys, n=3, cutoff=0.5)
            hint = (f"closest: {', '.join(close)}" if close
                    else f"fields: {', '.join(sorted(keys))}" if keys else "not a config")
            return f"--config.{path}: {where} has no field {part!r} ({hint})"
    return None


def define_config(path: str, help_text: str):
    """``config_flags.DEFINE_config_file("config", path, help_text)``. ml_collections reads
    the ``--config.<field>`` overrides of ``sys.argv`` here, at definition: an unknown field
    ends with one ``error:`` line naming it and the closest valid names (exit 2) instead of
    a chained traceback."""
    from ml_collections import config_flags

    message = seed_override(a for a in sys.argv[1:] if a.startswith("--config."))
    if message:
        _fail(message)
    try:
        return config_flags.DEFINE_config_file("config", path, help_text)
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        overrides = [a for a in sys.argv[1:] if a.startswith("--config.")]
        try:
            message = unknown_config_field(_load_config_file(path), overrides)
        except Exception:  # noqa: BLE001 - the config file itself fails: report e below
            message = None
        if message is None:
            lines = [line.strip() for line in str(e).strip("'\"").splitlines() if line.strip()]
            message = f"{' '.join(overrides) or '--config'}: {lines[-1] if lines else e!r}"
        _fail(message)


def setup(argv, common: CommonFlags) -> None:
    """Rejects extra positional arguments, then initialises JAX (devices, distributed)."""
    if len(argv) > 1:
        raise ValueError(f"unexpected positional arguments {argv[1:]}: every option is a --flag")
    distributed.maybe_initialize(
        common.coordinator_address.value,
        common.num_processes.value,
        common.process_id.value,
        num_cpu_devices=common.num_cpu_devices.value,
    )
    import jax  # Deferred: the device queries below start the backend.

    logging.info("JAX %s: process %d of %d, %d local / %d global %s devices", jax.__version__,
                 jax.process_index(), jax.process_count(), jax.local_device_count(),
                 jax.device_count(), jax.default_backend())


def as_tuple(value, cast=str, name: str | None = None) -> tuple:
    """A config list field as a tuple of ``cast`` values.

    ``--config.parts=a,b`` reaches an ml_collections tuple field as the string ``"a,b"`` or
    as the 1-tuple ``("a,b",)``; either, a proper tuple, or a mix becomes ``(cast("a"),
    cast("b"))``. Empty items are dropped.

    Raises:
      ValueError: an item ``cast`` rejects; the message names ``--config.<name>`` when
        ``name`` is given.
    """
    items = [value] if isinstance(value, str) else list(value)
    items = [x for s in items for x in (s.split(",") if isinstance(s, str) else [s])]
    out = []
    for x in items:
        if not str(x).strip():
            continue
        try:
            out.append(cast(x.strip() if isinstance(x, str) else x))
        except (TypeError, ValueError) as e:
            kind = getattr(cast, "__name__", "")
            items_of = f"{kind}s" if kind in ("int", "float", "str") else "valid items"
            field = f"--config.{name}" if name else "a list field"
            raise ValueError(f"{field} must be a comma-separated list of {items_of}, got "
                             f"{value!r} ({e})") from None
    return tuple(out)


def require_positive_ints(config, names) -> None:
    """Raises ``ValueError`` naming ``--config.<name>`` for any field of ``names`` that is not
    a positive integer (``True`` / ``False`` and non-integral floats included)."""
    for name in names:
        v = config[name]
        if isinstance(v, bool) or int(v) != v or int(v) < 1:
            raise ValueError(f"--config.{name} must be a positive integer, got {v!r}")


TPU_FLOAT64_ENV = "ICML26_ALLOW_TPU_FLOAT64"


def require_float64(paper: str, why: str, backend: str | None = None) -> None:
    """Checks that the backend runs float64 natively, for a paper whose numerics need it;
    the entry script then sets ``jax_enable_x64`` (only entry scripts and tests configure
    JAX). Call it in ``main`` after :func:`setup`, before any compute.

    TPUs have no float64 units: XLA emulates it in software, far slower than float32, and a
    run would not say so. On a TPU backend this raises ``ValueError`` (one ``error:`` line
    from :func:`run`) naming the paper, the reason and the ways out, unless the environment
    variable ``ICML26_ALLOW_TPU_FLOAT64=1`` accepts the emulation.

    Args:
      paper: the paper's slug, for the message.
      why: what needs float64, for the message.
      backend: the backend to judge (default ``jax.default_backend()``).
    """
    import os

    import jax

    backend = backend or jax.default_backend()
    if backend == "tpu" and os.environ.get(TPU_FLOAT64_ENV) != "1":
        raise ValueError(
            f"{paper} needs float64 ({why}), which TPUs only emulate in software; run it on "
            f"CPU or GPU (JAX_PLATFORMS=cpu or cuda), or set {TPU_FLOAT64_ENV}=1 to accept "
            "the slow emulation")


def _fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def probe_workdir(workdir: str | None) -> None:
    """Creates ``workdir`` and checks that a file can be written there, before any compute;
    raises ``ValueError`` naming ``--workdir`` otherwise. None (no workdir flag) passes."""
    if not workdir:
        return
    try:
        os.makedirs(workdir, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=workdir, prefix=".probe."):
            pass
    except OSError as e:
        raise ValueError(f"--workdir={workdir}: cannot write there "
                         f"({e.strerror or e}: {e.filename or workdir})") from None


def _parse_flags(argv):
    """absl flag parsing whose errors are one ``error: ...`` line (exit 2), no traceback."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        # A config file that raises is reported with its traceback: keep the exception line.
        _fail(lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}")


def run(main) -> None:
    """``app.run(main)``: bad flags, an unwritable ``--workdir`` (probed by process 0 before
    ``main``) and a ``ValueError`` from ``main`` end with one ``error: ...`` line on stderr
    and exit code 2."""

    def _main(argv):
        try:
            if "workdir" in flags.FLAGS and (
                    "process_id" not in flags.FLAGS or flags.FLAGS.process_id == 0):
                probe_workdir(flags.FLAGS.workdir)
            return main(argv)
        except ValueError as e:
            _fail(str(e))

    import jax

    # JAX logs one INFO line per platform it cannot start (libtpu on every GPU or CPU
    # machine): noise before a run's own log and before an ``error:`` line.
    pylogging.getLogger("jax._src.xla_bridge").setLevel(pylogging.WARNING)
    jax.config.parse_flags_with_absl()
    app.run(_main, flags_parser=_parse_flags)


def run_seeds(config, workdir: str, run, metrics=lambda first: ()) -> str | None:
    """The confirmatory run: ``run(cfg, <workdir>/seed_<s>)`` for every ``s`` in
    ``config.seeds``, then ``<workdir>/summary.json`` (``core.results.summarise_seeds``).

    Args:
      config: the experiment's ``ConfigDict`` with a ``seeds`` tuple (and a ``seed`` field
        each copy gets).
      workdir: parent directory of the per-seed workdirs.
      run: the paper's ``train.run(config, workdir)``.
      metrics: ``metrics(first_results) -> paths`` of metrics to summarise besides the claims.

    Returns:
      The summary's path (None on processes other than 0).
    """
    import os

    from icml26_jax.core import distributed, results

    runs = []
    for seed in config.seeds:
        cfg = config.copy_and_resolve_references()
        cfg.seed = int(seed)
        seed_dir = os.path.join(workdir, f"seed_{seed}")
        run(cfg, seed_dir)
        runs.append(results.load_results(seed_dir))
    summary = results.summarise_seeds(runs, metrics=list(metrics(runs[0])))
    path = results.write_summary(workdir, summary)
    if distributed.is_primary():
        logging.info("\n%s\nsummary: %s", results.seeds_table(summary), path)
    return path
