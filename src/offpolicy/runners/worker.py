"""The body of an environment worker process (the `processes` backend).

Kept apart from the runner so a spawned worker imports only NumPy and
Gymnasium, not torch: start-up takes a fraction of a second instead of seconds.
Envs step through `EnvSession`, as in every other backend.
Observations, actions, rewards and flags live in shared memory, and so do the
requests (which envs to step); semaphores say when there is work and when it is
done. The pipe carries only start-up and error messages.
"""

from __future__ import annotations

import math
import os
import signal
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from offpolicy.runners.core import EnvRunnerError
from offpolicy.runners.inprocess import EnvSession


@dataclass
class SharedArrays:
    """Arrays in shared memory: each worker's request ring, and one record per env (`step_record`)."""

    buffers: dict[str, Any]
    specs: dict[str, tuple[tuple[int, ...], np.dtype]]

    def views(self) -> dict[str, np.ndarray]:
        return {
            name: np.frombuffer(self.buffers[name], dtype=dtype).reshape(shape)
            for name, (shape, dtype) in self.specs.items()
        }


def step_record(observation: np.ndarray, action: np.ndarray) -> np.dtype:
    """One env's row in shared memory: all that one step hands the trainer, so it reads a batch in one copy.

    The trainer writes `action` and the `acted_observation` it chose it for; the worker writes the rest:
    the step's true `next_observation`, the `observation` to act on next (the reset one at an episode's
    end), the running episode's return and length, its `success` (NaN if the env reports none), the env's
    step count, and `busy` while it is inside
    `step()` or `reset()`. Fields are aligned: a field's view has strides torch accepts as they are
    (multiples of its element size), and no element straddles a word.
    """
    return np.dtype(
        [
            ("acted_observation", observation.dtype, observation.shape),
            ("observation", observation.dtype, observation.shape),
            ("next_observation", observation.dtype, observation.shape),
            ("action", action.dtype, action.shape),
            ("reward", np.float64),
            ("episode_return", np.float64),
            ("success", np.float64),
            ("episode_length", np.int64),
            ("env_steps", np.int64),
            ("terminated", np.bool_),
            ("truncated", np.bool_),
            ("busy", np.bool_),
        ],
        align=True,
    )


def allocate(context: Any, num_envs: int, workers: int, observation: np.ndarray, action: np.ndarray) -> SharedArrays:
    """A record per env shaped like one observation and one action, and each worker's request ring.

    Worker `w` reads its requests from a ring, `request_ids[w, slot, :request_counts[w, slot]]`; each env is
    in at most one request under way, so a ring as long as a worker's share of envs (plus the request to
    stop) never overflows.
    """
    share = math.ceil(num_envs / workers)
    specs = {
        "request_ids": ((workers, share + 1, share), np.dtype("<i8")),
        "request_counts": ((workers, share + 1), np.dtype("<i8")),
        "records": ((num_envs,), step_record(observation, action)),
    }
    buffers = {
        name: context.RawArray("b", int(np.prod(shape)) * dtype.itemsize) for name, (shape, dtype) in specs.items()
    }
    return SharedArrays(buffers, specs)


SPIN_S = 0.0005
"""How long a waiter polls (yielding the core each time) before it sleeps: waking a process that slept
costs from 0.1 to over 1 ms on a virtual machine, more than a step of many environments. Workers poll
while there are no more of them than cores (measured here, heavy env x8 on 2 cores: 5,450 -> 6,250 steps/s);
the trainer only where every process has a core of its own, as it would otherwise take the time of the
workers it waits for."""

SLEEP_SLICE_S = 0.05
"""A sleeping waiter wakes this often to check that the other side is still there."""

yield_core: Callable[[], None] = getattr(os, "sched_yield", lambda: time.sleep(0))


