"""Using a trained policy: save it, load it back, evaluate it, watch it.

A saved policy is a folder with the run's `config.json` and `policy.safetensors`
(+ `.json`): exactly what a run directory and one of its checkpoints hold, so
`load_policy` takes either a run directory (choosing a checkpoint) or a folder
written by `save_policy` / `TrainResult.save`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from offpolicy.agents import make_learner
from offpolicy.agents.custom_encoder import EncoderFactory, recorded_encoder
from offpolicy.checkpoint import CheckpointError, Checkpointer, load_state, save_state
from offpolicy.config import ConfigError, RunConfig
from offpolicy.envs import (
    EnvError, EnvFactory, EnvSpec, config_env_factory, evaluation_env_factory, make_env_factory, probe_spaces,
)
from offpolicy.policy import Policy
from offpolicy.spaces import read_spaces
from offpolicy.training import CONFIG_FILE, load_run_config, write_spaces


@dataclass
class LoadedPolicy:
    """A policy read from disk, with what it was trained on."""

    policy: Policy
    config: RunConfig
    step: int | None
    """The environment step of the checkpoint it came from (None for a saved policy folder)."""
    eval_return: float | None
    """That checkpoint's evaluation return during training, if it had one."""


def build_policy(
    config: RunConfig, env: EnvSpec | None, device: str, directory: Path | None = None,
    encoder: EncoderFactory | None = None,
) -> Policy:
    """A fresh policy shaped for `config`'s agent and the env's spaces: those stored in `directory`, else
    (or with `env` given) read from a freshly made env; built over `encoder` where the run recorded one."""
    custom = recorded_encoder(config.encoder, encoder, None, str(directory) if directory else "this config")
    stored = read_spaces(directory) if directory is not None and env is None else None
    observation_space, action_space = stored or probe_spaces(
        make_env_factory(env) if env is not None else config_env_factory(config))
    learner = make_learner(config.agent, observation_space, action_space, config.hyperparameters, device, config.seed,
                           custom, config.strategy.normalize_observations, config.strategy.normalize_rewards)
    return learner.policy()


