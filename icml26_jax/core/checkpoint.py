"""Checkpoints of state pytrees; the one module that imports orbax.

A state is a nested dict/list of NumPy arrays, (possibly sharded) ``jax.Array``s and Python
scalars. Saving blocks until the step is on disk, so a run killed right after ``save``
resumes from that step. In a multi-process job EVERY process must call ``save`` and
``restore`` (orbax synchronises the processes and each writes the shards it owns).

Resuming a run::

    with checkpoint.Checkpointer(os.path.join(workdir, "ckpt"), save_every=100) as ckpt:
        start = ckpt.latest_step() or 0
        if ckpt.latest_step() is not None:
            state = ckpt.restore(like=state)
        for step in range(start + 1, num_steps + 1):
            state = train_step(state)
            ckpt.save(step, state, force=step == num_steps)

For training in chunks use :func:`run_chunks`; :func:`seed_loop` runs it over a step that
trains every seed (or arm) at once, the seeds sharded over every device, and :func:`cached`
saves one finished stage.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from icml26_jax.core import distributed


def _quiet_orbax(record: logging.LogRecord) -> bool:
    """Drops orbax's INFO chatter (several lines per save) from absl's log; keeps warnings."""
    return record.levelno >= logging.WARNING or f"{os.sep}orbax{os.sep}" not in record.pathname


class Checkpointer:
    """``orbax.checkpoint.CheckpointManager`` for one state pytree; a context manager."""

    def __init__(self, directory: str | os.PathLike, *, save_every: int = 1,
                 max_to_keep: int | None = 2):
        """Opens (creating if needed) ``directory``.

        Args:
          directory: where steps are written (one sub-directory per step).
          save_every: :meth:`save` writes only steps divisible by it (unless forced).
          max_to_keep: number of newest steps kept on disk; None keeps all.
        """
        if isinstance(save_every, bool) or not isinstance(save_every, int) or save_every < 1:
            raise ValueError(f"save_every must be a positive integer, got {save_every!r}")
        if max_to_keep is not None and max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1 or None, got {max_to_keep!r}")
        self.save_every = save_every
        absl_logger = logging.getLogger("absl")
        if _quiet_orbax not in absl_logger.filters:
            absl_logger.addFilter(_quiet_orbax)
        # orbax rejects relative paths.
        self.directory = os.path.abspath(os.fspath(directory))
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True,
            # Saves block: a run killed after save() returns must find that step on disk.
            enable_async_checkpointing=False)
        # The handler is named up front: a fresh manager cannot otherwise read the metadata
        # of steps written by an earlier process (item_metadata returns None).
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_handlers=ocp.PyTreeCheckpointHandler())

    def save(self, step: int, state, *, force: bool = False) -> bool:
        """Writes ``state`` as ``step`` if ``step % save_every == 0`` or ``force``; returns
        whether it did. A step already on disk is kept, not overwritten (a resumed run
        reaches the step it restored from again)."""
        step = int(step)
        if step < 0:
            raise ValueError(f"step must be >= 0, got step={step}")
        if not (force or step % self.save_every == 0) or step in self._manager.all_steps():
            return False
        saved = self._manager.save(step, args=ocp.args.PyTreeSave(_normalize(state)),
                                   force=True)
        self._manager.wait_until_finished()
        return bool(saved)

    def latest_step(self) -> int | None:
        """The newest step on disk, or None if there is none."""
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """Every step on disk, ascending."""
        return sorted(self._manager.all_steps())

    def restore(self, step: int | None = None, like=None):
        """Reads a step (the latest if ``step`` is None).

        Args:
          step: step to read; None for the latest.
          like: pytree with the saved structure whose leaves (``jax.Array`` or
            ``jax.ShapeDtypeStruct`` with a sharding, NumPy arrays, Python scalars) give the
            type, dtype and sharding of each restored leaf. Without it every array comes
            back whole as a NumPy array on every process (typed PRNG keys as their uint32
            key data) and scalars as Python scalars.
        """
        step = self.latest_step() if step is None else step
        if step is None or step not in self._manager.all_steps():
            raise FileNotFoundError(f"no checkpoint for step {step} in {self.directory}; "
                                    f"steps on disk: {self.all_steps()}")
        if like is None:
            meta = self._manager.item_metadata(step)
            tree = getattr(meta, "tree", meta)
            args = ocp.args.PyTreeRestore(restore_args=jax.tree.map(_host_restore_args, tree))
        else:
            like = _normalize(like)
            args = ocp.args.PyTreeRestore(
                item=like, restore_args=ocp.checkpoint_utils.construct_restore_args(like))
        return self._manager.restore(step, args=args)

    def close(self) -> None:
        """Waits for pending writes and releases the manager."""
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def config_fingerprint(config) -> int:
    """A 62-bit hash of a config (``ConfigDict`` or dict), stored with a run's checkpoints so
    that a resumed run refuses a ``--workdir`` written under another config."""
    d = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    blob = json.dumps(d, sort_keys=True, default=str).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "little") >> 2


def save(directory: str | os.PathLike, step: int, state) -> None:
    """Writes ``state`` as ``step`` in ``directory`` (every step is kept; existing steps are
    not overwritten). Loops should hold a :class:`Checkpointer` instead."""
    with Checkpointer(directory, max_to_keep=None) as ckpt:
        ckpt.save(step, state, force=True)


def restore_latest(directory: str | os.PathLike, like=None):
    """``(step, state)`` of the newest step in ``directory`` or None; ``like`` as in
    :meth:`Checkpointer.restore`."""
    if not distributed.agreed(os.path.isdir(directory)):  # process 0 may be creating it
        return None
    with Checkpointer(directory, max_to_keep=None) as ckpt:
        step = ckpt.latest_step()
        return None if step is None else (step, ckpt.restore(step, like=like))


def latest_step(directory: str | os.PathLike) -> int | None:
    """The newest step saved in ``directory``, or None (also if it does not exist)."""
    if not distributed.agreed(os.path.isdir(directory)):
        return None
    with Checkpointer(directory, max_to_keep=None) as ckpt:
        return ckpt.latest_step()


def _normalize(tree):
    multi = jax.process_count() > 1

    def one(x):
        # orbax handles np.ndarray but not NumPy scalars (np.float32(1.0)).
        if isinstance(x, np.generic):
            return np.asarray(x)
        # In a multi-process job orbax cannot save an array local to one process (a model
        # trained on each process's first device): every process holds the same value, so it
        # is saved as host data, which process 0 writes.
        if multi and isinstance(x, jax.Array) and x.is_fully_addressable:
            return np.asarray(jax.device_get(x))
        return x

    return jax.tree.map(one, tree)


def _host_restore_args(meta):
    if isinstance(meta, ocp.metadata.ScalarMetadata):
        return ocp.RestoreArgs(restore_type=type(np.zeros((), meta.dtype).item()))
    return ocp.RestoreArgs(restore_type=np.ndarray)


def run_chunks(directory: str | os.PathLike, *, fingerprint: int, state, logs: dict,
               steps: int, chunk: int, advance, place=None, name: str = "train"):
    """A resumable training loop in chunks of ``chunk`` steps, checkpointed after each chunk.

    Args:
      directory: checkpoint directory (one step kept).
      fingerprint: :func:`config_fingerprint` of what is being trained; a directory written
        under another fingerprint raises a ``ValueError`` instead of resuming.
      state: the device pytree carried across chunks (params, optimiser state, ...).
      logs: dict of host NumPy arrays the chunks fill in (saved and restored with the state).
      steps: total steps.
      chunk: steps per chunk (the last chunk may be shorter).
      advance: ``advance(state, logs, start, n) -> (state, message)``: runs steps
        ``[start, start + n)``, writes into ``logs`` in place and returns a progress message.
      place: ``place(host_tree) -> state`` re-shards a restored state (default: as restored).
      name: prefix of the progress log lines.

    Returns:
      ``(state, logs)`` after ``steps`` steps.
    """
    if chunk < 1 or steps < 0:
        raise ValueError(f"run_chunks needs chunk >= 1 and steps >= 0, got {chunk}, {steps}")
    place = place or (lambda tree: tree)
    treedef = jax.tree.structure(state)
    start = 0
    with Checkpointer(directory, max_to_keep=1) as ckpt:
        if ckpt.latest_step() is not None:
            saved = ckpt.restore()
            if int(saved["fingerprint"]) != int(fingerprint):
                raise ValueError(f"{directory} holds a run with a different config; pass a "
                                 "new --workdir or delete that one")
            state = place(jax.tree.unflatten(treedef, saved["leaves"]))
            start = int(saved["step"])
            logs = {k: np.asarray(v) for k, v in saved["logs"].items()}
            logging.getLogger("absl").info("%s: resuming at step %d", name, start)
        t0 = time.time()
        for s0 in range(start, steps, chunk):
            n = min(chunk, steps - s0)
            state, message = advance(state, logs, s0, n)
            done = s0 + n
            logging.getLogger("absl").info("%s step %d/%d: %s (%.2f s/step)", name, done, steps,
                                           message, (time.time() - t0) / (done - start))
            ckpt.save(done, {"fingerprint": int(fingerprint), "step": done, "logs": logs,
                             "leaves": jax.tree.leaves(state)}, force=True)
    return state, logs


def cached(directory: str | os.PathLike, *, fingerprint: int, compute, name: str = "stage"):
    """The result of one finished stage of a run, computed once and restored on resume.

    Args:
      directory: where the stage's result is saved (one step).
      fingerprint: :func:`config_fingerprint` of what the stage computes; a directory saved
        under another fingerprint raises a ``ValueError`` instead of being reused.
      compute: ``compute() -> result``, a pytree of NumPy arrays and Python scalars.
      name: the stage's name in the log lines.

    Returns:
      The (restored or freshly computed) result.
    """
    saved = restore_latest(directory)
    if saved is not None:
        state = saved[1]
        if int(state["fingerprint"]) != int(fingerprint):
            raise ValueError(f"{directory} holds a run with another config; pass a new "
                             "--workdir or delete that one")
        logging.getLogger("absl").info("%s restored from %s", name, directory)
        return state["result"]
    t0 = time.time()
    result = compute()
    save(directory, 0, {"fingerprint": int(fingerprint), "result": result})
    logging.getLogger("absl").info("%s done in %.1f s", name, time.time() - t0)
    return result


def per_seed_keys(key, n: int):
    """[n] keys, key i = fold_in(key, i): seed i's randomness does not depend on how many
    seeds run, so a vmapped run's seed i equals a separate run of seed i alone."""
    return jnp.stack([jax.random.fold_in(key, i) for i in range(int(n))])


