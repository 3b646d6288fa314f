"""Environments in Ray actors, from a laptop to a cluster (`backend="ray"`, `pip install 'offpolicy[ray]'`).

Each actor owns a slice of the envs and steps them exactly as the in-process
runner does: with a local copy of the policy, batched inference over its own
envs by the autobatching rule, every env one step ahead. A request asks an
actor for a chunk: `steps_per_env` steps of each of its envs (in training, its
share of a phase). The trainer keeps two requests queued per actor, so actors
step while it trains ("double batching" across machines) and never wait for a
round trip; steps come back as `StepBatch` arrays.

After each training phase the trainer puts the new parameters into Ray's
object store once and every actor takes them after the chunks already queued:
those were acted with older parameters (the seed's one-phase lag, plus one
chunk to hide the round trip). Evaluation runs in the trainer.

An actor that dies (its process killed, its machine lost) or whose env fails is
named with its envs; `replace_failed` swaps in a fresh actor for it while the
others keep stepping (`on_env_error="restart"`).

Ray is started here, sized to this machine, when no instance is running and no
address is given, and shut down again on close; a cluster joined with
`ray_address` (or an instance the caller started) is left running.
"""

from __future__ import annotations

import copy
import logging
import os
import warnings
from collections import deque
from typing import Any, Sequence

import numpy as np
import torch

from offpolicy.config import ConfigError
from offpolicy.envs import EnvFactory
from offpolicy.policy import Policy, PolicyState
from offpolicy.runners.core import EnvRunner, EnvRunnerError, pop_steps
from offpolicy.runners.inprocess import InProcessMultiEnvRunner
from offpolicy.runners.options import RayFleet
from offpolicy.runners.watchdog import EnvTimeoutError
from offpolicy.steps import StepBatch

START_TIMEOUT_S = 300.0
CHUNKS_IN_FLIGHT = 2
"""Requests queued per actor: it starts its next chunk while the last one travels back (measured:
2 actors on the heavy env gave 1.4x the steps/s of one request at a time on this machine)."""


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
        policy.seed_exploration(int(np.random.SeedSequence(seeds).generate_state(1)[0]))  # not the others' draws
        self.runner = InProcessMultiEnvRunner(factory, seeds, policy, min(autobatch_size, len(seeds)))

    def ready(self) -> bool:
        return True

    def run_steps(self, count: int, parameters: dict[str, np.ndarray] | None = None, env_steps: int = 0) -> StepBatch:
        """`count` steps, acted with `parameters` if the request brings new ones."""
        if parameters is not None:
            self.update_policy(parameters, env_steps)
        steps = self.runner.run_steps(count)
        steps.env_ids = self.env_ids[steps.env_ids]
        return steps

    def update_policy(self, arrays: dict[str, np.ndarray], env_steps: int) -> None:
        """New parameters (read in place from the object store), and the run's step count, so schedules
        follow the whole run, not this actor."""
        with warnings.catch_warnings():  # the shared arrays are read-only; they are only copied from
            warnings.simplefilter("ignore", UserWarning)
            state = {name: torch.from_numpy(array) for name, array in arrays.items()}
        self.runner.update_policy(state)
        self.runner.policy.set_env_steps(env_steps)

    def close(self) -> None:
        self.runner.close()


