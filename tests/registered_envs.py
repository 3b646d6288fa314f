"""A package of envs of a user's own: importing it registers `Corridor-v0`, and Dict-observation versions of
CartPole and Pendulum, for the tests of `module:EnvId` ids, `--env-package` and Dict observations."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


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


class SplitObservation(gym.ObservationWrapper):
    """A Box observation handed over as a Dict: its first `head` values under `head`, the rest under `tail`,
    and with `frame` a 7x7 grey image with one lit pixel placed by the first two values, so that the Dict
    mixes dtypes and an image."""

    def __init__(self, env: gym.Env, head: int = 2, frame: bool = False) -> None:
        super().__init__(env)
        box = env.observation_space
        self.head, self.frame = head, frame
        keys = {"head": gym.spaces.Box(box.low[:head], box.high[:head], dtype=np.float32),
                "tail": gym.spaces.Box(box.low[head:], box.high[head:], dtype=np.float32)}
        if frame:
            keys["frame"] = gym.spaces.Box(0, 255, (7, 7, 1), np.uint8)
        self.observation_space = gym.spaces.Dict(keys)

    def observation(self, observation):
        split = {"head": observation[: self.head], "tail": observation[self.head :]}
        if self.frame:
            image = np.zeros((7, 7, 1), np.uint8)
            row, column = (np.tanh(observation[:2]) * 3 + 3).round().astype(int)
            image[row, column] = 255
            split["frame"] = image
        return split


def split_env(env_id: str, head: int = 2, frame: bool = False) -> gym.Env:
    return SplitObservation(gym.make(env_id), head, frame)


gym.register("SplitCartPole-v0", entry_point=split_env, kwargs={"env_id": "CartPole-v1"})
gym.register("SplitPendulum-v0", entry_point=split_env, kwargs={"env_id": "Pendulum-v1"})


class GoalLine(gym.Env):
    """Seven cells in a row: the agent starts in the middle and must walk to a goal drawn anew each episode.
    The goal is seen only in an image (a 7x7 frame with one lit pixel), the agent's cell only in a vector,
    so acting well takes both keys of the Dict. Each step costs 0.1, reaching the goal pays 1 and ends the
    episode; episodes are cut after 20 steps. Actions step one cell left or right (best mean return 0.9),
    or with `continuous` are a Box in [-1, 1] moving up to three cells (best mean return 1)."""

    def __init__(self, continuous: bool = False) -> None:
        self.observation_space = gym.spaces.Dict({
            "goal": gym.spaces.Box(0, 255, (7, 7, 1), np.uint8),
            "position": gym.spaces.Box(0.0, 1.0, (1,), np.float32),
        })
        self.continuous = continuous
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else gym.spaces.Discrete(2)
        self.cell = self.goal = 3

    def _observation(self):
        image = np.zeros((7, 7, 1), np.uint8)
        image[3, self.goal] = 255
        return {"goal": image, "position": np.array([self.cell / 6], np.float32)}

    def _move(self, action) -> int:
        """Discrete: 0 left, 1 right; continuous: a move of round(3 * action) cells (left below zero)."""
        if self.continuous:
            return int(np.round(3 * float(np.clip(action, -1.0, 1.0)[0])))
        return 1 if action == 1 else -1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell = 3
        self.goal = int(self.np_random.choice([0, 1, 2, 4, 5, 6]))
        return self._observation(), {}

    def step(self, action):
        self.cell = min(6, max(0, self.cell + self._move(action)))
        reached = self.cell == self.goal
        return self._observation(), 1.0 if reached else -0.1, reached, False, {}


gym.register("GoalLine-v0", entry_point=GoalLine, max_episode_steps=20)


def scaled_cartpole() -> gym.Env:
    """CartPole whose observations are far from unit scale (offset by 500, scaled 0.01x to 1000x per value):
    what observation normalisation is for."""
    env = gym.make("CartPole-v1")
    scale, offset = np.array([100.0, 1000.0, 1.0, 0.01]), 500.0
    space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float64)
    return gym.wrappers.TransformObservation(env, lambda observation: observation * scale + offset, space)


gym.register("ScaledCartPole-v0", entry_point=scaled_cartpole)


class BitFlip(gym.Env):
    """Hindsight replay's classic (Andrychowicz et al., 2017): `bits` bits start at random and must be made
    equal to a random target, one flip a step (action i flips bit i; the last action keeps them). A step
    pays 0 where the bits match the target after it and -1 elsewhere, so random exploration almost never
    sees a success beyond a few bits. Observations follow Gymnasium-Robotics' GoalEnv convention, with a
    vectorised `compute_reward`; episodes are cut after `bits` steps."""

    def __init__(self, bits: int = 8) -> None:
        self.bits = bits
        box = gym.spaces.Box(0.0, 1.0, (bits,), np.float32)
        self.observation_space = gym.spaces.Dict({"observation": box, "achieved_goal": box, "desired_goal": box})
        self.action_space = gym.spaces.Discrete(bits + 1)
        self.state = self.goal = np.zeros(bits, np.float32)

    def compute_reward(self, achieved_goal, desired_goal, info):
        return -np.any(np.asarray(achieved_goal) != np.asarray(desired_goal), axis=-1).astype(np.float32)

    def _observation(self):
        return {"observation": self.state.copy(), "achieved_goal": self.state.copy(), "desired_goal": self.goal.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.integers(0, 2, self.bits).astype(np.float32)
        self.goal = self.np_random.integers(0, 2, self.bits).astype(np.float32)
        return self._observation(), {}

    def step(self, action):
        if action < self.bits:
            self.state[action] = 1.0 - self.state[action]
        reward = float(self.compute_reward(self.state, self.goal, {}))
        return self._observation(), reward, False, False, {"is_success": reward == 0.0}


gym.register("BitFlip-v0", entry_point=BitFlip, max_episode_steps=16)


class CorridorFrames(gym.ObservationWrapper):
    """Corridor seen as a 3 x length grey image with the agent's cell lit."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.length = env.observation_space.n
        self.observation_space = gym.spaces.Box(0, 255, (3, self.length), np.uint8)

    def observation(self, observation):
        frame = np.zeros((3, self.length), np.uint8)
        frame[:, observation] = 255
        return frame


def stacked_corridor(length: int = 6, stack: int = 4) -> gym.Env:
    env = gym.make("Corridor-v0", length=length)
    return gym.wrappers.FrameStackObservation(CorridorFrames(env), stack)


gym.register("StackedCorridor-v0", entry_point=stacked_corridor)
