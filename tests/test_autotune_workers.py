"""The autotuner's worker processes: faults never reach the parent, workers stay warm across runs.

Worker groups run fake setups from `autotune_fakes.py` on the CPU: errors, timeouts, crashes,
dead or broken workers, warm-ups, forked starts (with CUDA faked as untouched) and the
process's pool of warm groups.
"""
from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from tessera.autotune import forking, pool, workers
from tessera.autotune.pool import leased_group, release_group
from tessera.autotune.workers import WorkerGroup

import autotune_fakes


pytestmark = pytest.mark.usefixtures("private_cache")

# ---------------------------------------------------------------------------------------------
# Workers: faults never reach the parent
# ---------------------------------------------------------------------------------------------

def test_worker_group_reports_errors_timeouts_and_crashes_and_keeps_working():
    group = WorkerGroup("test", 2, setup=autotune_fakes.echo_setup, payload="p", task_timeout=60)
    try:
        group.start()
        group.submit(0, "a")
        assert [o.kind for o in group.wait_all(timeout=120)] == ["ok"]  # both workers are up now
        group.task_timeout = 2
        outcomes = {o.task_id: o for o in _run_all(group, {1: "raise", 2: "crash", 3: "hang", 4: "b", 5: "c"})}
        assert {k: o.kind for k, o in outcomes.items()} == {1: "error", 2: "crash", 3: "timeout", 4: "ok", 5: "ok"}
        assert "ValueError: boom" in outcomes[1].message
        assert outcomes[2].message.endswith("(code 5)")
        assert (outcomes[4].value, outcomes[5].value) == (("p", "b"), ("p", "c"))
    finally:
        group.close()


def _fork_allowed(monkeypatch) -> None:
    """As in a process that imported torch and has not touched CUDA (and no fork failed yet)."""
    if torch.cuda.is_initialized() or forking._cuda_driver_initialized():  # a fork would really inherit CUDA
        pytest.skip("CUDA is initialized in this test process; the fork tests need a process without it")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(forking, "_cuda_driver_initialized", lambda: False)
    monkeypatch.setattr(forking, "_fork_failed", None)


def test_workers_are_forked_while_cuda_is_untouched_and_keep_nothing_of_the_parent(monkeypatch):
    _fork_allowed(monkeypatch)
    assert forking.fork_hazard() is None
    group = WorkerGroup("test-fork", 2, setup=autotune_fakes.state_setup, payload=None, task_timeout=60)
    other = WorkerGroup("test-other", 1, setup=autotune_fakes.echo_setup, payload="p", task_timeout=60)
    try:
        other.start()  # its pipes are open here when the first group forks
        outcomes = _run_all(group, {0: "state", 1: "state"})
        assert [o.kind for o in outcomes] == ["ok", "ok"]
        state = outcomes[0].value
        assert state["forked"] and state["parent"] and state["pools"] == {} and state["threads"] == 1
        assert state["pid"] != os.getpid() and group.start_methods() == "fork"
        # the forked children closed the other group's pipe ends they inherited: a worker still
        # sees EOF (and exits) when its parent's end closes, as when the tuning process dies
        assert [o.kind for o in _run_all(other, {0: "a"})] == ["ok"]
        other.workers[0].connection.close()
        other.workers[0].process.join(timeout=20)
        assert other.workers[0].process.exitcode == 0
    finally:
        group.close()
        other.close()
    assert all(not worker.process.is_alive() for worker in group.workers)


def test_workers_come_from_the_fork_server_once_cuda_is_initialized_or_when_forced(monkeypatch):
    monkeypatch.setattr(forking, "_cuda_driver_initialized", lambda: False)
    monkeypatch.setattr(forking, "_fork_failed", None)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert forking.fork_hazard() == "CUDA is initialized in this process"
    group = WorkerGroup("test-no-fork", 1, setup=autotune_fakes.state_setup, payload=None, task_timeout=60)
    try:
        [outcome] = _run_all(group, {0: "state"})
        assert outcome.ok and not outcome.value["forked"] and outcome.value["parent"]
        assert group.start_methods() == "forkserver" and "CUDA" in group.workers[0].fork_skipped
    finally:
        group.close()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(forking, "_cuda_driver_initialized", lambda: True)
    assert forking.fork_hazard() == "the CUDA driver is initialized in this process"
    monkeypatch.setattr(forking, "_cuda_driver_initialized", lambda: False)
    forced = WorkerGroup("test-forced", 1, setup=autotune_fakes.echo_setup, payload="p", task_timeout=60,
                         start_method="forkserver")
    try:
        assert [o.kind for o in _run_all(forced, {0: "a"})] == ["ok"] and forced.start_methods() == "forkserver"
    finally:
        forced.close()
    with pytest.raises(ValueError, match="start_method"):
        WorkerGroup("test-bad", 1, setup=autotune_fakes.echo_setup, payload="p", task_timeout=60, start_method="fork")


