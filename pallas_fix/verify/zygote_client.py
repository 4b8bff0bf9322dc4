"""Verification workers forked from a warm server (pallas_fix.verify.zygote_server), client side.

A worker started as a fresh process spends most of a short job importing jax (about a second of
CPU; the test suite starts a few thousand). The server pays that once per client process and
forks a child per job. A job goes to it only when it would run exactly as a fresh
`python -m pallas_fix.verify.worker.main` would: the same interpreter, on Linux (where `fork`
keeps what was imported), and an environment that agrees with the one the server imported jax
under, except for the keys listed in `_PER_JOB` (jax reads its configuration from the
environment at import). Anything else, or a server that fails, falls back to a fresh process:
the same records, only slower. PALLAS_FIX_FRESH_WORKERS=1 turns the server off.

Never imports jax."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

# Keys that may differ between jobs and the server: pytest's per-test marker, and nothing jax
# or XLA reads (those are compared).
_PER_JOB = ("PYTEST_CURRENT_TEST",)


def _key(env: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k not in _PER_JOB))


class Zygote:
    """One server process and the bookkeeping of the children it forked for this client."""

    def __init__(self, env: dict) -> None:
        self.key = _key(env)
        self.owner = os.getpid()  # a process forked from this client must not share the server's pipes
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pallas_fix.verify.zygote_server"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )
        self.lock = threading.Lock()  # one request and its pid answer at a time
        self.cond = threading.Condition()
        self.pids: list[int] = []  # answers not yet taken, in request order
        self.exits: dict[int, int] = {}
        self.alive = True
        self.served = 0  # children forked for jobs
        # Imports take seconds; a server that has not answered in two minutes is not waited for.
        ready, _, _ = select.select([self.proc.stdout], [], [], 120)
        first = json.loads(self.proc.stdout.readline() or "{}") if ready else {}
        if "ready" not in first:
            self.close()
            raise OSError(f"the worker server did not start: {first}")
        threading.Thread(target=self._read, name="pallas-fix-zygote", daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                break  # not the server speaking: treat it as gone
            with self.cond:
                if "pid" in msg:
                    self.pids.append(msg["pid"])
                elif "exit" in msg:
                    self.exits[msg["exit"]] = msg["rc"]
                self.cond.notify_all()
        with self.cond:
            self.alive = False
            self.cond.notify_all()

    def spawn(self, argv: list[str], cwd: str, env: dict, stderr: str) -> Optional[int]:
        """The pid of a child running the worker on `argv`; None when the server is gone."""
        request = (json.dumps({"argv": argv, "cwd": cwd, "env": env, "stderr": stderr}) + "\n").encode()
        with self.lock:
            try:
                self.proc.stdin.write(request)
                self.proc.stdin.flush()
            except (OSError, ValueError):
                return None
            with self.cond:
                self.cond.wait_for(lambda: self.pids or not self.alive, timeout=60)
                if not self.pids:
                    return None
                self.served += 1
                return self.pids.pop(0)

    def wait(self, pid: int, timeout_s: float) -> Optional[tuple[bool, Optional[int]]]:
        """(timed out, exit code) of a child, killed with its process group at the limit; None
        when the server died first (the child is killed: the caller runs the job afresh)."""
        with self.cond:
            self.cond.wait_for(lambda: pid in self.exits or not self.alive, timeout=timeout_s)
            if pid in self.exits:
                return False, self.exits.pop(pid)
            lost = not self.alive
        _kill(pid)
        if lost:
            return None
        with self.cond:
            self.cond.wait_for(lambda: pid in self.exits or not self.alive, timeout=10)
            return True, self.exits.pop(pid, None)

    def close(self) -> None:
        self.alive = False
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _kill(self.proc.pid)


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_servers: dict[tuple, Zygote] = {}  # by the environment each was started under
_servers_lock = threading.Lock()
_MAX_SERVERS = 2  # the usual environment and one a test or a caller sets for a while
_failed_at = 0.0


def close_servers() -> None:
    """End every server (their running children with them): the next job starts a new one."""
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.close()


def run_forked(cmd: list[str], err_path: str, timeout_s: float, env: dict) -> Optional[tuple[bool, Optional[int]]]:
    """Run the worker command `cmd` as a child of the server: (timed out, exit code), or None when
    this job cannot go there or the server died under it (the caller then starts a fresh process,
    on files it empties first)."""
    if not _eligible(cmd):
        return None
    server = _server_for(env)
    if server is None:
        return None
    pid = server.spawn(cmd[3:], os.getcwd(), env, err_path)
    if pid is None:
        return None
    return server.wait(pid, timeout_s)


def _eligible(cmd: list[str]) -> bool:
    return (
        sys.platform.startswith("linux")
        and not os.environ.get("PALLAS_FIX_FRESH_WORKERS")
        and cmd[:3] == [sys.executable, "-m", "pallas_fix.verify.worker.main"]
    )


def _server_for(env: dict) -> Optional[Zygote]:
    """The server for jobs under `env`: one started under an environment that agrees, else a new
    one, while fewer than _MAX_SERVERS run (a job under yet another environment starts fresh,
    rather than ending a server another thread's job may be running on); None for a minute
    after a server failed to start."""
    global _failed_at
    key = _key(env)
    with _servers_lock:
        if any(s.owner != os.getpid() for s in _servers.values()):
            _servers.clear()  # inherited through a fork: the parent's servers, read by its threads
        server = _servers.get(key)
        if server is not None and server.alive:
            return server
        _servers.pop(key, None)
        if len(_servers) >= _MAX_SERVERS or time.monotonic() - _failed_at < 60:
            return None
        try:
            _servers[key] = Zygote(env)
        except (OSError, ValueError):
            _failed_at = time.monotonic()
            return None
        return _servers[key]