def _scan_replica(static, state, args, key_data, start):
    """``n`` steps ``[start, start + n)`` of one replica (:func:`seed_loop`):
    ``static = (one, inner, n)``."""
    one, inner, n = static
    key = jax.random.wrap_key_data(key_data)
    step = one if inner is None else functools.partial(one, inner)
    return jax.lax.scan(lambda st, i: step(st, args, key, i), state,
                        start + jnp.arange(n, dtype=jnp.int32))


def seed_loop(state, args, one, seed_keys, *, steps: int, chunk: int, directory: str,
              fingerprint: int, name: str, message, mesh=None, inner=None):
    """Trains every replica (seed, arm x seed, model) for ``steps`` steps in resumable chunks,
    the replicas sharded over a ``RUNS`` mesh (``core.mesh.map_runs``).

    Args:
      state: the trained pytree, stacked over replicas [R, ...] (params, optimiser state).
      args: frozen per-replica inputs stacked [R, ...] (critics, flows, scales), or None.
      one: ``one(state_r, args_r, key_r, step) -> (state_r, logs_r)``, one replica's step
        (``one(inner, state_r, ...)`` when ``inner`` is given); ``logs_r`` a dict of arrays
        (scalars, or [E] for an inner sweep). Data (a dataset) goes in ``args``, never in
        a closure, which would bake it into the program as a constant; a module-level
        ``one`` with its constants in ``inner`` (hashable) shares its compiled program
        between calls.
      seed_keys: [R] typed keys; step ``i`` of replica ``r`` draws from
        ``fold_in(seed_keys[r], i)``.
      steps, chunk, directory, fingerprint, name: as in :func:`run_chunks`.
      message: ``message(logs_of_last_step) -> str`` (host arrays [R, ...]) for the progress
        line.
      mesh: a mesh with a ``RUNS`` axis; default ``core.mesh.runs_mesh(R)`` (devices of
        every process; R padded to a multiple of its size, the padded replicas computed and
        dropped).
      inner: hashable constants of ``one`` (a jit static argument), or None.

    Returns:
      (state as host NumPy arrays [R, ...], logs {k: [steps, R, ...]}). The checkpoints hold
      host arrays without the padding, so a run resumes on any device count, and orbax
      writes them from process 0 alone.
    """
    from icml26_jax.core import mesh as mesh_lib

    R = int(seed_keys.shape[0])
    mesh = mesh if mesh is not None else mesh_lib.runs_mesh(R)
    step = one if inner is None else functools.partial(one, inner)
    key_data = mesh_lib.to_host(jax.random.key_data(seed_keys))  # [R, 2]
    first = lambda x: jax.ShapeDtypeStruct(np.shape(x)[1:], x.dtype)  # noqa: E731
    shapes = jax.eval_shape(lambda st, a: step(st, a, seed_keys[0], jnp.int32(0))[1],
                            jax.tree.map(first, state), jax.tree.map(first, args))
    logs = {k: np.zeros((int(steps), R) + v.shape, np.float32) for k, v in shapes.items()}

    # Placed on the mesh once: every chunk reuses them without another host-to-device copy.
    args = mesh_lib.place_runs(mesh, args)

    def advance(st, lg, start, n):
        st, out = mesh_lib.map_runs(mesh, _scan_replica, (one, inner, n), st, args, key_data,
                                    np.full((R,), start, np.int32))
        out = mesh_lib.to_host(out, R)  # {k: [R, n, ...]}
        for k, v in out.items():
            lg[k][start:start + n] = np.swapaxes(v, 0, 1)
        return mesh_lib.to_host(st, R), message({k: v[:, -1] for k, v in out.items()})

    return run_chunks(directory, fingerprint=fingerprint, state=state, logs=logs,
                      steps=int(steps), chunk=int(chunk), advance=advance, name=name)


