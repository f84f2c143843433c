"""Runs a Python script and records every file it creates or writes below a root.

Usage (the multi-process tests launch every process this way)::

    python -m tests.write_audit <log.json> <root> <script.py> [script args...]

A ``sys.addaudithook`` hook sees the interpreter's ``open`` (write, append, create or
read-write modes), ``os.rename`` / ``os.replace`` (the destination), ``os.mkdir`` (of a folder
that does not exist yet) and ``shutil`` events; the paths below ``root`` go to ``<log.json>``
(a sorted list) when the script exits, however it exits. Writes from C++ (the array data of orbax checkpoints, written
by TensorStore) are not seen, by design: every process writes its own shards of a checkpoint.
"""

import atexit
import json
import os
import runpy
import sys

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def main() -> None:
    log, root, script, *args = sys.argv[1:]
    root = os.path.realpath(root)
    written: set[str] = set()

    def record(path) -> None:
        if isinstance(path, int):
            return
        try:
            p = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return
        if p == root or p.startswith(root + os.sep):
            written.add(os.path.relpath(p, root))

    def hook(event: str, a) -> None:
        if event == "open":
            path, mode, flags = a
            if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                    isinstance(flags, int) and flags & _WRITE_FLAGS):
                record(path)
        elif event in ("os.rename", "os.replace", "shutil.copyfile", "shutil.move"):
            record(a[1])
        elif event == "os.mkdir" and not os.path.exists(os.fsdecode(a[0])):
            # os.makedirs(..., exist_ok=True) calls mkdir on an existing folder (and fails
            # quietly): only a folder that does not exist yet is created.
            record(a[0])

    def dump() -> None:
        with open(log, "w") as f:
            json.dump(sorted(written), f)

    atexit.register(dump)
    sys.addaudithook(hook)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
