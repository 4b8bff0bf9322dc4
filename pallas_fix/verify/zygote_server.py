"""A forking server for verification workers: ``python -m pallas_fix.verify.zygote_server``.
Importing it imports no jax (the server does, once it runs); it sits beside its client rather
than in worker/.

Started once per client process (:mod:`pallas_fix.verify.zygote_client`), it imports jax, its
Pallas modules and the worker (about a second of CPU, most of a worker's start-up), and then
forks one child per job. The child is what `python -m pallas_fix.verify.worker.main` would be:
its own session (so the client kills its process group at the time limit), the job's working
directory and environment, stdin and stdout on /dev/null, stderr in the job's file.

Forking is safe here because nothing has started a jax backend or a thread before the fork:
`import jax` creates neither (checked at start-up: the server refuses to serve with a second
thread); each child starts its own backend after it. The client starts the server with the
environment its jobs run under and sends a job here only when the job's environment agrees
with it, because jax reads its configuration from the environment when it is imported.

Protocol, one JSON object per line: the client writes {"argv", "cwd", "env", "stderr"}; the
server answers {"pid"} for each request, in order, and {"exit": pid, "rc"} when a child ends
(rc negative: killed by that signal). On end of input it kills its children and exits.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import threading


def _preload() -> None:
    import jax  # noqa: F401
    import jax.numpy  # noqa: F401
    from jax.experimental import pallas  # noqa: F401
    from jax.experimental.pallas import tpu  # noqa: F401

    try:
        from jax.experimental.pallas import triton  # noqa: F401
    except ImportError:  # pragma: no cover - a jax without the Triton lowering's Python side
        pass
    import pallas_fix.verify.worker.main  # noqa: F401


def _child(request: dict) -> None:
    """Become the worker the request describes; never returns."""
    rc = 70
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        os.close(null)
        os.close(err)
        sys.stdin = open(os.devnull)  # noqa: SIM115 - the worker's own, closed with it
        sys.stdout = os.fdopen(os.dup(1), "w")
        sys.stderr = os.fdopen(os.dup(2), "w")
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if sys.path and sys.path[0] == _START_CWD:
            sys.path[0] = request["cwd"]  # what `python -m` puts first, for the job's directory
        from pallas_fix.verify.worker.main import main

        rc = main(request["argv"])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - anything else is the worker dying
        import traceback

        traceback.print_exc()
        rc = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc)


def _send(obj: dict) -> None:
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(1, data):]


def _reap(children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send({"exit": pid, "rc": os.waitstatus_to_exitcode(status)})


def serve() -> int:
    _preload()
    if threading.active_count() != 1:
        _send({"refused": f"{threading.active_count()} threads after the imports; forking would not be safe"})
        return 1
    _send({"ready": os.getpid()})
    children: set[int] = set()
    pending = b""
    try:
        while True:
            readable, _, _ = select.select([0], [], [], 0.05)
            _reap(children)
            if not readable:
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return 0
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                pid = os.fork()
                if pid == 0:
                    _child(json.loads(line))
                children.add(pid)
                _send({"pid": pid})
    finally:
        for pid in children:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


_START_CWD = os.getcwd()

if __name__ == "__main__":
    sys.exit(serve())