class RayMultiEnvRunner(EnvRunner):
    """`len(seeds)` envs spread over Ray actors as `fleet` says, `CHUNKS_IN_FLIGHT` requests queued per actor."""

    def __init__(
        self,
        factory: EnvFactory,
        seeds: list[int],
        policy: Policy,
        autobatch_size: int,
        fleet: RayFleet = RayFleet(),
        env_timeout: float = 0.0,
    ) -> None:
        super().__init__(policy)
        ray = self.ray = import_ray()
        self.factory = factory
        self.autobatch_size = autobatch_size
        self.env_timeout = env_timeout
        self._started_ray = not ray.is_initialized()
        if self._started_ray:
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            ray.init(address=fleet.address or None, include_dashboard=False, log_to_driver=False,
                     num_cpus=None if fleet.address else os.cpu_count(), logging_level=logging.WARNING)
        cpus = max(1.0, float(ray.cluster_resources().get("CPU", 1)))
        self.actor_envs = fleet.plan(len(seeds), cpus)
        self._chunk_steps = [len(env_ids) * fleet.steps_per_env for env_ids in self.actor_envs]
        self.actor_of = {env_id: index for index, env_ids in enumerate(self.actor_envs) for env_id in env_ids}
        self._remote_actor = ray.remote(num_cpus=min(1.0, cpus / len(self.actor_envs)))(EnvActor)  # may share CPUs
        self._env_steps = policy.env_steps  # the run's steps: those acted before, then those received
        self._in_flight: dict[Any, int] = {}
        self._ready: deque[StepBatch] = deque()
        self._parameters: Any = None  # an object ref to the latest published parameters
        self._stale: set[int] = set()  # actors whose next request brings them
        self.actors = [self._start_actor(index, seeds) for index in range(len(self.actor_envs))]
        try:
            self._wait_until_ready(range(len(self.actors)))
        except EnvRunnerError:
            self.close()
            raise

    def _start_actor(self, index: int, seeds: Sequence[int]) -> Any:
        """Actor `index` with its envs seeded from `seeds` and a CPU copy of the current policy."""
        policy = copy.deepcopy(self.policy).to("cpu")  # actors act on CPU wherever the trainer's copy lives
        policy.set_env_steps(self._env_steps)
        env_ids = self.actor_envs[index]
        return self._remote_actor.remote(self.factory, env_ids, [seeds[i] for i in env_ids], policy,
                                         self.autobatch_size)

    def _wait_until_ready(self, indices: Sequence[int]) -> None:
        """Every actor in `indices` up (its envs made, one step ahead), then given its first request."""
        indices = list(indices)
        try:
            self.ray.get([self.actors[i].ready.remote() for i in indices], timeout=START_TIMEOUT_S)
        except Exception as error:
            raise EnvRunnerError(
                f"Ray actors {indices} failed to start: {str(error).splitlines()[0]}",
                [env_id for i in indices for env_id in self.actor_envs[i]],
            ) from None
        for index in indices:
            for _ in range(CHUNKS_IN_FLIGHT):
                self._request(index)

    def _request(self, index: int) -> None:
        """`steps_per_env` steps of each env of actor `index` (each env stays one step ahead on its actor),
        with the latest parameters if it does not have them yet: no call of its own per phase and actor."""
        parameters = self._parameters if index in self._stale else None
        self._stale.discard(index)
        self._in_flight[self.actors[index].run_steps.remote(self._chunk_steps[index], parameters,
                                                            self._env_steps)] = index

    def _collect(self) -> None:
        """Wait for any actor's chunk, then take every chunk that is ready, oldest request first."""
        ray = self.ray
        pending = list(self._in_flight)
        done, _ = ray.wait(pending, num_returns=1, timeout=self.env_timeout or None)
        if done:
            ready = set(ray.wait(pending, num_returns=len(pending), timeout=0)[0])
            done = [ref for ref in pending if ref in ready]
        if not done:
            waiting = sorted(set(self._in_flight.values()))
            raise EnvTimeoutError(
                f"Ray actors {waiting} (environments {[self.actor_envs[i] for i in waiting]}) returned no steps "
                f"within {self.env_timeout:g} s; an env hangs, or its steps are slower than --env-timeout allows",
                [env_id for i in waiting for env_id in self.actor_envs[i]],
            )
        for ref in done:
            index = self._in_flight.pop(ref)
            envs = self.actor_envs[index]
            try:
                steps = ray.get(ref)
            except ray.exceptions.RayActorError as error:
                raise EnvRunnerError(
                    f"Ray actor {index} (environments {envs}) died: {str(error).splitlines()[0]}", envs
                ) from None
            except ray.exceptions.RayTaskError as error:
                cause = error.cause if isinstance(error.cause, EnvRunnerError) else error
                raise EnvRunnerError(f"{str(cause).splitlines()[-1]} (in Ray actor {index})", envs) from None
            self._env_steps += len(steps)
            self._ready.append(steps)
            self._request(index)

    def run_steps(self, count: int) -> StepBatch:
        chunks: list[StepBatch] = []
        taken = 0
        try:
            while taken < count:
                if not self._ready:
                    self._collect()
                    continue
                chunk = pop_steps(self._ready, count - taken)
                chunks.append(chunk)
                taken += len(chunk)
        except EnvRunnerError:
            self._ready.extendleft(reversed(chunks))  # the other actors' good steps are kept for the next call
            raise
        return StepBatch.concatenate(chunks)

    def update_policy(self, state: PolicyState) -> None:
        """Publish once through the object store, as NumPy arrays (5x faster to put than tensors, and read
        without a copy); each actor's next request brings them, after the chunks it has queued."""
        self._parameters = self.ray.put({name: tensor.detach().cpu().numpy() for name, tensor in state.items()})
        self._stale = set(range(len(self.actors)))
        self.policy.update(state)

    def replace_failed(self, env_ids: Sequence[int], seeds: Sequence[int]) -> bool:
        """Kill the actors owning `env_ids` and start fresh ones (current parameters, new seeds);
        the other actors' requests stay in flight."""
        failed = sorted({self.actor_of[env_id] for env_id in env_ids})
        if not failed:
            return False
        for index in failed:
            self.ray.kill(self.actors[index])
            for ref in [ref for ref, owner in self._in_flight.items() if owner == index]:
                del self._in_flight[ref]
            self.actors[index] = self._start_actor(index, seeds)  # with the current parameters
            self._stale.discard(index)
        self._wait_until_ready(failed)
        return True

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []
        self._in_flight.clear()
        if self._started_ray and self.ray.is_initialized():
            self.ray.shutdown()