def save_policy(
    policy: Policy, config: RunConfig, directory: Path | str, spaces: tuple[gym.Space, gym.Space] | None = None
) -> Path:
    """Write `policy`, its run config and (given) its env's observation and action spaces to `directory`, for
    `load_policy`; with the spaces stored, loading needs no env."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(json.dumps(config.to_dict(), indent=2), encoding="utf-8")
    if spaces is not None:
        write_spaces(directory, *spaces)
    save_state(directory, "policy", policy.state())
    return directory


def load_policy(
    path: Path | str,
    checkpoint: str = "best",
    env: EnvSpec | None = None,
    device: str = "cpu",
    encoder: EncoderFactory | None = None,
) -> LoadedPolicy:
    """Load a policy from a run directory or a saved policy folder.

    `checkpoint` picks one of a run's checkpoints: "best" (highest evaluation
    return), "last", or a step number. The policy is shaped by the spaces stored
    with the run; `env` is needed only for runs saved without them (by an
    earlier version) that trained on an env given as a callable. A run trained
    with an encoder of your own needs that `encoder` again: the run records only
    its name, which is checked against the one given and never imported.
    """
    path = Path(path)
    config = load_run_config(path)
    policy = build_policy(config, env, device, path, encoder)
    if (path / "policy.safetensors").exists():
        policy.update(load_state(path, "policy"))
        return LoadedPolicy(policy, config, None, None)
    checkpointer = Checkpointer(path / "checkpoints")
    if not checkpointer.entries:
        raise CheckpointError(f"{path} has no checkpoint yet")
    if checkpoint == "last":
        chosen = checkpointer.latest
    elif checkpoint == "best":
        chosen = checkpointer.best or checkpointer.latest
    else:
        try:
            step = int(checkpoint.replace(",", "").replace("_", ""))
        except ValueError:
            raise ConfigError(f"--checkpoint must be best, last or a step number, got {checkpoint!r}") from None
        chosen = next((entry for entry in checkpointer.entries if entry.step == step), None)
        if chosen is None:
            kept = ", ".join(str(entry.step) for entry in checkpointer.entries)
            raise CheckpointError(f"{path} has no checkpoint at step {step}; it has: {kept}")
    assert chosen is not None
    policy_state, _ = checkpointer.load(chosen.step)
    policy.update({name: tensor.to(policy.device) for name, tensor in policy_state.items()})
    return LoadedPolicy(policy, config, chosen.step, chosen.eval_return)


@dataclass
class EvaluationResult:
    returns: list[float]
    lengths: list[int]

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std_return(self) -> float:
        return float(np.std(self.returns))

    def summary(self) -> str:
        return (
            f"{len(self.returns)} episode{'' if len(self.returns) == 1 else 's'}: mean return {self.mean_return:.1f} ± {self.std_return:.1f} "
            f"(min {min(self.returns):.1f}, max {max(self.returns):.1f}), mean length {np.mean(self.lengths):.1f}"
        )


def evaluate_policy(
    policy: Policy,
    env: EnvSpec,
    episodes: int = 10,
    seed: int = 0,
    deterministic: bool = True,
    on_frame: Callable[[np.ndarray], None] | None = None,
) -> EvaluationResult:
    """Run `episodes` whole episodes (the first reset seeded with `seed`) and report their returns.

    With `on_frame`, the env must render `rgb_array` frames; each is handed over.
    """
    if episodes < 1:
        raise ConfigError(f"episodes must be at least 1, got {episodes}")
    environment = evaluation_env_factory(make_env_factory(env))()
    returns: list[float] = []
    lengths: list[int] = []
    try:
        observation, _ = environment.reset(seed=seed)
        for _ in range(episodes):
            total, length, done = 0.0, 0, False
            if on_frame is not None:
                on_frame(environment.render())
            while not done:
                observation, reward, terminated, truncated, _ = environment.step(
                    policy.predict(observation, deterministic)
                )
                total += float(reward)
                length += 1
                done = terminated or truncated
                if on_frame is not None:
                    on_frame(environment.render())
            returns.append(total)
            lengths.append(length)
            observation, _ = environment.reset()
    finally:
        environment.close()
    return EvaluationResult(returns, lengths)


def record_video(
    policy: Policy, env_id: str, path: Path | str, episodes: int = 1, seed: int = 0,
    env_kwargs: dict[str, Any] | None = None, env_packages: Sequence[str] = (),
) -> tuple[Path, EvaluationResult, int]:
    """Record deterministic episodes through the env's `rgb_array` rendering.

    Writes an MP4 when a video encoder (imageio-ffmpeg) is installed, else a
    GIF next to the requested path. Returns the file written, the episodes'
    results and the number of frames.
    """
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise ConfigError("recording a video needs imageio: pip install 'offpolicy[video]'") from None
    path = Path(path)
    if path.suffix.lower() != ".gif":
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            path = path.with_suffix(".gif")
    frames: list[np.ndarray] = []
    for driver in ("SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):  # off-screen rendering needs no display or sound
        os.environ.setdefault(driver, "dummy")
    factory = make_env_factory(env_id, {**(env_kwargs or {}), "render_mode": "rgb_array"}, env_packages)
    try:
        result = evaluate_policy(policy, factory, episodes, seed, on_frame=frames.append)
    except gym.error.DependencyNotInstalled as error:
        raise EnvError(f"rendering {env_id} needs a package that is missing ({error}); "
                       "install it with: pip install 'offpolicy[video]'") from None
    fps = _render_fps(factory)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".gif":
        imageio.mimsave(path, frames, duration=1000 / fps, loop=0)
    else:
        imageio.mimsave(path, frames, fps=fps, macro_block_size=1)
    return path, result, len(frames)


def describe_checkpoint(loaded: LoadedPolicy) -> str:
    if loaded.step is None:
        return f"saved {loaded.config.agent} policy for {loaded.config.env}"
    during = "" if loaded.eval_return is None or math.isnan(loaded.eval_return) else (
        f", evaluation return {loaded.eval_return:.1f} during training"
    )
    return f"{loaded.config.agent} on {loaded.config.env}, checkpoint at step {loaded.step:,}{during}"


def _render_fps(factory: EnvFactory) -> int:
    environment = factory()
    try:
        return int(environment.metadata.get("render_fps") or 30)
    finally:
        environment.close()


__all__ = ["EvaluationResult", "LoadedPolicy", "evaluate_policy", "load_policy", "record_video", "save_policy"]