def test_workers_started_inside_forking_here_are_forked_before_it_returns(monkeypatch):
    """At kernel definition CUDA is untouched; a moment later the program may initialize it, so
    prewarm forks on its own thread rather than leaving it to the starter thread."""
    _fork_allowed(monkeypatch)
    group = WorkerGroup("test-fork-here", 2, setup=autotune_fakes.state_setup, payload=None, task_timeout=60)
    try:
        with forking.forking_here():
            group.start()
        assert all(worker.started and worker.method == "fork" for worker in group.workers)
        outcomes = _run_all(group, {0: "state", 1: "state"})
        assert [o.kind for o in outcomes] == ["ok", "ok"] and all(o.value["forked"] for o in outcomes)
    finally:
        group.close()


def test_no_fork_while_another_thread_initializes_cuda(monkeypatch):
    _fork_allowed(monkeypatch)
    with torch.cuda._initialization_lock:  # as `torch.cuda._lazy_init` on the user's thread
        assert forking._fork_start(None) == "CUDA is being initialized in this process"


def test_a_forked_worker_that_cannot_use_cuda_is_replaced_from_the_fork_server(monkeypatch):
    # the race: the user's thread initialized CUDA while a worker was forked (injected: the
    # forked child's setup fails as torch's would); its task runs in the replacement
    _fork_allowed(monkeypatch)
    messages: list[str] = []
    group = WorkerGroup("test-fork-race", 1, setup=autotune_fakes.fork_fragile_setup, payload="p", task_timeout=60,
                        log=messages.append)
    try:
        outcomes = _run_all(group, {0: "a", 1: "b"})
        assert sorted((o.task_id, o.kind, o.value) for o in outcomes) == [(0, "ok", ("p", "a")), (1, "ok", ("p", "b"))]
        assert group.start_methods() == "forkserver" and group.restarts == 1 and group.setup_failure is None
        assert "re-initialize CUDA" in forking._fork_failed and forking.fork_hazard().startswith("a forked worker")
        assert any("forked worker cannot use CUDA" in message for message in messages)
    finally:
        group.close()


def test_a_forked_worker_stuck_in_setup_is_replaced_from_the_fork_server(monkeypatch):
    # e.g. a lock held by another thread of the parent at the fork (injected: setup sleeps)
    _fork_allowed(monkeypatch)
    monkeypatch.setattr(workers, "FORK_STARTUP_TIMEOUT", 1.0)
    group = WorkerGroup("test-fork-stuck", 1, setup=autotune_fakes.fork_stuck_setup, payload="p", task_timeout=60)
    try:
        assert [(o.kind, o.value) for o in _run_all(group, {0: "a"})] == [("ok", ("p", "a"))]
        assert group.start_methods() == "forkserver" and "after the fork" in forking._fork_failed
    finally:
        group.close()


def test_a_worker_that_cannot_start_fails_its_tasks_instead_of_restarting_forever():
    group = WorkerGroup("broken", 1, setup=autotune_fakes.failing_setup, payload=None, task_timeout=20)
    try:
        outcomes = _run_all(group, {0: "a", 1: "b"})
        assert sorted((o.task_id, o.kind) for o in outcomes) == [(0, "error"), (1, "error")]
        assert "injected setup failure" in outcomes[0].message
    finally:
        group.close()


def _echo_group(name: str, size: int = 1, payload: str = "p") -> WorkerGroup:
    return leased_group(name, size, setup=autotune_fakes.echo_setup, payload=payload, task_timeout=60)


