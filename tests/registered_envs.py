"""A package of envs of a user's own: importing it registers `Corridor-v0`, for the tests of `module:EnvId`
ids and `--env-package`."""

from __future__ import annotations

import gymnasium as gym


class Corridor(gym.Env):
    """Walk right along `length` cells to a reward of 1 at the end; the observation is the cell (Discrete)."""

    def __init__(self, length: int = 5) -> None:
        self.length = length
        self.observation_space = gym.spaces.Discrete(length)
        self.action_space = gym.spaces.Discrete(2)
        self.cell = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell = 0
        return self.cell, {}

    def step(self, action):
        self.cell = max(0, self.cell + (1 if action == 1 else -1))
        done = self.cell == self.length - 1
        return self.cell, float(done), done, False, {}


gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=30)
