"""Atari 2600 games (ale-py's `ALE/...` ids) with the preprocessing DQN was published with.

Every ALE id goes through `AtariEnvFactory`, which builds the game with ale-py's
sticky actions (the v5 default, Machado et al., 2018) and applies, with
Gymnasium's own wrappers where they exist:

- up to 30 no-op actions at the start of a game, a frame skip of 4 with the
  maximum over the last two frames, 84x84 grayscale frames (`AtariPreprocessing`);
- for training only, a lost life ends the episode (`EpisodicLife`: the learner
  sees a termination, the game goes on) and rewards clipped to [-1, 1] (`ClipReward`);
- the last 4 frames stacked (`FrameStackObservation`), which the replay buffer
  stores a frame at a time (`frame_stack.FrameStackBuffer`).

Evaluation (`for_evaluation`) plays whole games and reports the game's own score.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

FRAME_SKIP = 4
FRAME_SIZE = 84
FRAME_STACK = 4
NOOP_MAX = 30
ATARI_EXTRA = "atari"


def is_atari(env_id: str) -> bool:
    """Whether `env_id` is one of ale-py's games (`ALE/Breakout-v5`, ...)."""
    return env_id.split(":", 1)[-1].startswith("ALE/")


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode for the learner (terminated) while the game goes on: the next reset
    continues it with one no-op step, and only a game over (or a seeded reset) restarts it (DQN's training
    rule, Mnih et al., 2015)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return observation, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self.game_over or seed is not None:
            observation, info = self.env.reset(seed=seed, options=options)
        else:
            observation, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                observation, info = self.env.reset(options=options)
        self.game_over = False
        self.lives = self.env.unwrapped.ale.lives()
        return observation, info


def make_atari_env(env_id: str, training: bool = True, **kwargs: Any) -> gym.Env:
    """`env_id` with DQN's preprocessing; `training` adds the life-loss terminations and reward clipping.
    `kwargs` go to `gym.make` (e.g. `repeat_action_probability=0.0` for no sticky actions)."""
    env = gym.make(env_id, **{**kwargs, "frameskip": 1})
    env = gym.wrappers.AtariPreprocessing(env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP, screen_size=FRAME_SIZE)
    if training:
        env = gym.wrappers.ClipReward(EpisodicLife(env), -1.0, 1.0)
    env = gym.wrappers.FrameStackObservation(env, FRAME_STACK)
    env.metadata = {**env.metadata, "render_fps": 60 // FRAME_SKIP}  # one rendered frame per agent step
    return env


@dataclass(frozen=True)
class AtariEnvFactory:
    """Makes a preprocessed Atari game (`make_atari_env`); picklable. `for_evaluation()` gives the factory of
    whole games with unclipped scores."""

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    training: bool = True

    def __call__(self) -> gym.Env:
        from offpolicy.envs import EnvError, import_env_modules, make_registered

        import_env_modules(self.env_id)
        if "frameskip" in self.kwargs:
            raise EnvError(f"{self.env_id} skips {FRAME_SKIP} frames in its preprocessing; drop frameskip from its "
                           "arguments")
        return make_registered(self.env_id, self.kwargs, functools.partial(make_atari_env, training=self.training))

    def for_evaluation(self) -> "AtariEnvFactory":
        return dataclasses.replace(self, training=False)

    def __str__(self) -> str:
        return self.env_id


__all__ = ["AtariEnvFactory", "EpisodicLife", "is_atari", "make_atari_env"]