def test_a_leased_group_keeps_its_workers_warm_for_the_next_run():
    first = _echo_group("test-warm", 2)
    pids = set(o.value for o in _run_all(first, {0: "pid", 1: "pid"}))
    release_group(first)
    second = _echo_group("test-warm", 2)
    try:
        assert second is first and second.has_ready_worker()
        assert {o.value for o in _run_all(second, {2: "pid", 3: "pid"})} <= {w.process.pid for w in second.workers}
        assert {w.process.pid for w in second.workers} >= pids
    finally:
        release_group(second)


def test_a_leased_group_is_remade_when_its_payload_changes():
    first = _echo_group("test-payload")
    release_group(first)
    second = _echo_group("test-payload", payload="q")
    try:
        assert second is not first and not first.workers
        assert [o.value for o in _run_all(second, {0: "a"})] == [("q", "a")]
    finally:
        release_group(second)


def test_a_worker_that_died_between_runs_is_replaced_not_handed_out():
    group = _echo_group("test-dead")
    [pid] = [o.value for o in _run_all(group, {0: "pid"})]
    release_group(group)
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    group = _echo_group("test-dead")
    try:
        outcomes = _run_all(group, {1: "pid"})
        assert [o.kind for o in outcomes] == ["ok"] and outcomes[0].value != pid
    finally:
        release_group(group)


def test_a_second_caller_while_the_group_is_leased_gets_a_private_group():
    shared = _echo_group("test-busy")
    private = _echo_group("test-busy")
    try:
        assert private is not shared and not private.pooled
        assert [o.value for o in _run_all(private, {0: "a"})] == [("p", "a")]
    finally:
        release_group(private)
        release_group(shared)
    assert not private.workers


def test_shutdown_stops_every_warm_worker_and_a_later_lease_starts_afresh():
    group = _echo_group("test-shutdown", 2)
    _run_all(group, {0: "a", 1: "b"})
    processes = [w.process for w in group.workers]
    release_group(group)
    pool.shutdown_pools()
    assert processes and not any(process.is_alive() for process in processes)
    again = _echo_group("test-shutdown")
    try:
        assert again is not group
        assert [o.value for o in _run_all(again, {2: "c"})] == [("p", "c")]
    finally:
        release_group(again)


def test_a_warm_group_nobody_leases_again_is_stopped_after_the_idle_time(monkeypatch):
    monkeypatch.setattr(pool, "IDLE_SHUTDOWN_S", 0.2)
    group = _echo_group("test-idle")
    _run_all(group, {0: "a"})
    process = group.workers[0].process
    release_group(group)
    deadline = time.monotonic() + 20
    while process.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process.is_alive() and "test-idle" not in pool._pools


def test_every_worker_gets_the_run_session_before_its_task_and_a_replacement_gets_it_again(tmp_path):
    group = WorkerGroup("test-session", 1, setup=autotune_fakes.session_echo_setup, payload=str(tmp_path / "m"),
                        task_timeout=60)
    try:
        group.set_session("s1")
        first = _run_all(group, {0: "a", 1: "crash", 2: "b"})
        kinds = {o.task_id: (o.kind, o.value and o.value[:2]) for o in first}
        assert kinds == {0: ("ok", ("s1", "a")), 1: ("crash", None), 2: ("ok", ("s1", "b"))}
        group.set_session("s2")
        assert [o.value[:2] for o in _run_all(group, {3: "c"})] == [("s2", "c")]
    finally:
        group.close()


def test_a_worker_found_broken_when_the_session_starts_is_replaced_and_the_task_still_runs(tmp_path):
    group = WorkerGroup("test-poisoned", 1, setup=autotune_fakes.session_echo_setup, payload=str(tmp_path / "m"),
                        task_timeout=60)
    try:
        group.start()
        assert [o.kind for o in _run_all(group, {0: "warm-up"})] == ["ok"]
        first_pid = group.workers[0].process.pid
        group.set_session("die")  # the first worker to set it up dies (a poisoned CUDA context)
        outcomes = _run_all(group, {1: "a"})
        assert [(o.kind, o.value[:2]) for o in outcomes] == [("ok", ("die", "a"))]
        assert outcomes[0].value[2] != first_pid
    finally:
        group.close()


