"""What runs inside a tuning worker process: set up once, then serve sessions and tasks.

The parent side (starting, leasing, timing out and replacing workers) is workers.py. A worker
process runs `_worker_main(connection, setup, payload, ...)`: `setup(payload)` gives a handler,
then each message is a task for `handler(task)` or a session switch (`begin_session` /
`end_session`). A handler raises `FatalWorkerError` when its process must not be reused.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable

from tessera.autotune import forking


class FatalWorkerError(RuntimeError):
    """Raised by a handler when its process is unusable after this task (e.g. a CUDA fault)."""



def _worker_main(connection: Any, setup: Callable[[Any], Callable[[Any], Any]], payload: Any,
                 environ: dict[str, str], warm_up_wait: float | None = None, forked: bool = False) -> None:
    """A worker process's body; a forked one leaves with `os._exit` (none of the parent's exit
    handlers or multiprocessing's exit function run in it)."""
    if not forked:
        _serve(connection, setup, payload, environ, warm_up_wait, forked)
        return
    code = 0
    try:
        _serve(connection, setup, payload, environ, warm_up_wait, forked)
    except BaseException:  # noqa: BLE001 - as multiprocessing would: print, exit with 1
        code = 1
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def _serve(connection: Any, setup: Callable[[Any], Callable[[Any], Any]], payload: Any,
           environ: dict[str, str], warm_up_wait: float | None, forked: bool) -> None:
    """Body of a worker process: set up once, then answer sessions and tasks until told to stop.

    Messages in: ("task", id, task), ("session", id, payload or None to end it), None to exit.
    Messages out: ("ready", None, (setup seconds, whether a warm-up follows)), ("setup_error",
    None, text), ("warm", None, (seconds, detail)) once the handler's `warm_up` returned (it runs
    on a thread unless `warm_up_wait` is None; a task waits for it at most that long),
    ("ok" | "error", task id, value or text), ("session_ok" | "session_error", session id, text),
    ("unusable", session id, text) before exiting when the process cannot serve the session;
    ("fork_unusable", None, text) instead of "setup_error" when a forked child's CUDA cannot be
    used (the parent then starts its replacement from the fork server).
    """
    begun = time.perf_counter()
    if forked:
        forking._become_forked_worker(connection)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent, which then ends us
    os.environ.clear()  # the parent's environment now (a fork server's child has the server's)
    os.environ.update(environ)
    lock = threading.Lock()  # the warm-up thread sends too

    def send(message: Any) -> None:
        try:
            with lock:
                connection.send(message)
        except OSError:  # the parent is gone (e.g. it exited while we set up): leave quietly
            os._exit(0)

    if forked and forking._in_bad_fork():
        send(("fork_unusable", None, "CUDA was initialized in the parent before the fork"))
        return
    try:
        handler = setup(payload)
    except BaseException as error:  # noqa: BLE001 - reported to the parent, never raised there
        text = _describe(error)
        fork_trouble = forked and (forking._in_bad_fork() or any(marker in text for marker in forking._FORK_CUDA_MARKERS))
        send(("fork_unusable" if fork_trouble else "setup_error", None, text))
        return

    warm_up = getattr(handler, "warm_up", None) if warm_up_wait is not None else None
    warm = threading.Event()
    send(("ready", None, (time.perf_counter() - begun, callable(warm_up))))
    if callable(warm_up):
        threading.Thread(target=_warm_up, args=(warm_up, warm, send), name="tessera-warm-up", daemon=True).start()
    else:
        warm.set()
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        kind, ident, body = message
        failed = "session_error" if kind == "session" else "error"
        try:
            if kind == "session":
                _switch_session(handler, body)
                send(("session_ok", ident, None))
            else:
                warm.wait(warm_up_wait)  # a warm-up that overruns does not hold the task longer
                send(("ok", ident, handler(body)))
        except FatalWorkerError as error:
            send(("unusable" if kind == "session" else failed, ident, _describe(error)))
            os._exit(3)  # the process state is broken: do not run another task in it
        except BaseException as error:  # noqa: BLE001
            send((failed, ident, _describe(error)))


def _warm_up(warm_up: Callable[[], Any], done: threading.Event, send: Callable[[Any], None]) -> None:
    """Run the handler's warm-up (best effort: a failure only means the first task pays instead)."""
    begun = time.perf_counter()
    try:
        detail = str(warm_up() or "")
    except Exception as error:  # noqa: BLE001
        detail = f"failed, ignored: {_describe(error)}"
    send(("warm", None, (time.perf_counter() - begun, detail)))
    done.set()  # after the message: a crash in the task that follows is the task's


def _switch_session(handler: Any, payload: Any) -> None:
    if payload is None:
        getattr(handler, "end_session", lambda: None)()
    else:
        handler.begin_session(payload)


def _describe(error: BaseException) -> str:
    lines = traceback.format_exception_only(type(error), error)
    return "".join(lines).strip()
