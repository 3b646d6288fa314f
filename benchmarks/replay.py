"""replay: our replay buffer against Stable-Baselines3's `ReplayBuffer`, in one run.

For capacities 100k and 1M and CartPole-like transitions (4 float32 observations, a
discrete action), measures pushing chunks of 8 transitions (one vector step of 8 envs),
sampling batches of 256 from a full buffer (each returning torch tensors ready for a
learner), and the bytes each buffer holds per transition. Medians of --repeats windows,
systems alternating.

    python benchmarks/replay.py [--repeats 5]       # needs: pip install -e .[bench]
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from offpolicy.buffer import TransitionBuffer
from offpolicy.steps import StepBatch

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACTIONS = gym.spaces.Discrete(2)
CHUNK = 8
BATCH = 256


def chunk_data(rng: np.random.Generator):
    return (
        rng.standard_normal((CHUNK, 4)).astype(np.float32),
        rng.standard_normal((CHUNK, 4)).astype(np.float32),
        rng.integers(2, size=CHUNK),
        rng.standard_normal(CHUNK).astype(np.float32),
        rng.random(CHUNK) < 0.05,
    )


class Ours:
    name = "offpolicy"

    def __init__(self, capacity: int) -> None:
        self.buffer = TransitionBuffer(capacity)

    def push(self, data) -> None:
        self.buffer.push(StepBatch.of_transitions(*data))

    def fill(self, capacity: int, rng) -> None:
        size = 100_000
        for start in range(0, capacity, size):
            count = min(size, capacity - start)
            self.buffer.push(StepBatch.of_transitions(
                rng.standard_normal((count, 4)).astype(np.float32),
                rng.standard_normal((count, 4)).astype(np.float32),
                rng.integers(2, size=count),
                rng.standard_normal(count).astype(np.float32),
                rng.random(count) < 0.05,
            ))

    def sample(self) -> None:
        self.buffer.sample(BATCH)

    def bytes_per_transition(self, capacity: int) -> float:
        return self.buffer.nbytes / capacity


class SB3:
    name = "sb3"

    def __init__(self, capacity: int) -> None:
        from stable_baselines3.common.buffers import ReplayBuffer

        self.buffer = ReplayBuffer(capacity, OBS, ACTIONS, device="cpu", n_envs=CHUNK)
        self.infos = [{} for _ in range(CHUNK)]

    def push(self, data) -> None:
        obs, next_obs, actions, rewards, dones = data
        self.buffer.add(obs, next_obs, actions, rewards, dones, self.infos)

    def fill(self, capacity: int, rng) -> None:
        data = chunk_data(rng)
        for _ in range(capacity // CHUNK):
            self.push(data)

    def sample(self) -> None:
        self.buffer.sample(BATCH)

    def bytes_per_transition(self, capacity: int) -> float:
        arrays = [value for value in vars(self.buffer).values() if isinstance(value, np.ndarray)]
        return sum(a.nbytes for a in arrays) / capacity


def rate(action, seconds: float = 0.4) -> float:
    action()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        action()
        count += 1
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--capacities", type=int, nargs="+", default=[100_000, 1_000_000])
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    data = chunk_data(rng)

    print(f"{'capacity':>10}  {'system':<10}{'push transitions/s':>20}{'sample 256 /s':>15}{'bytes/transition':>18}")
    for capacity in args.capacities:
        systems = [Ours(capacity), SB3(capacity)]
        for system in systems:
            system.fill(capacity, rng)
        pushes: dict[str, list[float]] = {s.name: [] for s in systems}
        samples: dict[str, list[float]] = {s.name: [] for s in systems}
        for _ in range(args.repeats):
            for system in systems:
                pushes[system.name].append(rate(lambda: system.push(data)) * CHUNK)
                samples[system.name].append(rate(system.sample))
        for system in systems:
            print(f"{capacity:>10,}  {system.name:<10}{statistics.median(pushes[system.name]):>20,.0f}"
                  f"{statistics.median(samples[system.name]):>15,.0f}{system.bytes_per_transition(capacity):>18.1f}")
        ours, theirs = (statistics.median(samples[n]) for n in ("offpolicy", "sb3"))
        push_ratio = statistics.median(pushes["offpolicy"]) / statistics.median(pushes["sb3"])
        print(f"{'':>10}  ratios offpolicy / sb3: sample {ours / theirs:.2f} (target >= 1), push {push_ratio:.2f}, "
              f"bytes {systems[0].bytes_per_transition(capacity) / systems[1].bytes_per_transition(capacity):.2f} "
              "(target <= 1)", flush=True)


if __name__ == "__main__":
    main()
