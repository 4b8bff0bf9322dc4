"""The verification worker as a process, client side: a job written to a temporary folder, one
worker in its own process group (forked from a warm server, verify.zygote_client, or a fresh
`python -m pallas_fix.verify.worker.main`), killed whole at the time limit, and the JSON-lines
records it wrote. Verification (:mod:`pallas_fix.verify.runner`)
and learning facts from the examples (:mod:`pallas_fix.verify.facts`) both run their jobs here.
Never imports jax."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pallas_fix.verify.zygote_client import run_forked

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass(frozen=True)
class WorkerRun:
    records: list  # the worker's JSON-lines records, in order
    timed_out: bool
    rc: Optional[int]  # its exit code (None when killed before it had one)
    elapsed: float  # seconds the worker ran
    stderr_tail: str


def run_worker_job(job: dict, prefix: str, timeout_s: float, python: Optional[str] = None,
                   platforms: Optional[str] = None) -> WorkerRun:
    """Run one worker on `job` (its `tmpdir` set here) and read what it wrote; the folder goes
    afterwards unless PALLAS_FIX_KEEP_TMP is set. `platforms`: the worker's JAX_PLATFORMS ("" lets
    jax choose, a TPU first: the chip check); by default the CPU."""
    tmpdir = tempfile.mkdtemp(prefix=prefix)
    job_path, out_path = os.path.join(tmpdir, "job.json"), os.path.join(tmpdir, "results.jsonl")
    err_path = os.path.join(tmpdir, "stderr.txt")
    try:
        with open(job_path, "w", encoding="utf-8") as f:
            json.dump({**job, "tmpdir": os.path.join(tmpdir, "src")}, f)
        cmd = [python or sys.executable, "-m", "pallas_fix.verify.worker.main", "--job", job_path, "--out", out_path]
        t0 = time.perf_counter()
        timed_out, rc = _run_worker(cmd, out_path, err_path, timeout_s, platforms)
        elapsed = time.perf_counter() - t0
        return WorkerRun(_read_records(out_path), timed_out, rc, elapsed, _tail(err_path))
    finally:
        if not os.environ.get("PALLAS_FIX_KEEP_TMP"):
            shutil.rmtree(tmpdir, ignore_errors=True)


def _worker_env(platforms: Optional[str] = None) -> dict:
    # Read key by key: verification runs in threads while another thread may change the
    # environment (pytest sets and deletes PYTEST_CURRENT_TEST), and `dict(os.environ)` raises
    # KeyError for a key deleted while it copies.
    env = {k: v for k in list(os.environ) if (v := os.environ.get(k)) is not None}
    pp = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = _PACKAGE_ROOT + (os.pathsep + pp if pp else "")
    env.setdefault("JAX_PLATFORMS", "cpu")
    if platforms is not None:
        env["JAX_PLATFORMS"] = platforms
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


def _tail(path: str, n: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _run_worker(cmd: list[str], out_path: str, err_path: str, timeout_s: float,
                platforms: Optional[str] = None) -> tuple[bool, Optional[int]]:
    """(timed out, exit code): the worker in its own process group, killed whole at the limit;
    forked from a warm server where the job allows (verify.zygote_client), else a fresh process."""
    env = _worker_env(platforms)
    # The chip check (platforms given) starts a TPU backend: always in a fresh process.
    forked = run_forked(cmd, err_path, timeout_s, env) if platforms is None else None
    if forked is not None:
        return forked
    if os.path.exists(out_path):  # records of a forked worker whose server died (the worker appends)
        os.truncate(out_path, 0)
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            start_new_session=True,
        )
        try:
            return False, proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return True, proc.returncode


def _read_records(out_path: str) -> list[dict]:
    records = []
    try:
        with open(out_path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line cut short by the kill
    except OSError:
        pass
    return records