@dataclass
class Doorbells:
    """Semaphores between the trainer and its workers: a request is ready, a reply is ready.

    Semaphores rather than pipes because taking a count that is already there is
    one atomic operation, with no system call, and orders memory on every CPU:
    what one side wrote to the shared arrays before ringing, the other sees after.
    """

    requests: list[Any]
    """One per worker, rung by the trainer for each request it writes to the worker's ring."""
    replies: list[Any]
    """One per worker, rung by the worker when a request's steps are in shared memory."""
    any_reply: Any
    """Rung with every reply (and error): what a sleeping trainer waits on."""

    @staticmethod
    def create(context: Any, workers: int) -> "Doorbells":
        return Doorbells([context.Semaphore(0) for _ in range(workers)],
                         [context.Semaphore(0) for _ in range(workers)], context.Semaphore(0))


def spin_acquire(semaphore: Any, seconds: float) -> bool:
    """Take one count of `semaphore` if it arrives within `seconds`, polling and yielding the core meanwhile."""
    if semaphore.acquire(False):
        return True
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        yield_core()
        if semaphore.acquire(False):
            return True
    return False


def _next_request(bell: Any, connection: Any, spin_s: float) -> bool:
    """Wait for the trainer's next request; False when the trainer is gone (its end of the pipe closed)."""
    if spin_acquire(bell, spin_s):
        return True
    while not bell.acquire(timeout=SLEEP_SLICE_S):
        if connection.poll():  # the trainer never writes to us: readable means it has gone
            return False
    return True


def work(
    connection: Any, factory: Any, worker: int, env_ids: list[int], seeds: list[int], shared: SharedArrays,
    bells: Doorbells, spin_s: float, niceness: int = 0,
) -> None:
    """Own envs `env_ids`; for each request in this worker's ring, step its envs with the shared actions.

    Each step fills its env's record (`step_record`); `busy` is set while an env
    is inside `step()` or `reset()`, so the trainer can name the one that hangs.
    A request of count -1 asks the worker to stop.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle; it stops us
    if niceness > 0 and hasattr(os, "nice"):
        os.nice(niceness)  # relative to the trainer's, and never below it: raising priority needs privileges
    arrays = shared.views()
    request_ids, request_counts = arrays["request_ids"][worker], arrays["request_counts"][worker]
    records = arrays["records"]
    actions, busy, env_steps = records["action"], records["busy"], records["env_steps"]
    observations, final_observations = records["observation"], records["next_observation"]
    rewards, terminated_flags, truncated_flags = records["reward"], records["terminated"], records["truncated"]
    episode_returns, episode_lengths = records["episode_return"], records["episode_length"]
    successes = records["success"]
    sessions: dict[int, EnvSession] = {}
    try:
        for env_id, seed in zip(env_ids, seeds):
            busy[env_id] = True
            session = sessions[env_id] = EnvSession(factory, env_id, seed)
            observations[env_id] = session.observation
            busy[env_id] = False
        connection.send(("ready", env_ids))
        taken = 0
        while _next_request(bells.requests[worker], connection, spin_s):
            slot = taken % len(request_counts)
            taken += 1
            count = int(request_counts[slot])
            if count < 0:
                break
            for env_id in request_ids[slot, :count].tolist():
                session = sessions[env_id]
                action = actions[env_id]  # a NumPy scalar, or a copy: the env may keep it, our row changes
                busy[env_id] = True
                next_observation, _, reward, terminated, truncated, length, episode_return, success = session.advance(
                    action.copy() if action.ndim else action[()])
                busy[env_id] = False
                final_observations[env_id] = next_observation
                rewards[env_id], terminated_flags[env_id], truncated_flags[env_id] = reward, terminated, truncated
                episode_returns[env_id], episode_lengths[env_id] = episode_return, length
                successes[env_id] = success
                env_steps[env_id] = session.steps
                observations[env_id] = session.observation
            bells.replies[worker].release()
            bells.any_reply.release()
    except KeyboardInterrupt:
        pass
    except BaseException as error:
        try:
            message = str(error) if isinstance(error, EnvRunnerError) else f"environment worker failed: {error!r}"
            connection.send(("error", message, traceback.format_exc()))
            bells.any_reply.release()
        except OSError:
            pass
    finally:
        for session in sessions.values():
            session.close()
