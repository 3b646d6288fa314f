"""Worker processes stepping environments in parallel, exchanging data through shared memory.

Each worker process owns every n-th env (env i in worker i mod n). The runner (in the trainer)
is the inference server: envs handed back ask for their next action, and the
pending requests are answered by one batched policy call once
`min(active envs, autobatch_size)` are waiting, where an env is active while it
is stepping or waiting for an action; envs whose step is done and not yet
asked for are idle and never waited for. Before `run_steps` returns, every env
handed back has its next step under way ("double batching"), so the workers
step while the trainer trains.

Only lists of env ids cross the pipes; observations, actions, rewards and
flags stay in shared memory. Workers start with `spawn` and import no torch.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections import deque
from multiprocessing.connection import wait
from typing import Any

import numpy as np
import torch

from offpolicy._env_worker import allocate, work
from offpolicy.envs import EnvFactory
from offpolicy.policy import Policy, PolicyState
from offpolicy.runners.core import EnvRunner, EnvRunnerError, StepBatch, pop_steps, whole_episodes
from offpolicy.runners.watchdog import EnvTimeoutError

START_TIMEOUT_S = 120.0


def default_workers(num_envs: int) -> int:
    """One worker per core, never more than there are envs."""
    return max(1, min(num_envs, os.cpu_count() or 1))


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
    ) -> None:
        """`env_timeout` > 0 bounds the wait for a step (seconds); the env still stepping is named."""
        self.policy = policy
        self.device = policy.device
        self.autobatch_size = autobatch_size
        self.env_timeout = env_timeout
        num_envs = len(seeds)
        probe = factory()
        try:
            observation = np.asarray(probe.observation_space.sample())
            action = np.asarray(probe.action_space.sample())
        finally:
            probe.close()
        context = mp.get_context(start_method)
        shared = allocate(context, num_envs, observation, action)
        self.arrays = shared.views()

        workers = min(num_workers or default_workers(num_envs), num_envs)
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
                args=(child, factory, [int(i) for i in env_ids], [seeds[i] for i in env_ids], shared),
                name=f"offpolicy-envs-{index}",
                daemon=True,
            )
            process.start()
            child.close()
            self._connections.append(parent)
            self._processes.append(process)
            self._worker_of.update({int(i): index for i in env_ids})

        self._observations = np.zeros_like(self.arrays["observations"])
        self._actions = np.zeros_like(self.arrays["actions"])
        self._contexts: dict[str, np.ndarray] = {}
        self._lengths = np.zeros(num_envs, dtype=np.int64)
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._pending: list[int] = []
        self._stepping: set[int] = set()
        self._ready: deque[StepBatch] = deque()
        try:
            self._await_ready(workers)
            self._observations[:] = self.arrays["observations"]
            self._pending = list(range(num_envs))
            self._flush(force=True)
        except BaseException:
            self.close()
            raise

    def _await_ready(self, workers: int) -> None:
        started = 0
        while started < workers:
            started += sum(1 for kind, _ in self._receive_messages(timeout=START_TIMEOUT_S) if kind == "ready")

    def _receive_messages(self, timeout: float | None = None) -> list[tuple[str, Any]]:
        """Block until at least one worker speaks (or dies); return what they said."""
        sentinels = {process.sentinel: index for index, process in enumerate(self._processes)}
        readable = wait(self._connections + list(sentinels), timeout)
        if not readable:
            raise EnvTimeoutError(f"no environment worker answered within {timeout:.0f} s")
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
        busy = [int(env_id) for env_id in np.flatnonzero(self.arrays["busy"])] or sorted(self._stepping)
        env_id = busy[0] if busy else -1
        return EnvTimeoutError(
            f"environment {env_id} did not finish a step within {self.env_timeout:g} s "
            f"(at its step {self._steps[env_id] + 1:,}); it hangs, or its steps are slower than --env-timeout allows"
        )

    def _worker_died(self, index: int) -> None:
        envs = sorted(e for e, w in self._worker_of.items() if w == index)
        self._processes[index].join(timeout=1)
        raise EnvRunnerError(
            f"worker process of environments {envs} died (exit code {self._processes[index].exitcode})"
        )

    def _collect(self) -> None:
        try:
            messages = self._receive_messages(timeout=self.env_timeout or None)
        except EnvTimeoutError:
            raise self._hang_error() from None
        for kind, env_ids in messages:
            if kind == "stepped":
                self._ready.append(self._stepped(np.asarray(env_ids, dtype=np.int64)))
                self._stepping.difference_update(env_ids)

    def _stepped(self, ids: np.ndarray) -> StepBatch:
        """The steps these envs just took, read from shared memory in one go; advance their episodes."""
        arrays = self.arrays
        rewards = arrays["rewards"][ids]
        terminated = arrays["terminated"][ids]
        truncated = arrays["truncated"][ids]
        self._lengths[ids] += 1
        self._steps[ids] += 1
        self._returns[ids] += rewards
        batch = StepBatch(
            env_ids=ids,
            observations=self._observations[ids],
            next_observations=arrays["final_observations"][ids],
            actions=self._actions[ids],
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            episode_returns=self._returns[ids],
            episode_lengths=self._lengths[ids],
            context={key: values[ids] for key, values in self._contexts.items()},
        )
        ended = ids[terminated | truncated]
        self._lengths[ended] = 0
        self._returns[ended] = 0.0
        self._observations[ids] = arrays["observations"][ids]
        return batch

    def _flush(self, force: bool = False) -> None:
        """Answer pending requests in batches of `autobatch_size` while the rule allows (or all, if forced)."""
        while self._pending:
            active = len(self._pending) + len(self._stepping)
            if not force and len(self._pending) < min(active, self.autobatch_size):
                return
            group, self._pending = self._pending[: self.autobatch_size], self._pending[self.autobatch_size :]
            with torch.no_grad():
                output = self.policy.act(torch.as_tensor(self._observations[group], device=self.device), False)
            actions = output.actions.cpu().numpy()
            self.arrays["actions"][group] = actions
            self._actions[group] = actions
            for key, value in output.context.items():
                self._contexts.setdefault(key, np.full(len(self._actions), np.nan))[group] = value
            by_worker: dict[int, list[int]] = {}
            for env_id in group:
                by_worker.setdefault(self._worker_of[env_id], []).append(env_id)
            for worker, env_ids in by_worker.items():
                self._connections[worker].send(env_ids)
            self._stepping.update(group)

    def run_steps(self, count: int) -> StepBatch:
        chunks: list[StepBatch] = []
        taken = 0
        while taken < count:
            if not self._ready:
                self._collect()
                continue
            while self._ready and taken < count:  # all that arrived together asks together: one full batch
                chunk = pop_steps(self._ready, count - taken)
                chunks.append(chunk)
                taken += len(chunk)
                self._pending.extend(chunk.env_ids.tolist())
            self._flush()
        self._flush(force=True)
        return StepBatch.concatenate(chunks)

    def run_episodes(self, count: int) -> list[StepBatch]:
        return whole_episodes(self, count)

    def update_policy(self, state: PolicyState) -> None:
        self._flush(force=True)
        self.policy.update(state)

    def policy_state(self) -> PolicyState:
        return self.policy.state()

    def close(self) -> None:
        """Ask every worker to leave; one that does not within 2 s (a hung env) is terminated, then killed."""
        for connection in self._connections:
            try:
                connection.send(None)
            except OSError:
                pass
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
