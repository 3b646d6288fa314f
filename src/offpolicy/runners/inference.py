"""The autobatching inference server (the seed's `AsyncPolicy`).

Environment workers ask for actions and block until answered. Requests are
held until `min(active workers, autobatch_size)` are pending, then answered by
one batched policy call. A worker that waits for the trainer (idle) is not
active, so the server never waits for it; whenever the active count drops, the
server re-checks whether what is pending can go.

There is no server thread: the request (or the departure) that completes a
batch runs it, so no thread hop is added to the step.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from offpolicy.policy import Policy, PolicyState


class ActionRequest:
    """One pending observation; `wait()` returns its action and action context."""

    __slots__ = ("observation", "deterministic", "action", "context", "_done", "error")

    def __init__(self, observation: np.ndarray, deterministic: bool) -> None:
        self.observation = observation
        self.deterministic = deterministic
        self.action: Any = None
        self.context: dict[str, float] = {}
        self.error: BaseException | None = None
        self._done = threading.Event()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> tuple[Any, dict[str, float]]:
        if not self._done.wait(timeout):
            raise TimeoutError("no action within the timeout")
        if self.error is not None:
            raise RuntimeError("the policy failed on a batch of observations") from self.error
        return self.action, self.context


class InferenceServer:
    """Owns the acting policy and answers batched action requests."""

    def __init__(self, policy: Policy, autobatch_size: int) -> None:
        if autobatch_size < 1:
            raise ValueError(f"autobatch_size must be at least 1, got {autobatch_size}")
        self.policy = policy
        self.autobatch_size = autobatch_size
        self._lock = threading.Lock()
        self._pending: list[ActionRequest] = []
        self._active = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def active_workers(self) -> int:
        return self._active

    def worker_active(self) -> None:
        """A worker will send requests: batches may wait for it."""
        with self._lock:
            self._active += 1

    def worker_idle(self) -> None:
        """A worker stops sending requests (waits for work, or leaves): never wait for it."""
        with self._lock:
            self._active -= 1
            self._flush_if_ready()

    def submit(self, observation: np.ndarray, deterministic: bool) -> ActionRequest:
        """Queue one observation; the returned request completes when its batch runs."""
        request = ActionRequest(observation, deterministic)
        with self._lock:
            self._pending.append(request)
            self._flush_if_ready()
        return request

    def act(self, observation: np.ndarray, deterministic: bool) -> tuple[Any, dict[str, float]]:
        """Blocking form of `submit`."""
        return self.submit(observation, deterministic).wait()

    def update_policy(self, state: PolicyState) -> None:
        """Answer what is pending with the old parameters, then swap in the new ones."""
        with self._lock:
            self._flush()
            self.policy.update(state)

    def flush(self) -> None:
        """Answer whatever is pending now, however few."""
        with self._lock:
            self._flush()

    def _flush_if_ready(self) -> None:
        if self._pending and len(self._pending) >= min(self._active, self.autobatch_size):
            self._flush()

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        if not batch:
            return
        deterministic = all(request.deterministic for request in batch)
        try:
            actions, context = self.policy.act_arrays(np.stack([request.observation for request in batch]),
                                                      deterministic)
        except BaseException as error:  # every waiter must wake, or the workers hang
            for request in batch:
                request.error = error
                request._done.set()
            raise
        for request, action in zip(batch, actions):
            request.action = action
            request.context = context
            request._done.set()
