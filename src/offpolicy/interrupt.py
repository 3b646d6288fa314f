"""Asking a training run to stop, from anywhere, with a reason.

The loop checks the handle at each chunk boundary, so a stop never leaves a
half-written phase behind; the run still returns its policy and checkpoint.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")


class Interrupter:
    """A shared stop flag with the reason of the first stop request."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._reason: str | None = None
        self.error: BaseException | None = None

    def stop(self, reason: str) -> None:
        """Ask training to stop at the next step boundary; the first reason is kept."""
        if not self._event.is_set():
            self._reason = reason
            self._event.set()

    def should_stop(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        return self._reason

    def fail_on_error(self, action: Callable[[], T]) -> T | None:
        """Run `action`; if it raises, stop training with the error as reason instead of crashing.

        Used around metric sinks: a full disk should end the run cleanly, with
        a checkpoint, not kill it mid-phase.
        """
        try:
            return action()
        except Exception as error:
            self.error = error
            self.stop(f"{type(error).__name__}: {error}")
            return None


@contextmanager
def stop_on_signals(interrupter: Interrupter) -> Iterator[Interrupter]:
    """First Ctrl-C (or SIGTERM) asks for a clean stop; a second Ctrl-C stops at once.

    Only the main thread may install signal handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield interrupter
        return

    def on_signal(signum: int, frame: object) -> None:
        if interrupter.should_stop() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        interrupter.stop(f"{signal.Signals(signum).name} received")

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupter
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
