"""Worker processes stepping environments in parallel, exchanging data through shared memory.

Each worker process owns every n-th env (env i in worker i mod n). The runner (in the trainer)
is the inference server: envs handed back ask for their next action, and the
pending requests are answered by one batched policy call once
`min(active envs, autobatch_size)` are waiting, where an env is active while it
is stepping or waiting for an action; envs whose step is done and not yet
asked for are idle and never waited for. Before `run_steps` returns, every env
handed back has its next step under way ("double batching"), so the workers
step while the trainer trains. With several batches under way, a worker gets
its envs of a batch in as many requests as there are batches, so it steps one
while the trainer answers another; workers run at a lower priority than the
trainer, which answers as soon as a reply is in.

Nothing crosses a pipe while stepping: requests (env ids) and one record per
env (the observation acted on and the action, the step's reward, flags and
next observation, the running episode's return and length) are in shared
memory, and semaphores ring when a request or a reply is ready. Workers keep
the episodes' running totals, so the trainer takes a batch of steps with one
copy of their records. Where every process has a core of its own, both
sides poll briefly before they sleep (`worker.SPIN_S`). Workers start
with `spawn` and import no torch.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from collections import deque
from pathlib import Path
from multiprocessing.connection import wait
from typing import Any

import numpy as np

from offpolicy.envs import EnvFactory
from offpolicy.observations import ObservationLayout
from offpolicy.policy import Policy, PolicyState
from offpolicy.runners.core import EnvRunner, EnvRunnerError, pop_steps
from offpolicy.runners.watchdog import EnvTimeoutError
from offpolicy.runners.worker import SLEEP_SLICE_S, SPIN_S, Doorbells, allocate, spin_acquire, work
from offpolicy.steps import StepBatch

START_TIMEOUT_S = 120.0

WORKER_NICENESS = 19
"""How far below the trainer's priority workers run (Unix `nice`). The trainer is the inference server every
worker waits on: when it has answers to give, it should have a core at once rather than share one with a
worker mid-step. Measured here (2 cores, heavy env, median ratio to the in-process rate): with one runner
kept open per setting, x8 1.39 -> 1.50 and x16 1.56 -> 1.63 (autobatch num_envs/2); with runners built
afresh each round, which is the fairer test, nice 0 / 19 gave x8 1.52 / 1.47 (autobatch 8) and x16
1.60 / 1.66 (autobatch 8), 1.61 / 1.59 (autobatch 16): no clear difference. On a shared machine this
also puts the env workers behind other programs; pass `worker_niceness=0` to keep them level."""


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS tells it, as in a container)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_workers(num_envs: int) -> int:
    """One worker per core, never more than there are envs."""
    return max(1, min(num_envs, usable_cores()))


def unguarded_script_hint() -> str:
    """Why a worker that dies while starting most likely did: a script that starts training at import.
    Workers are spawned, so each imports the main script again; without an `if __name__ == "__main__":`
    guard the import starts training again, and multiprocessing stops the worker."""
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    try:
        guarded = script is None or "__main__" in Path(script).read_text(errors="replace")
    except OSError:
        guarded = True
    if guarded:
        return ""
    return (f" while starting: {Path(script).name} starts training when imported, and each worker imports it "
            "again; put the code that trains under `if __name__ == \"__main__\":`")


class ProcessMultiEnvRunner(EnvRunner):
    """`len(seeds)` envs in `num_workers` processes, each env kept one step ahead."""

    def __init__(
        self,
        factory: EnvFactory,
        seeds: list[int],
        policy: Policy,
        autobatch_size: int,
        num_workers: int | None = None,
        start_method: str = "spawn",
        env_timeout: float = 0.0,
        worker_niceness: int = WORKER_NICENESS,
    ) -> None:
        """`env_timeout` > 0 bounds the wait for a step (seconds); the env still stepping is named.

        Workers run `worker_niceness` below the trainer's priority (`WORKER_NICENESS`; 0 keeps them level).
        """
        super().__init__(policy)
        self.autobatch_size = autobatch_size
        self.env_timeout = env_timeout
        num_envs = len(seeds)
        probe = factory()
        try:
            observation = ObservationLayout(probe.observation_space).pack(probe.observation_space.sample())
            action = np.asarray(probe.action_space.sample())
        finally:
            probe.close()
        context = mp.get_context(start_method)
        workers = min(num_workers or default_workers(num_envs), num_envs)
        shared = allocate(context, num_envs, workers, observation, action)
        self.arrays = shared.views()
        self._bells = Doorbells.create(context, workers)
        cores = usable_cores()
        self._trainer_spin_s = SPIN_S if cores > workers else 0.0  # polls only with a core to itself
        worker_spin_s = SPIN_S if cores >= workers else 0.0
        self._requests_sent = [0] * workers
        share = -(-num_envs // workers)
        groups = -(-num_envs // autobatch_size)
        # a worker holds at least as many requests as there are batches under way, so it has one to step while
        # the trainer answers another, even when one batch holds only its envs (a worker that runs ahead)
        self._request_cap = -(-share // groups)
        self._in_flight: list[deque[list[int]]] = [deque() for _ in range(workers)]

        # env i to worker i mod workers: a batch of consecutive requests spans every worker, so all of
        # them step it at once (heavy env x8, autobatch 8: 1.0x -> 1.23x the in-process rate here)
        slices = [list(range(start, num_envs, workers)) for start in range(workers)]
        self._connections = []
        self._processes = []
        self._worker_of: dict[int, int] = {}
        for index, env_ids in enumerate(slices):
            parent, child = context.Pipe()
            process = context.Process(
                target=work,
                args=(child, factory, index, [int(i) for i in env_ids], [seeds[i] for i in env_ids], shared,
                      self._bells, worker_spin_s, worker_niceness),
                name=f"offpolicy-envs-{index}",
                daemon=True,
            )
            process.start()
            child.close()
            self._connections.append(parent)
            self._processes.append(process)
            self._worker_of.update({int(i): index for i in env_ids})

        self._records = self.arrays["records"]
        self._record_bytes = self._records.view(np.dtype((np.void, self._records.dtype.itemsize)))
        self._observations_to_act_on = self._records["observation"]
        self._acted_observations, self._actions = self._records["acted_observation"], self._records["action"]
        self._contexts: dict[str, np.ndarray] = {}
        self._pending: list[int] = []
        self._stepping: set[int] = set()
        self._arrived: deque[np.ndarray] = deque()  # envs whose step is in shared memory, not yet taken
        self._unread: list[int] = []  # envs whose step was taken and is still only in shared memory
        self._read: list[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]] = []
        self._started = False
        try:
            self._await_ready(workers)
            self._started = True
            self._pending = list(range(num_envs))
            self._flush(force=True)
        except BaseException:
            self.close()
            raise

    def _await_ready(self, workers: int) -> None:
        started, deadline = 0, time.monotonic() + START_TIMEOUT_S
        while started < workers:
            if time.monotonic() > deadline:
                raise EnvTimeoutError(f"not every environment worker started within {START_TIMEOUT_S:.0f} s")
            messages = self._receive_messages(timeout=max(0.0, deadline - time.monotonic()))
            started += sum(1 for kind, _ in messages if kind == "ready")

    def _receive_messages(self, timeout: float | None = None) -> list[tuple[str, Any]]:
        """What workers said within `timeout` (None: until one speaks); raises on an error or a dead worker."""
        sentinels = {process.sentinel: index for index, process in enumerate(self._processes)}
        readable = wait(self._connections + list(sentinels), timeout)
        messages = []
        for item in readable:
            if item in sentinels:
                if self._connections[sentinels[item]].poll():
                    continue  # read its last words first
                self._worker_died(sentinels[item])
            index = self._connections.index(item)
            try:
                kind, payload, *rest = item.recv()
            except (EOFError, OSError):
                self._worker_died(index)
            if kind == "error":
                error = EnvRunnerError(f"{payload} (in a worker process)")
                error.worker_traceback = rest[0]
                raise error
            messages.append((kind, payload))
        return messages

    def _hang_error(self) -> EnvTimeoutError:
        busy = [int(env_id) for env_id in np.flatnonzero(self._records["busy"])] or sorted(self._stepping)
        env_id = busy[0] if busy else -1
        return EnvTimeoutError(
            f"environment {env_id} did not finish a step within {self.env_timeout:g} s "
            f"(at its step {self._records['env_steps'][env_id] + 1:,}); it hangs, or its steps are slower than "
            "--env-timeout allows"
        )

    def _worker_died(self, index: int) -> None:
        envs = sorted(e for e, w in self._worker_of.items() if w == index)
        self._processes[index].join(timeout=1)
        raise EnvRunnerError(
            f"worker process of environments {envs} died (exit code {self._processes[index].exitcode})"
            f"{'' if self._started else unguarded_script_hint()}"
        )

    def _collect(self) -> None:
        """Wait for replies (polling briefly, then sleeping in slices that check on the workers); queue their steps."""
        replied = self._take_replies()
        if not replied and spin_acquire(self._bells.any_reply, self._trainer_spin_s):
            replied = self._take_replies()
        give_up = time.monotonic() + self.env_timeout if self.env_timeout else None
        while not replied:
            self._bells.any_reply.acquire(timeout=SLEEP_SLICE_S)
            replied = self._take_replies()
            if not replied:
                self._receive_messages(timeout=0)  # raises if a worker failed or died
                if give_up is not None and time.monotonic() > give_up:
                    raise self._hang_error()
        while self._bells.any_reply.acquire(False):  # only a wake-up call: its count need not match replies
            pass
        env_ids = [env_id for request in replied for env_id in request]
        self._arrived.append(np.asarray(env_ids, dtype=np.int64))
        self._stepping.difference_update(env_ids)

    def _take_replies(self) -> list[list[int]]:
        """The requests whose steps are done, oldest first per worker."""
        replied = []
        for worker, requests in enumerate(self._in_flight):
            while requests and self._bells.replies[worker].acquire(False):
                replied.append(requests.popleft())
        return replied

    def _request(self, worker: int, env_ids: list[int]) -> None:
        """Write a request into the worker's ring (no env ids: stop), then ring its bell."""
        counts = self.arrays["request_counts"][worker]
        slot = self._requests_sent[worker] % len(counts)
        self._requests_sent[worker] += 1
        self.arrays["request_ids"][worker, slot, : len(env_ids)] = env_ids
        counts[slot] = len(env_ids) or -1
        self._bells.requests[worker].release()

    def _read_steps(self) -> None:
        """Copy every step taken and not yet read out of shared memory: one copy of the envs' records.

        Records are copied as plain bytes: NumPy copies and joins structured rows field by field, about
        fifteen times slower here.
        """
        ids = np.asarray(self._unread, dtype=np.int64)
        self._unread = []
        self._read.append((ids, self._record_bytes[ids], {key: values[ids] for key, values in self._contexts.items()}))

    def _steps_read(self) -> StepBatch:
        """The steps read since the last call, oldest first, as one batch of views into their records."""
        read, self._read = self._read, []
        if len(read) == 1:
            (ids, record_bytes, context), = read
        else:
            ids, record_bytes = np.concatenate([r[0] for r in read]), np.concatenate([r[1] for r in read])
            context = {key: np.concatenate([r[2][key] for r in read]) for key in read[0][2]}
        records = record_bytes.view(self._records.dtype)
        return StepBatch(
            env_ids=ids,
            observations=records["acted_observation"],
            next_observations=records["next_observation"],
            actions=records["action"],
            rewards=records["reward"],
            terminated=records["terminated"],
            truncated=records["truncated"],
            episode_returns=records["episode_return"],
            episode_lengths=records["episode_length"],
            context=context,
            successes=records["success"],
        )

    def _flush(self, force: bool = False) -> None:
        """Answer pending requests in batches of `autobatch_size` while the rule allows (or all, if forced)."""
        while self._pending:
            active = len(self._pending) + len(self._stepping)
            if not force and len(self._pending) < min(active, self.autobatch_size):
                return
            if self._unread:  # before their envs step again: every step taken so far, in one read
                self._read_steps()
            group, self._pending = self._pending[: self.autobatch_size], self._pending[self.autobatch_size :]
            ids = np.asarray(group, dtype=np.int64)
            observations = self._observations_to_act_on[ids]
            actions, context = self.policy.act_arrays(observations, False)
            self._acted_observations[ids] = observations
            self._actions[ids] = actions
            for key, value in context.items():
                if key not in self._contexts:
                    self._contexts[key] = np.full(len(self._records), np.nan)
                self._contexts[key][ids] = value
            by_worker: dict[int, list[int]] = {}
            for env_id in group:
                by_worker.setdefault(self._worker_of[env_id], []).append(env_id)
            cap = self._request_cap
            for worker, env_ids in by_worker.items():
                for start in range(0, len(env_ids), cap):
                    self._in_flight[worker].append(env_ids[start : start + cap])
                    self._request(worker, env_ids[start : start + cap])
            self._stepping.update(group)

    def run_steps(self, count: int) -> StepBatch:
        taken = 0
        while taken < count:
            if not self._arrived:
                self._collect()
                continue
            while self._arrived and taken < count:  # all that arrived together asks together: one full batch
                env_ids = pop_steps(self._arrived, count - taken).tolist()
                taken += len(env_ids)
                self._unread.extend(env_ids)
                self._pending.extend(env_ids)
            self._flush()
        self._flush(force=True)
        return self._steps_read()

    def update_policy(self, state: PolicyState) -> None:
        """Requests pending now are answered with the old parameters first."""
        self._flush(force=True)
        self.policy.update(state)

    def close(self) -> None:
        """Ask every worker to leave; one that does not within 2 s (a hung env) is terminated, then killed."""
        for worker in range(len(self._processes)):
            self._request(worker, [])
        deadline = time.monotonic() + 2.0
        for process in self._processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self._processes:
            if process.is_alive():
                process.terminate()
                process.join(timeout=2)
            if process.is_alive():
                process.kill()
                process.join()
        for connection in self._connections:
            connection.close()
        self._connections = []
        self._processes = []

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for p in self._processes if p.pid is not None]