def test_a_task_waits_for_its_workers_warm_up():
    group = WorkerGroup("test-warm", 1, setup=autotune_fakes.warm_echo_setup, payload="ok", task_timeout=60)
    try:
        [outcome] = _run_all(group, {0: "a"})
        assert outcome.kind == "ok" and outcome.value[:2] == (True, "a")
        assert group.warm_up and not group.workers[0].warming and group.first_warm_at is not None
    finally:
        group.close()


def test_a_worker_that_dies_warming_up_is_blamed_not_its_task_and_later_workers_skip_the_warm_up():
    group = WorkerGroup("test-warm-crash", 1, setup=autotune_fakes.warm_echo_setup, payload="crash", task_timeout=60)
    try:
        outcomes = _run_all(group, {0: "a", 1: "b"})
        assert sorted((o.task_id, o.kind, o.value[:2]) for o in outcomes) == [(0, "ok", (False, "a")),
                                                                             (1, "ok", (False, "b"))]
        assert not group.warm_up and group.restarts == 1
    finally:
        group.close()


def test_a_hanging_warm_up_holds_a_task_only_for_the_warm_up_wait():
    group = WorkerGroup("test-warm-hang", 1, setup=autotune_fakes.warm_echo_setup, payload="hang", task_timeout=60)
    group.warm_up_wait = 0.5
    try:
        [outcome] = _run_all(group, {0: "a"})
        assert outcome.kind == "ok" and outcome.value[:2] == (False, "a")
    finally:
        group.close()


def test_closing_does_not_wait_for_workers_still_setting_up():
    group = WorkerGroup("test-slow-start", 1, setup=autotune_fakes.slow_echo_setup, payload="p", task_timeout=60)
    group.start()
    deadline = time.monotonic() + 60
    while not group.workers[0].alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    process = group.workers[0].process
    begun = time.monotonic()
    group.close()
    assert time.monotonic() - begun < 1.5 and not process.is_alive()


def test_a_prestarted_group_is_leased_with_the_workers_it_started():
    pool.shutdown_pools()
    group = pool.prestart_group("test-prestart", 2, setup=autotune_fakes.echo_setup, payload="p", task_timeout=60)
    assert group is not None and group.prestarted and not group.leased and pool.has_group("test-prestart")
    assert pool.prestart_group("test-prestart", 2, setup=autotune_fakes.echo_setup, payload="p",
                                  task_timeout=60) is None
    deadline = time.monotonic() + 120
    while not all(w.started for w in group.workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = {w.process.pid for w in group.workers}
    leased = _echo_group("test-prestart", 2)
    try:
        assert leased is group and group.head_start is not None and not group.prestarted
        assert {o.value for o in _run_all(leased, {0: "pid", 1: "pid"})} <= pids
    finally:
        release_group(leased)


def test_a_prestarted_group_nobody_leases_is_stopped_after_the_idle_time(monkeypatch):
    monkeypatch.setattr(pool, "IDLE_SHUTDOWN_S", 0.3)
    group = pool.prestart_group("test-prestart-idle", 1, setup=autotune_fakes.echo_setup, payload="p",
                                   task_timeout=60)
    assert group is not None
    deadline = time.monotonic() + 20
    while pool.has_group("test-prestart-idle") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pool.has_group("test-prestart-idle") and not group.workers


def test_a_warm_group_is_remade_when_the_workers_environment_changed(monkeypatch, tmp_path):
    first = _echo_group("test-environ")
    release_group(first)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # e.g. set by the program after it defined a kernel
    second = _echo_group("test-environ")
    try:
        assert second is not first and not first.workers
    finally:
        release_group(second)


def test_workers_are_started_without_importing_the_main_module():
    from multiprocessing import spawn
    workers._install_main_filter()
    workers._starting.active = True
    try:
        data = spawn.get_preparation_data("x")
    finally:
        workers._starting.active = False
    assert "init_main_from_name" not in data and "init_main_from_path" not in data
    assert data["sys_path"]  # what children need to import the setup functions


def _run_all(group: WorkerGroup, tasks: dict) -> list:
    for task_id, task in tasks.items():
        group.submit(task_id, task)
    return group.wait_all(timeout=120)
