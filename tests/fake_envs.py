"""Environments for tests; importing this module loads no torch (worker processes import it)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class CountingEnv(gym.Env):
    """Observation = [steps into the episode, env tag]; ends after `length` steps.

    `truncate=True` ends episodes by time limit (truncated) instead of terminating.
    """

    def __init__(self, length: int = 5, tag: float = 0.0, truncate: bool = False) -> None:
        self.observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.length = length
        self.tag = tag
        self.truncate = truncate
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.tag], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        return self._obs(), 1.0, done and not self.truncate, done and self.truncate, {}


class FailingEnv(CountingEnv):
    """Raises in step() once it has taken `fail_after` steps."""

    def __init__(self, fail_after: int = 3) -> None:
        super().__init__(length=100)
        self.fail_after = fail_after
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps > self.fail_after:
            raise RuntimeError("simulator exploded")
        return super().step(action)


class SlowEnv(CountingEnv):
    """A CountingEnv that sleeps in every step, to have time to act on a live worker."""

    def step(self, action):
        import time

        time.sleep(0.01)
        return super().step(action)


class OddSeedsSlowEnv(CountingEnv):
    """Sleeps 5 ms a step when reset with an odd seed: envs seeded 1, 3, 5... lag behind the others."""

    def __init__(self) -> None:
        super().__init__(length=1000)
        self.delay = 0.0

    def reset(self, *, seed: int | None = None, options: Any = None):
        if seed is not None:
            self.delay = 0.005 * (seed % 2)
        return super().reset(seed=seed, options=options)

    def step(self, action):
        import time

        time.sleep(self.delay)
        return super().step(action)


class BrokenEnv(CountingEnv):
    """Breaks in one way (`fault`) at its step `at`; episodes last 4 steps, so resets happen.

    Faults: "raise" (step raises), "reset" (the reset after an episode raises), "nan" (NaN
    observation), "inf_reward", "shape" (observation of the wrong shape), "hang" (step sleeps
    for a minute).
    """

    def __init__(self, fault: str, at: int = 6) -> None:
        super().__init__(length=4)
        self.fault = fault
        self.at = at
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: Any = None):
        if self.fault == "reset" and self.steps >= self.at:
            raise RuntimeError("reset exploded")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.steps += 1
        observation, reward, terminated, truncated, info = super().step(action)
        if self.steps == self.at:
            if self.fault == "raise":
                raise RuntimeError("simulator exploded")
            if self.fault == "nan":
                observation = np.array([np.nan, 0.0], dtype=np.float32)
            if self.fault == "inf_reward":
                reward = float("inf")
            if self.fault == "shape":
                observation = np.zeros(3, dtype=np.float32)
            if self.fault == "hang":
                import time

                time.sleep(60)
        return observation, reward, terminated, truncated, info


class SelfKillingEnv(CountingEnv):
    """SIGKILLs its own process at its step `at`: only the first env of a run to get there, as
    `marker` (a file path) records; a stand-in for `kill -9` of a worker or a lost machine."""

    def __init__(self, marker: str, at: int = 50) -> None:
        super().__init__(length=4)
        self.marker = marker
        self.at = at
        self.steps = 0

    def step(self, action):
        import os
        import signal

        self.steps += 1
        if self.steps == self.at:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)


class RecordingEnv(CountingEnv):
    """A CountingEnv that counts its steps in `counts` (a shared array), at the index of the seed it was
    first reset with: tests see, from the trainer, what envs in worker processes did."""

    def __init__(self, counts: Any, length: int = 5) -> None:
        super().__init__(length)
        self.counts = counts
        self.index = -1

    def reset(self, *, seed: int | None = None, options: Any = None):
        if seed is not None:
            self.index = seed
            self.tag = float(seed)
        return super().reset(seed=seed, options=options)

    def step(self, action):
        with self.counts.get_lock():
            self.counts[self.index] += 1
        return super().step(action)


class DictCountingEnv(CountingEnv):
    """`CountingEnv` with a Dict observation of every storable kind, each holding the step or the tag: an image
    filled with the step (uint8), [step, tag] (float64, stored as float32), the step mod 3 (Discrete) and a
    nested Tuple of a MultiBinary and a float32 Box. Any mix-up of bytes between keys or steps shows."""

    def __init__(self, length: int = 5, tag: float = 0.0, truncate: bool = False) -> None:
        super().__init__(length, tag, truncate)
        spaces = gym.spaces
        self.observation_space = spaces.Dict({
            "frame": spaces.Box(0, 255, (6, 6, 1), np.uint8),
            "state": spaces.Box(-1e6, 1e6, (2,), np.float64),
            "phase": spaces.Discrete(3),
            "extra": spaces.Tuple((spaces.MultiBinary(3), spaces.Box(-1e6, 1e6, (1,), np.float32))),
        })

    def _obs(self) -> dict[str, Any]:
        return {
            "frame": np.full((6, 6, 1), self.t, np.uint8),
            "state": np.array([self.t, self.tag], np.float64),
            "phase": self.t % 3,
            "extra": (np.array([1, 0, self.t % 2], np.int8), np.array([-self.t], np.float32)),
        }


gym.register("DictCounting-v0", entry_point=DictCountingEnv)
