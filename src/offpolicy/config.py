"""Configuration of the off-policy strategy: the seed's nine fields, the worker backend and replay options.

A config is plain data: it round-trips through a dict (and so JSON), and every
run stores the resolved one in its run directory so that it can be resumed or
re-run exactly.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, fields
from typing import Any, Mapping, TypeVar

BACKENDS = ("inprocess", "threads", "processes", "ray")
ON_ENV_ERROR = ("stop", "restart")


class ConfigError(ValueError):
    """A configuration value breaks a rule; the message names the field and the rule."""


T = TypeVar("T")


def from_dict(cls: type[T], values: Mapping[str, Any], where: str) -> T:
    """Build dataclass `cls` from `values`, refusing unknown keys by name.

    Silently ignoring a misspelt key would train with a default the user did
    not want, so an unknown key is an error that lists the known ones.
    """
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r} in {where}; known keys: {', '.join(sorted(known))}"
        )
    return cls(**values)


@dataclass
class OffPolicyConfig:
    """How experience is collected and when training happens (the seed's `OffPolicyConfig`)."""

    num_envs: int = 1
    """Environments collecting experience at once."""
    autobatch_size: int = 1
    """Pending observations that trigger one batched inference call; 1 <= autobatch_size <= num_envs."""
    replay_buffer_size: int = 1024
    """Transitions kept in the replay buffer; the oldest are overwritten."""
    train_interval: int = 1
    """Environment steps collected between two training phases."""
    train_steps: int = 1
    """Optimisation steps in each training phase."""
    eval_interval: int = 10_000
    """Environment steps between two evaluations (each also writes a checkpoint)."""
    eval_episodes: int = 1
    """Deterministic episodes run at each evaluation."""
    train_batch_size: int = 32
    """Transitions sampled for one optimisation step."""
    warmup_steps: int = 0
    """Environment steps collected before the first training phase."""
    backend: str = "inprocess"
    """Where environments step: 'inprocess' (trainer thread, batched; fastest for cheap envs,
    reproducible), 'processes' (worker processes, one per core, data in shared memory; for envs
    that cost more than about 0.1 ms a step), 'threads' (a thread per env and a shared
    inference server: the seed's literal design, for envs that release the GIL) or 'ray' (Ray
    actors, each with several envs and a policy copy; on this machine or a cluster)."""
    n_step: int = 1
    """Rewards summed into each target (n-step returns); a window stops where its episode ends."""
    prioritized: bool = False
    """Replay transitions in proportion to their last TD error (prioritized replay)."""
    priority_alpha: float = 0.6
    """How strongly priorities shape sampling: 0 is uniform, 1 is in proportion to the TD error."""
    priority_beta: float = 0.4
    """Importance-sampling correction at the start; it rises linearly to 1 by the last step."""
    priority_epsilon: float = 1e-6
    """Added to each TD error, so that no transition's priority is zero."""
    her: bool = False
    """Hindsight experience replay for goal-conditioned envs (Dict observations with achieved_goal and
    desired_goal, and compute_reward): transitions are replayed also with goals the episode reached later."""
    her_k: int = 4
    """With her: relabelled goals per original one, so a fraction k / (k + 1) of each batch is relabelled."""
    normalize_observations: bool = False
    """Normalise observations by the running mean and variance of the collected training steps' (float
    observations only); the acting policy, evaluation and saved policies apply the same statistics."""
    normalize_rewards: bool = False
    """Scale rewards by the running standard deviation of the discounted return, for training only."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Reject impossible values up front, naming the field and the rule."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" and not isinstance(value, bool):
                raise ConfigError(f"{f.name} must be true or false, got {value!r}")
            if f.type == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ConfigError(f"{f.name} must be a number, got {value!r}")
            if f.type == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"{f.name} must be an integer, got {value!r}")
        positive = (
            "num_envs",
            "autobatch_size",
            "replay_buffer_size",
            "train_interval",
            "train_steps",
            "eval_interval",
            "eval_episodes",
            "train_batch_size",
            "n_step",
            "her_k",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be 0 or more, got {self.warmup_steps}")
        if self.autobatch_size > self.num_envs:
            raise ConfigError(
                f"autobatch_size must be between 1 and num_envs ({self.num_envs}), "
                f"got {self.autobatch_size}: lower autobatch_size or raise num_envs"
            )
        if self.train_batch_size > self.replay_buffer_size:
            raise ConfigError(
                f"train_batch_size ({self.train_batch_size}) must not exceed "
                f"replay_buffer_size ({self.replay_buffer_size}): the buffer could never hold a batch"
            )
        if not 0 <= self.priority_alpha <= 1 or not 0 <= self.priority_beta <= 1:
            raise ConfigError(
                f"priority_alpha and priority_beta must be between 0 and 1, got {self.priority_alpha} "
                f"and {self.priority_beta}"
            )
        if not self.priority_epsilon > 0:
            raise ConfigError(f"priority_epsilon must be positive, got {self.priority_epsilon}")
        if self.her and (self.n_step > 1 or self.prioritized):
            raise ConfigError("her replays one-step transitions uniformly: use it without n_step > 1 and prioritized")
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "OffPolicyConfig":
        return from_dict(cls, values, "the strategy config")


def check_keyword_arguments(values: Any, name: str) -> None:
    """That `values` (field `name`) maps argument names to JSON values, which config.json can store."""
    if not isinstance(values, Mapping) or not all(isinstance(key, str) for key in values):
        raise ConfigError(f"{name} must map argument names to values, got {values!r}")
    try:
        json.dumps(dict(values))
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{name} must be JSON values (they are stored in config.json): {error}") from None


@dataclass
class RunConfig:
    """Everything that defines a training run; stored as `RUN_DIR/config.json`."""

    agent: str = "dqn"
    """Agent name (see `offpolicy presets`)."""
    env: str = "CartPole-v1"
    """Gymnasium environment id, or `module:EnvId` to import the module that registers it first. (An env
    factory or instance of your own goes to `train(config, env=...)` instead.)"""
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments for the env's constructor (`gym.make(env, **env_kwargs)`), e.g. {"map_name": "8x8"}."""
    env_packages: list[str] = dataclasses.field(default_factory=list)
    """Python packages to import before making envs (in every worker too), so that their registrations run."""
    num_steps: int = 40_000
    """Total environment steps."""
    seed: int = 0
    """One seed for networks, exploration, environments and replay sampling."""
    device: str = "cpu"
    """Training device (the learner and the replay buffer), e.g. cpu or cuda."""
    inference_device: str = ""
    """Acting device; empty means the training device."""
    torch_threads: int = 1
    """Torch CPU threads, and NumPy's BLAS threads while training; 1 is fastest for small networks (more
    threads spin against the envs)."""
    keep_checkpoints: int = 2
    """Latest checkpoints kept (the best by evaluation return is kept as well)."""
    save_buffer: bool = False
    """Also store the replay buffer in each checkpoint, so a resumed run keeps its experience (large)."""
    tensorboard: bool = False
    """Also log metrics as TensorBoard event files in RUN_DIR/tensorboard (pip install 'offpolicy[tensorboard]')."""
    env_timeout: float = 10.0
    """Seconds one environment step or reset may take before the run stops with an error naming the env
    (0: wait forever)."""
    ray_address: str = ""
    """With backend 'ray': the cluster to join (e.g. ray://head:10001 or auto); empty starts a local Ray."""
    ray_actors: int = 0
    """With backend 'ray': env actors (the envs are spread evenly); 0 means one per CPU, at most one per env
    (or one per envs_per_actor envs)."""
    envs_per_actor: int = 0
    """With backend 'ray': envs each actor steps, batching their inference (0: num_envs spread over the
    actors); with ray_actors, num_envs must be ray_actors x envs_per_actor."""
    on_env_error: str = "stop"
    """What a failing training env does to the run: 'stop' (an error naming the env, the last checkpoint
    intact) or 'restart' (recreate the training envs and go on, counting restarts in the metrics)."""
    strategy: OffPolicyConfig = dataclasses.field(default_factory=OffPolicyConfig)
    """Collection and training schedule."""
    hyperparameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The agent's hyperparameters (overrides of its defaults)."""
    encoder: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The encoder of your own this run was trained with, for the record: its name (module:qualname) and JSON
    arguments, written by `train(..., encoder=...)`; empty for the built-in encoders. Loading compares it
    with the encoder you hand over and never imports it."""

    def __post_init__(self) -> None:
        if not isinstance(self.env, str):
            raise ConfigError(
                f"RunConfig.env must be a Gymnasium env id, got {self.env!r}; to train on an env factory of your "
                "own, pass it as train(config, env=...)"
            )
        check_keyword_arguments(self.env_kwargs, "env_kwargs")
        if isinstance(self.env_packages, str) or not all(isinstance(name, str) for name in self.env_packages):
            raise ConfigError(f"env_packages must be a list of package names, got {self.env_packages!r}")
        self.env_kwargs, self.env_packages = dict(self.env_kwargs), list(self.env_packages)
        if not isinstance(self.encoder, Mapping):
            raise ConfigError(f"encoder must be a record of a custom encoder's name and arguments, got {self.encoder!r}")
        self.encoder = dict(self.encoder)
        if isinstance(self.strategy, Mapping):
            self.strategy = OffPolicyConfig.from_dict(self.strategy)
        for name in ("num_steps", "torch_threads", "keep_checkpoints"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be a non-negative integer, got {self.seed!r}")
        for name in ("save_buffer", "tensorboard"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.ray_actors, bool) or not isinstance(self.ray_actors, int) or self.ray_actors < 0:
            raise ConfigError(f"ray_actors must be 0 (one per CPU) or more, got {self.ray_actors!r}")
        if isinstance(self.envs_per_actor, bool) or not isinstance(self.envs_per_actor, int) or self.envs_per_actor < 0:
            raise ConfigError(f"envs_per_actor must be 0 (spread evenly) or more, got {self.envs_per_actor!r}")
        self.check_ray_fleet()
        if self.on_env_error not in ON_ENV_ERROR:
            raise ConfigError(f"on_env_error must be one of {', '.join(ON_ENV_ERROR)}, got {self.on_env_error!r}")
        if isinstance(self.env_timeout, bool) or not isinstance(self.env_timeout, (int, float)) or not (
            0 <= self.env_timeout < float("inf")
        ):
            raise ConfigError(f"env_timeout must be a number of seconds, 0 or more, got {self.env_timeout!r}")

    def check_ray_fleet(self) -> None:
        """Ray settings only with the ray backend (elsewhere they would be silently ignored), and a fleet
        that holds exactly num_envs envs."""
        given = [name for name in ("ray_address", "ray_actors", "envs_per_actor") if getattr(self, name)]
        if given and self.strategy.backend != "ray":
            raise ConfigError(
                f"{given[0]} applies to the ray backend only, but backend is {self.strategy.backend!r}: "
                "add --backend ray (or drop the Ray options)"
            )
        num_envs = self.strategy.num_envs
        if self.ray_actors and self.envs_per_actor and self.ray_actors * self.envs_per_actor != num_envs:
            raise ConfigError(
                f"ray_actors {self.ray_actors} x envs_per_actor {self.envs_per_actor} = "
                f"{self.ray_actors * self.envs_per_actor} envs, but num_envs is {num_envs}: make num_envs "
                f"{self.ray_actors * self.envs_per_actor} (leave out --num-envs) or give only one of the two"
            )
        if self.envs_per_actor > num_envs:
            raise ConfigError(
                f"envs_per_actor ({self.envs_per_actor}) must not exceed num_envs ({num_envs}): "
                "raise num_envs or lower envs_per_actor"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "RunConfig":
        return from_dict(cls, values, "the run config")
