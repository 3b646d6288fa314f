"""Environments in Ray actors, from a laptop to a cluster (`backend="ray"`, `pip install 'offpolicy[ray]'`).

Each actor owns a slice of the envs and steps them exactly as the in-process
runner does: with a local copy of the policy, batched inference over its own
envs by the autobatching rule, every env one step ahead. The trainer keeps one
request in flight per actor, so actors step while it trains ("double
batching" across machines), and steps come back as `StepBatch` arrays.

After each training phase the trainer puts the new parameters into Ray's
object store once and every actor takes them before its next chunk; the chunk
already under way was acted with the previous parameters (the seed's
one-phase lag). Evaluation runs in the trainer.

Ray is started here, sized to this machine, when no instance is running and no
address is given, and shut down again on close; a cluster joined with
`ray_address` (or an instance the caller started) is left running.
"""

from __future__ import annotations

import copy
import os
from collections import deque
from typing import Any

import numpy as np
import torch

from offpolicy.config import ConfigError
from offpolicy.envs import EnvFactory
from offpolicy.policy import Policy, PolicyState
from offpolicy.runners.core import EnvRunner, EnvRunnerError, StepBatch, pop_steps, whole_episodes
from offpolicy.runners.inprocess import InProcessMultiEnvRunner
from offpolicy.runners.watchdog import EnvTimeoutError

START_TIMEOUT_S = 300.0


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("the ray backend needs Ray: pip install 'offpolicy[ray]'") from None
    return ray


class EnvActor:
    """Runs in a Ray actor: an in-process multi-env runner over this actor's envs, with global env ids."""

    def __init__(self, factory: EnvFactory, env_ids: list[int], seeds: list[int], policy: Policy,
                 autobatch_size: int) -> None:
        torch.set_num_threads(1)
        self.env_ids = np.asarray(env_ids, dtype=np.int64)
        self.runner = InProcessMultiEnvRunner(factory, seeds, policy, min(autobatch_size, len(seeds)))

    def ready(self) -> bool:
        return True

    def run_steps(self, count: int) -> StepBatch:
        steps = self.runner.run_steps(count)
        steps.env_ids = self.env_ids[steps.env_ids]
        return steps

    def update_policy(self, state: PolicyState, env_steps: int) -> None:
        """New parameters, and the run's step count, so schedules follow the whole run, not this actor."""
        self.runner.update_policy(state)
        self.runner.policy.set_env_steps(env_steps)

    def close(self) -> None:
        self.runner.close()


class RayMultiEnvRunner(EnvRunner):
    """`len(seeds)` envs spread over `num_actors` Ray actors, one chunk request in flight per actor."""

    def __init__(
        self,
        factory: EnvFactory,
        seeds: list[int],
        policy: Policy,
        autobatch_size: int,
        num_actors: int = 0,
        address: str = "",
        env_timeout: float = 0.0,
    ) -> None:
        """`num_actors` 0 means one per CPU of the Ray cluster, at most one per env."""
        ray = self.ray = import_ray()
        self.policy = policy
        self.device = policy.device
        self.env_timeout = env_timeout
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                     num_cpus=None if address else os.cpu_count())
        cpus = max(1.0, float(ray.cluster_resources().get("CPU", 1)))
        num_actors = min(num_actors or int(cpus), len(seeds))
        self.actor_envs = [[int(i) for i in part] for part in np.array_split(np.arange(len(seeds)), num_actors)]
        remote_actor = ray.remote(num_cpus=min(1.0, cpus / num_actors))(EnvActor)  # more actors than CPUs share
        actor_policy = copy.deepcopy(policy).to("cpu")  # actors act on CPU wherever the trainer's copy lives
        self.actors = [
            remote_actor.remote(factory, env_ids, [seeds[i] for i in env_ids], actor_policy, autobatch_size)
            for env_ids in self.actor_envs
        ]
        self._env_steps = policy.env_steps  # the run's steps: those acted before, then those received
        self._in_flight: dict[Any, int] = {}
        self._ready: deque[StepBatch] = deque()
        try:  # every actor up (its envs made and one step ahead) before any is asked for steps
            ray.get([actor.ready.remote() for actor in self.actors], timeout=START_TIMEOUT_S)
        except Exception as error:
            self.close()
            raise EnvRunnerError(f"Ray actors failed to start: {str(error).splitlines()[0]}") from None
        for index in range(len(self.actors)):
            self._request(index)

    def _request(self, index: int) -> None:
        """One step per env of actor `index` (each env stays one step ahead on its actor)."""
        self._in_flight[self.actors[index].run_steps.remote(len(self.actor_envs[index]))] = index

    def _collect(self) -> None:
        """Wait for any actor's chunk, then take every chunk that is ready, oldest request first."""
        ray = self.ray
        pending = list(self._in_flight)
        done, _ = ray.wait(pending, num_returns=1, timeout=self.env_timeout or None)
        if done:
            ready = set(ray.wait(pending, num_returns=len(pending), timeout=0)[0])
            done = [ref for ref in pending if ref in ready]
        if not done:
            waiting = sorted(self._in_flight.values())
            raise EnvTimeoutError(
                f"Ray actors {waiting} (environments {[self.actor_envs[i] for i in waiting]}) returned no steps "
                f"within {self.env_timeout:g} s; an env hangs, or its steps are slower than --env-timeout allows"
            )
        for ref in done:
            index = self._in_flight.pop(ref)
            try:
                steps = ray.get(ref)
            except ray.exceptions.RayActorError as error:
                raise EnvRunnerError(
                    f"Ray actor {index} (environments {self.actor_envs[index]}) died: {str(error).splitlines()[0]}"
                ) from None
            except ray.exceptions.RayTaskError as error:
                cause = error.cause if isinstance(error.cause, EnvRunnerError) else error
                raise EnvRunnerError(f"{str(cause).splitlines()[-1]} (in Ray actor {index})") from None
            self._env_steps += len(steps)
            self._ready.append(steps)
            self._request(index)

    def run_steps(self, count: int) -> StepBatch:
        chunks: list[StepBatch] = []
        taken = 0
        while taken < count:
            if not self._ready:
                self._collect()
                continue
            chunk = pop_steps(self._ready, count - taken)
            chunks.append(chunk)
            taken += len(chunk)
        return StepBatch.concatenate(chunks)

    def run_episodes(self, count: int) -> list[StepBatch]:
        return whole_episodes(self, count)

    def update_policy(self, state: PolicyState) -> None:
        """Publish once through the object store; each actor takes it before its next chunk."""
        shared = self.ray.put({name: tensor.cpu() for name, tensor in state.items()})
        for actor in self.actors:
            actor.update_policy.remote(shared, self._env_steps)
        self.policy.update(state)

    def policy_state(self) -> PolicyState:
        return self.policy.state()

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []
        self._in_flight.clear()
        if self._started_ray and self.ray.is_initialized():
            self.ray.shutdown()
