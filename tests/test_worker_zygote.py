"""Verification workers forked from a warm server (pallas_fix.verify.zygote_client): the same
verdicts as a fresh process, the time limit still kills the whole process group, and a server
that dies under a job leaves the job to a fresh process rather than losing it."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from pallas_fix.verify import collect_examples, verify_sources
from pallas_fix.verify import zygote_client
from pallas_fix.verify.worker_process import _worker_env, run_worker_job
from test_verify import _dead  # a zombie or gone

pytestmark = [pytest.mark.interp, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks on Linux only")]

FIX = Path(__file__).parent / "fixtures" / "verify"
PAIR = Path(__file__).parent / "fixtures" / "codemods" / "lift_loop"


def _verdicts(monkeypatch, fresh: bool):
    if fresh:
        monkeypatch.setenv("PALLAS_FIX_FRESH_WORKERS", "1")
    else:
        monkeypatch.delenv("PALLAS_FIX_FRESH_WORKERS", raising=False)
    before = (PAIR / "helper_reads_view_before.py").read_text()
    after = (PAIR / "helper_reads_view_after.py").read_text()
    examples = collect_examples(PAIR / "helper_reads_view_before.py", before)
    return verify_sources(before, after, examples, timeout_s=120)


def _server():
    return zygote_client._servers.get(zygote_client._key(_worker_env()))


def test_a_forked_worker_gives_the_verdicts_of_a_fresh_one(monkeypatch):
    zygote_client.close_servers()
    fresh = _verdicts(monkeypatch, fresh=True)
    forked = _verdicts(monkeypatch, fresh=False)
    server = _server()
    assert server is not None and server.served >= 1  # the second run did go through the server
    served = server.served
    again = _verdicts(monkeypatch, fresh=False)
    assert server.served == served + 1  # one warm server, reused
    assert [v.status for v in fresh] == [v.status for v in forked] == [v.status for v in again] == ["verified"]
    assert [v.message for v in fresh] == [v.message for v in forked]


def test_the_fresh_switch_starts_no_server(monkeypatch):
    monkeypatch.setenv("PALLAS_FIX_FRESH_WORKERS", "1")
    assert zygote_client.run_forked([sys.executable, "-m", "pallas_fix.verify.worker.main"], "/dev/null", 1, {}) is None


def _sleepy_job():
    src = (FIX / "sleepy.py").read_text()
    examples = [e for e in collect_examples(FIX / "sleepy.py", src) if e.entry == "slow"]
    from pallas_fix.core.examples import example_to_json

    job = {"original": {"source": src, "path": "sleepy.py"}, "rewritten": {"source": src, "path": "sleepy.py"},
           "examples": [example_to_json(e) for e in examples], "seeds": [0]}
    return job


def test_a_server_that_dies_under_a_job_leaves_it_to_a_fresh_process(tmp_path, monkeypatch):
    monkeypatch.delenv("PALLAS_FIX_FRESH_WORKERS", raising=False)
    zygote_client.close_servers()  # earlier tests' servers: room for one under this test's environment
    pidfile = tmp_path / "pids"
    monkeypatch.setenv("PALLAS_FIX_TEST_PIDFILE", str(pidfile))
    job = _sleepy_job()
    result = {}
    runner = threading.Thread(target=lambda: result.setdefault("run", run_worker_job(job, "pallas-fix-zygote-test-", 20)))
    runner.start()
    deadline = time.time() + 60
    while time.time() < deadline and not pidfile.exists():
        time.sleep(0.1)
    forked_pid = int(pidfile.read_text().split()[0])
    server = _server()
    assert server is not None
    pidfile.unlink()
    server.proc.kill()  # the server goes while its child hangs in `slow`
    deadline = time.time() + 60
    while time.time() < deadline and not pidfile.exists():
        time.sleep(0.1)
    assert pidfile.exists()  # the job started again, in a fresh process
    fresh_pid = int(pidfile.read_text().split()[0])
    assert fresh_pid != forked_pid
    runner.join(timeout=60)
    run = result["run"]
    assert run.timed_out  # `slow` never returns: the fresh process hit the limit
    types = [r["type"] for r in run.records]
    assert types.count("start") == 1, types  # the forked child's records were dropped
    # Killed with its process group when the server was found gone (then reaped by init).
    deadline = time.time() + 10
    while time.time() < deadline and not _dead(forked_pid):
        time.sleep(0.1)
    assert _dead(forked_pid)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_process_forked_from_a_client_starts_its_own_server(monkeypatch):
    # A library caller that verifies, then forks (multiprocessing's fork start method), must not
    # share the parent's server: its pipes are read by a thread only the parent has.
    import os

    monkeypatch.delenv("PALLAS_FIX_FRESH_WORKERS", raising=False)
    env = _worker_env()
    parent = zygote_client._server_for(env)
    assert parent is not None and parent.owner == os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        ok = False
        try:
            child = zygote_client._server_for(env)
            ok = child is not None and child is not parent and child.owner == os.getpid()
            if child is not None:
                child.close()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert zygote_client._server_for(env) is parent  # the parent keeps its own
