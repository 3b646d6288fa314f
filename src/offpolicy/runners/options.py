"""How the backends are set up beyond their name: one object, built once from the run's config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from offpolicy.config import RunConfig


@dataclass(frozen=True)
class RayFleet:
    """How many actors, how many envs each, on which cluster (`RunConfig.ray_*`, `envs_per_actor`)."""

    actors: int = 0
    """Env actors; 0: one per envs_per_actor envs if that is set, else one per CPU of the cluster."""
    envs_per_actor: int = 0
    """Envs each actor owns; 0: the envs spread evenly over the actors."""
    address: str = ""
    """The cluster to join; empty starts a local Ray instance (or uses the one already running)."""
    steps_per_env: int = 1
    """Steps of each env in one request to an actor. A request costs a round trip (a few ms) and about as
    much of the trainer's CPU, so runs make a chunk each actor's share of a training phase:
    train_interval / num_envs steps per env."""

    def plan(self, num_envs: int, cpus: float) -> list[list[int]]:
        """The env ids each actor owns: consecutive slices, every actor busy."""
        if self.envs_per_actor:
            size = self.envs_per_actor
            return [list(range(start, min(start + size, num_envs))) for start in range(0, num_envs, size)]
        actors = min(self.actors or max(1, int(cpus)), num_envs)
        return [[int(i) for i in part] for part in np.array_split(np.arange(num_envs), actors)]


@dataclass(frozen=True)
class BackendOptions:
    """Settings of the collection backends (the backend itself is `OffPolicyConfig.backend`)."""

    env_timeout: float = 0.0
    """Seconds one env step or reset may take before the run stops with an error naming the env (0: no limit)."""
    ray: RayFleet = field(default_factory=RayFleet)
    """With backend 'ray': actors, envs per actor, cluster address, steps per request."""

    @staticmethod
    def from_run_config(config: "RunConfig") -> "BackendOptions":
        """The options a run's config asks for (`env_timeout`, `ray_actors`, `envs_per_actor`, `ray_address`)."""
        strategy = config.strategy
        fleet = RayFleet(config.ray_actors, config.envs_per_actor, config.ray_address,
                         steps_per_env=max(1, strategy.train_interval // strategy.num_envs))
        return BackendOptions(config.env_timeout, fleet)
