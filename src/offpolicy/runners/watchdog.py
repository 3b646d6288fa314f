"""Stopping an environment that hangs.

Python cannot stop a running call from outside except with a signal, and only
the main thread receives signals. So for environments stepped in the trainer
(the in-process backend), a helper thread watches when each env's current call
began and, once one runs past `timeout` seconds, sends SIGALRM to the main
thread, whose handler raises `EnvTimeoutError` inside the stuck call. The
threads and processes backends need no signal: the trainer waits for their
results with the same timeout and names the env still stepping.

Limits: a call stuck inside C code that never returns to Python cannot be
interrupted in-process; off the main thread (or where SIGALRM does not exist)
in-process hangs are not caught. The processes backend catches both.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, Iterable

from offpolicy.runners.core import EnvRunnerError
from offpolicy.runners.inprocess import EnvSession


class EnvTimeoutError(EnvRunnerError):
    """An environment call ran longer than the configured `env_timeout`."""


def hang_message(session: EnvSession, timeout: float) -> str:
    return (
        f"environment {session.env_id} did not finish {session.call} within {timeout:g} s "
        f"(at its step {session.steps + 1:,}); it hangs, or its steps are slower than --env-timeout allows"
    )


def hung_session(sessions: Iterable[EnvSession], timeout: float) -> EnvSession | None:
    """The session whose current call has run longest past `timeout`, if any."""
    now = time.monotonic()
    late = [s for s in sessions if s.busy_since and now - s.busy_since > timeout]
    return min(late, key=lambda s: s.busy_since, default=None)


class HangWatchdog:
    """Interrupts in-process env calls that run past `timeout` seconds (0 disables it)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._sessions: list[EnvSession] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fired: tuple[EnvSession, float] | None = None
        self._previous_handler: Any = None

    @property
    def can_interrupt(self) -> bool:
        return (
            self.timeout > 0
            and hasattr(signal, "SIGALRM")
            and threading.current_thread() is threading.main_thread()
        )

    def watch(self, sessions: Iterable[EnvSession]) -> None:
        """Guard these sessions' calls; starts the helper thread on first use."""
        self._sessions.extend(sessions)
        if self._thread is None and self.can_interrupt:
            self._previous_handler = signal.signal(signal.SIGALRM, self._on_alarm)
            self._main_thread = threading.main_thread().ident
            self._thread = threading.Thread(target=self._watch, name="offpolicy-watchdog", daemon=True)
            self._thread.start()

    def unwatch(self, sessions: Iterable[EnvSession]) -> None:
        """Stop guarding these sessions (their runner is closing)."""
        closing = {id(session) for session in sessions}
        self._sessions = [session for session in self._sessions if id(session) not in closing]

    def _watch(self) -> None:
        period = min(0.25, self.timeout / 4)
        while not self._stop.wait(period):
            session = hung_session(self._sessions, self.timeout)
            if session is not None and self._fired != (session, session.busy_since):
                self._fired = (session, session.busy_since)
                signal.pthread_kill(self._main_thread, signal.SIGALRM)

    def _on_alarm(self, signum: int, frame: Any) -> None:
        fired = self._fired
        if fired is not None and fired[0].busy_since == fired[1]:
            raise EnvTimeoutError(hang_message(fired[0], self.timeout))
        if callable(self._previous_handler):  # not ours: e.g. pytest-timeout's alarm
            self._previous_handler(signum, frame)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            signal.signal(signal.SIGALRM, self._previous_handler)
            self._thread = None
        self._sessions = []
