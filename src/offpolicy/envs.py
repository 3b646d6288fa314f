"""Environment factories and per-environment seeds.

Every worker builds its own environment from a factory, so the factory must be
a picklable zero-argument callable: worker processes (and Ray actors later)
receive it by pickling. An env id string becomes a `GymEnvFactory`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Union

import gymnasium as gym
import numpy as np

EnvFactory = Callable[[], gym.Env]
EnvSpec = Union[str, EnvFactory]


class EnvError(ValueError):
    """An environment cannot be made or does not fit the agent; the message says why."""


@dataclass(frozen=True)
class GymEnvFactory:
    """Makes a registered Gymnasium environment; picklable, unlike a lambda."""

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> gym.Env:
        try:
            return gym.make(self.env_id, **self.kwargs)
        except gym.error.DependencyNotInstalled as error:
            extra = missing_extra(self.env_id)
            hint = f"install it with: pip install 'offpolicy[{extra}]'" if extra else str(error)
            raise EnvError(f"environment {self.env_id!r} needs a package that is missing; {hint}") from error
        except gym.error.Error as error:
            raise EnvError(f"cannot make environment {self.env_id!r}: {error}") from error

    def __str__(self) -> str:
        return self.env_id


def missing_extra(env_id: str) -> str | None:
    """Which optional extra of ours brings what `env_id` needs (box2d, mujoco), if any."""
    entry_point = str(gym.registry[env_id].entry_point) if env_id in gym.registry else ""
    for extra in ("box2d", "mujoco"):
        if extra in entry_point:
            return extra
    return None


def make_env_factory(env: EnvSpec) -> EnvFactory:
    """Turn an env id or a zero-argument callable into an environment factory."""
    if isinstance(env, str):
        if env not in gym.registry:
            close = [name for name in gym.registry if env.lower().split("-")[0] in name.lower()]
            hint = f" (did you mean {', '.join(sorted(close)[:3])}?)" if close else ""
            raise EnvError(f"unknown environment id {env!r}{hint}")
        return GymEnvFactory(env)
    if callable(env):
        return env
    raise EnvError(
        f"env must be a Gymnasium env id or a zero-argument callable returning an env, got {env!r}"
    )


def env_name(factory: EnvFactory) -> str:
    """A short name for logs and run directories."""
    if isinstance(factory, GymEnvFactory):
        return factory.env_id
    return getattr(factory, "__name__", type(factory).__name__)


TRAINING_ENVS = 0
EVALUATION_ENV = 1


def derive_seeds(seed: int, count: int, stream: int, start_step: int = 0) -> list[int]:
    """Independent per-env seeds from one run seed.

    `stream` separates families (training envs, the evaluation env) so that
    evaluation never replays the training envs' starting states; `start_step`
    gives a resumed run fresh episodes rather than a replay of the first ones.
    """
    children = np.random.SeedSequence([seed, stream, start_step]).spawn(count)
    return [int(child.generate_state(1)[0]) for child in children]


def probe_spaces(factory: EnvFactory) -> tuple[gym.Space, gym.Space]:
    """Build one env to read its observation and action spaces, then close it."""
    env = factory()
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()
