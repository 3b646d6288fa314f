"""Environment factories and per-environment seeds.

Every worker builds its own environment from a factory, so the factory must be
a picklable zero-argument callable: worker processes (and Ray actors later)
receive it by pickling. An env id string becomes a `GymEnvFactory`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, Union

import gymnasium as gym
import numpy as np

from offpolicy.atari import AtariEnvFactory, is_atari

EnvFactory = Callable[[], gym.Env]
EnvSpec = Union[str, EnvFactory]


class EnvError(ValueError):
    """An environment cannot be made or does not fit the agent; the message says why."""


ENV_FAMILIES = {
    "ALE/": ("ale_py", None, "atari"),
    "MinAtar/": ("minatar.gym", "register_envs", "minatar"),
    "Fetch": ("gymnasium_robotics", None, "robotics"),
    "HandManipulate": ("gymnasium_robotics", None, "robotics"),
    "HandReach": ("gymnasium_robotics", None, "robotics"),
}
"""Env id prefixes whose package registers its envs only when imported or asked (Gymnasium 1 loads no
plugins): the module, its registration function (None: importing registers) and our extra that installs it."""


def register_env_family(env_id: str) -> None:
    """Register the family `env_id` belongs to (MinAtar/..., Fetch...), if it is one of `ENV_FAMILIES` and
    not done."""
    family = next((family for prefix, family in ENV_FAMILIES.items() if env_id.startswith(prefix)), None)
    if family is None or env_id in gym.registry:
        return
    module_name, function, extra = family
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise EnvError(f"environment {env_id!r} needs a package that is missing; install it with: "
                       f"pip install 'offpolicy[{extra}]'") from None
    if function is not None:
        getattr(module, function)()


def import_env_modules(env_id: str, packages: Sequence[str] = ()) -> None:
    """Import what registers `env_id`: each of `packages`, the module of a `module:EnvId` id (Gymnasium's
    form) and the package of a known family (`ENV_FAMILIES`), so that their registrations run in this
    process."""
    register_env_family(env_id.split(":", 1)[-1])
    modules = list(packages) + ([env_id.split(":", 1)[0]] if ":" in env_id else [])
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise EnvError(f"cannot import {module!r}, which should register environment {env_id!r}: {error}") from error


@dataclass(frozen=True)
class GymEnvFactory:
    """Makes a registered Gymnasium environment; picklable, unlike a lambda.

    `env_id` may be Gymnasium's `module:EnvId` form; the module and each of `packages` are imported first,
    in whichever process makes the env (a worker process or a Ray actor too), so their registrations run.
    """

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    packages: tuple[str, ...] = ()

    def __call__(self) -> gym.Env:
        import_env_modules(self.env_id, self.packages)
        return make_registered(self.env_id, self.kwargs, gym.make)

    def __str__(self) -> str:
        return self.env_id


def make_registered(env_id: str, kwargs: dict[str, Any], make: Callable[..., gym.Env]) -> gym.Env:
    """`make(env_id, **kwargs)`, its failures as one line saying why (a missing package names our extra)."""
    try:
        return make(env_id, **kwargs)
    except gym.error.DependencyNotInstalled as error:
        extra = missing_extra(env_id)
        hint = f"install it with: pip install 'offpolicy[{extra}]'" if extra else str(error)
        raise EnvError(f"environment {env_id!r} needs a package that is missing; {hint}") from error
    except gym.error.Error as error:
        raise EnvError(f"cannot make environment {env_id!r}: {error}") from error
    except TypeError as error:  # a keyword the env's constructor does not take
        reason = str(error).split(" was raised from")[0]  # Gymnasium appends the whole call
        raise EnvError(f"cannot make environment {env_id!r} with arguments {kwargs}: {reason}") from error


def missing_extra(env_id: str) -> str | None:
    """Which optional extra of ours brings what `env_id` needs (box2d, mujoco, atari), if any."""
    if is_atari(env_id):
        return "atari"  # ale-py and OpenCV, which Gymnasium's Atari preprocessing resizes frames with
    entry_point = str(gym.registry[env_id].entry_point) if env_id in gym.registry else ""
    for extra in ("box2d", "mujoco"):
        if extra in entry_point:
            return extra
    return None


def make_env_factory(env: EnvSpec, kwargs: dict[str, Any] | None = None, packages: Sequence[str] = ()) -> EnvFactory:
    """Turn an env id (with constructor `kwargs`, registered by `packages` or a `module:EnvId` id) or a
    zero-argument callable into an environment factory."""
    if isinstance(env, str):
        import_env_modules(env, packages)
        registered = env.split(":", 1)[-1]
        if registered not in gym.registry:
            close = [name for name in gym.registry if registered.lower().split("-")[0] in name.lower()]
            hint = f" (did you mean {', '.join(sorted(close)[:3])}?)" if close else ""
            where = "" if ":" in env or packages else "; an env of your own: --env-package PACKAGE or MODULE:ENV_ID"
            raise EnvError(f"unknown environment id {env!r}{hint}{where}")
        if is_atari(env):
            return AtariEnvFactory(env, dict(kwargs or {}))
        return GymEnvFactory(env, dict(kwargs or {}), tuple(packages))
    if callable(env):
        return env
    raise EnvError(
        f"env must be a Gymnasium env id or a zero-argument callable returning an env, got {env!r}"
    )


def evaluation_env_factory(factory: EnvFactory) -> EnvFactory:
    """The factory of evaluation envs: `factory.for_evaluation()` where it has one (an Atari game's whole
    games with their own scores, without training's life-loss terminations and reward clipping), else
    `factory` itself."""
    for_evaluation = getattr(factory, "for_evaluation", None)
    return for_evaluation() if callable(for_evaluation) else factory


def config_env_factory(config: Any) -> EnvFactory:
    """The env factory a `RunConfig` names: its env id, constructor arguments and packages."""
    return make_env_factory(config.env, config.env_kwargs, config.env_packages)


def env_name(factory: EnvFactory) -> str:
    """A short name for logs and run directories."""
    if isinstance(factory, (GymEnvFactory, AtariEnvFactory)):
        return factory.env_id
    return getattr(factory, "__name__", type(factory).__name__)


TRAINING_ENVS = 0
EVALUATION_ENV = 1


def derive_seeds(seed: int, count: int, stream: int, start_step: int = 0, restart: int = 0) -> list[int]:
    """Independent per-env seeds from one run seed.

    `stream` separates families (training envs, the evaluation env) so that
    evaluation never replays the training envs' starting states; `start_step`
    gives a resumed run fresh episodes rather than a replay of the first ones,
    and `restart` does the same for envs recreated after a failure.
    """
    key = [seed, stream, start_step] + ([restart] if restart else [])
    children = np.random.SeedSequence(key).spawn(count)
    return [int(child.generate_state(1)[0]) for child in children]


class ObservationError(ValueError):
    """An environment returned an observation that does not fit its observation space."""


def describe_env_failure(env_id: int, call: str, steps: int, error: BaseException) -> str:
    """One line naming the env, the call, its step count and the original error.

    `steps` counts the env's completed steps; a failing `step()` is its step `steps + 1`.
    """
    if isinstance(error, ObservationError):
        return f"environment {env_id} {error} (at its step {steps:,})"
    where = f"at its step {steps + 1:,}" if call == "step()" else f"after its step {steps:,}"
    return f"environment {env_id} failed in {call} {where}: {error!r}"


def check_observation(observation: Any, shape: tuple[int, ...] | None, call: str) -> None:
    """Refuse an observation whose shape differs from the observation space's.

    A wrong shape would otherwise surface far away (a broadcasting error in the
    buffer, a silent reshape in the network); NaNs are checked per chunk when
    transitions are stored, where it costs one vectorised test.
    """
    actual = observation.shape if isinstance(observation, np.ndarray) else np.shape(observation)
    if shape is not None and actual != shape:
        raise ObservationError(
            f"returned an observation of shape {actual} from {call}, "
            f"but its observation space has shape {shape}"
        )


def probe_spaces(factory: EnvFactory) -> tuple[gym.Space, gym.Space]:
    """Build one env to read its observation and action spaces, then close it."""
    env = factory()
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()