def per_step_dispatch(convolutional: bool, backend: str | None = None) -> bool:
    """Whether :func:`steps_loop` dispatches one compiled step at a time (else one
    ``lax.scan`` per chunk): only for convolutional steps on XLA:CPU, where it is measured
    faster (convolutions inside a while loop run ~5x slower there: 0.45 vs 0.09 s per
    supervised fpda step at width 16). On GPU/TPU a scanned chunk avoids a host round trip
    per step; ``backend`` defaults to ``jax.default_backend()``."""
    return bool(convolutional) and (backend or jax.default_backend()) == "cpu"


# The carry is donated (callers pass a fresh device copy), so a chunk holds one state.
@functools.partial(jax.jit, static_argnums=(0, 3), donate_argnums=(1,))
def _scan_steps(one, carry, start, n, *args):
    return jax.lax.scan(lambda c, i: one(c, i, *args), carry,
                        start + jnp.arange(n, dtype=jnp.int32))


def steps_loop(one, carry, start: int, n: int, keys, args=(), *, convolutional: bool):
    """Runs the jitted ``one(carry, i, *args) -> (carry, logs)`` for steps
    ``[start, start + n)`` (``args``: the data, passed as arguments so that no program
    embeds them as constants).

    Either a Python loop of one compiled step (per-step dispatch costs ~1 ms) or one compiled
    ``lax.scan`` over the ``n`` steps, as :func:`per_step_dispatch` chooses for the backend
    and ``convolutional`` (whether the step runs convolutions). Both give the same steps;
    the scanned chunk compiles once per ``(one, n)``.
    Returns the carry and the host logs (``keys`` a name or a tuple of names).
    """
    names = (keys,) if isinstance(keys, str) else tuple(keys)
    if per_step_dispatch(convolutional):
        outs = []
        for i in range(start, start + n):
            carry, lg = one(carry, jnp.int32(i), *args)
            outs.append(lg)
        logs = {k: np.asarray(jnp.stack([o[k] for o in outs])) for k in names}
    else:
        carry, stacked = _scan_steps(one, carry, jnp.int32(start), int(n), *args)
        logs = {k: np.asarray(stacked[k]) for k in names}
    return carry, (logs[keys] if isinstance(keys, str) else logs)
