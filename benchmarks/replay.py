"""replay: our replay buffers against Stable-Baselines3's, Tianshou's and TorchRL's, in one run.

CartPole-like transitions (4 float32 observations, a discrete action), 8 interleaved envs.
Three comparisons, each a median of --repeats windows with the systems alternating:

1. Uniform replay against Stable-Baselines3's `ReplayBuffer` at 100k and 1M: pushing chunks of
   8 transitions (one vector step of 8 envs), sampling batches of 256 from a full buffer (torch
   tensors ready for a learner), and the bytes held per transition.
2. The cost of n-step returns: sampling 256 from a full 1M buffer with `n_step=3` against
   `n_step=1` (target: at most 1.10x), and pushing, where our n-step work happens.
3. Prioritized replay at 1M: drawing 256 by priority (with importance weights) plus updating
   those 256 priorities, against Tianshou's `PrioritizedReplayBuffer` and TorchRL's
   `TensorDictPrioritizedReplayBuffer` (target: at least 2x faster than the faster of them).

    python benchmarks/replay.py [--repeats 5]   # needs: pip install -e .[bench,bench-replay]
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from offpolicy.buffer import TransitionBuffer
from offpolicy.prioritized import PrioritizedReplayBuffer
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


def uniform(capacities: list[int], repeats: int, rng: np.random.Generator) -> None:
    data = chunk_data(rng)
    print(f"{'capacity':>10}  {'system':<10}{'push transitions/s':>20}{'sample 256 /s':>15}{'bytes/transition':>18}")
    for capacity in capacities:
        systems = [Ours(capacity), SB3(capacity)]
        for system in systems:
            system.fill(capacity, rng)
        pushes: dict[str, list[float]] = {s.name: [] for s in systems}
        samples: dict[str, list[float]] = {s.name: [] for s in systems}
        for _ in range(repeats):
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


def episodes(count: int, rng: np.random.Generator) -> StepBatch:
    """`count` steps of 8 interleaved envs whose episodes end (5% terminated, 1% truncated) at random."""
    return StepBatch.of_transitions(
        rng.standard_normal((count, 4)).astype(np.float32),
        rng.standard_normal((count, 4)).astype(np.float32),
        rng.integers(2, size=count),
        rng.standard_normal(count).astype(np.float32),
        rng.random(count) < 0.05,
        rng.random(count) < 0.01,
        np.arange(count) % CHUNK,
    )


def fill(buffer: TransitionBuffer, capacity: int, rng: np.random.Generator) -> None:
    for start in range(0, capacity, 100_000):
        buffer.push(episodes(min(100_000, capacity - start), rng))


def nstep_cost(capacity: int, repeats: int, rng: np.random.Generator) -> None:
    buffers = {n: TransitionBuffer(capacity, n_step=n) for n in (1, 3)}
    for buffer in buffers.values():
        fill(buffer, capacity, rng)
    data = episodes(CHUNK, rng)
    samples: dict[int, list[float]] = {n: [] for n in buffers}
    pushes: dict[int, list[float]] = {n: [] for n in buffers}
    for _ in range(repeats):
        for n, buffer in buffers.items():
            samples[n].append(rate(lambda: buffer.sample(BATCH)))
            pushes[n].append(rate(lambda: buffer.push(data)) * CHUNK)
    print(f"\nn-step returns, {capacity:,} transitions, 8 envs")
    print(f"{'n_step':>10}  {'sample 256 /s':>15}{'push transitions/s':>20}")
    for n in buffers:
        print(f"{n:>10}  {statistics.median(samples[n]):>15,.0f}{statistics.median(pushes[n]):>20,.0f}")
    per_sample = [one / three for one, three in zip(samples[1], samples[3])]
    per_push = [one / three for one, three in zip(pushes[1], pushes[3])]
    print(f"{'':>10}  time n_step=3 / n_step=1: sample {statistics.median(per_sample):.2f} "
          f"(from {min(per_sample):.2f} to {max(per_sample):.2f}; target <= 1.10), "
          f"push {statistics.median(per_push):.2f} (windows are computed when transitions arrive)", flush=True)


class OursPrioritized:
    name = "offpolicy"

    def __init__(self, capacity: int, rng: np.random.Generator) -> None:
        self.buffer = PrioritizedReplayBuffer(capacity)
        fill(self.buffer, capacity, rng)
        for start in range(0, capacity, 100_000):
            indices = torch.arange(start, min(capacity, start + 100_000))
            self.buffer.update_priorities(indices, torch.from_numpy(rng.exponential(size=len(indices))))
        self.errors = torch.from_numpy(rng.exponential(size=BATCH))

    def step(self) -> None:
        batch = self.buffer.sample(BATCH)
        self.buffer.update_priorities(batch.indices, self.errors)


class TianshouPrioritized:
    name = "tianshou"

    def __init__(self, capacity: int, rng: np.random.Generator) -> None:
        from tianshou.data import Batch
        from tianshou.data import PrioritizedReplayBuffer as Prioritized

        self.buffer = Prioritized(capacity, alpha=0.6, beta=0.4)
        # Filled in bulk: Tianshou adds one transition per call, about 0.2 ms each.
        steps = episodes(capacity, rng)
        self.buffer.set_batch(Batch(
            obs=steps.observations, act=steps.actions, rew=steps.rewards, terminated=steps.terminated,
            truncated=steps.truncated, done=steps.done, obs_next=steps.next_observations, info=Batch(),
        ))
        self.buffer._size = capacity
        self.buffer.update_weight(np.arange(capacity), rng.exponential(size=capacity))
        self.errors = rng.exponential(size=BATCH)

    def step(self) -> None:
        batch, indices = self.buffer.sample(BATCH)
        self.buffer.update_weight(indices, self.errors)


class TorchRLPrioritized:
    name = "torchrl"

    def __init__(self, capacity: int, rng: np.random.Generator) -> None:
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

        self.buffer = TensorDictPrioritizedReplayBuffer(
            alpha=0.6, beta=0.4, storage=LazyTensorStorage(capacity), batch_size=BATCH, priority_key="td_error")
        steps = episodes(capacity, rng)
        self.buffer.extend(TensorDict({
            "observation": torch.from_numpy(steps.observations),
            "next_observation": torch.from_numpy(steps.next_observations),
            "action": torch.from_numpy(steps.actions), "reward": torch.from_numpy(steps.rewards),
            "terminated": torch.from_numpy(steps.terminated), "truncated": torch.from_numpy(steps.truncated),
        }, batch_size=[capacity]))
        self.buffer.update_priority(torch.arange(capacity), torch.from_numpy(rng.exponential(size=capacity)))
        self.errors = torch.from_numpy(rng.exponential(size=BATCH))

    def step(self) -> None:
        batch = self.buffer.sample()
        batch["td_error"] = self.errors
        self.buffer.update_tensordict_priority(batch)


def prioritized(capacity: int, repeats: int, rng: np.random.Generator) -> None:
    systems = []
    for system in (OursPrioritized, TianshouPrioritized, TorchRLPrioritized):
        try:
            systems.append(system(capacity, rng))
        except ImportError as error:
            print(f"{system.name}: not installed ({error.name}); pip install -e .[bench-replay]")
        except RuntimeError as error:  # TorchRL's compiled sum tree must match the installed torch
            print(f"{system.name}: cannot run here: {str(error).splitlines()[0]}")
    rates: dict[str, list[float]] = {s.name: [] for s in systems}
    for _ in range(repeats):
        for system in systems:
            rates[system.name].append(rate(system.step))
    print(f"\nprioritized replay, {capacity:,} transitions: draw 256 by priority and update their priorities")
    print(f"{'':>10}  {'system':<10}{'steps/s':>10}{'microseconds':>14}")
    for system in systems:
        median = statistics.median(rates[system.name])
        print(f"{'':>10}  {system.name:<10}{median:>10,.0f}{1e6 / median:>14.0f}")
    peers = [name for name in rates if name != "offpolicy"]
    if peers:
        fastest = max(peers, key=lambda name: statistics.median(rates[name]))
        ratios = [ours / theirs for ours, theirs in zip(rates["offpolicy"], rates[fastest])]
        print(f"{'':>10}  offpolicy / {fastest} (the faster peer): {statistics.median(ratios):.2f}x as fast "
              f"(from {min(ratios):.2f} to {max(ratios):.2f}; target >= 2)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--capacities", type=int, nargs="+", default=[100_000, 1_000_000],
                        help="capacities of the uniform comparison; the others use the largest")
    parser.add_argument("--only", choices=["uniform", "nstep", "prioritized"], nargs="+",
                        default=["uniform", "nstep", "prioritized"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    if "uniform" in args.only:
        uniform(args.capacities, args.repeats, rng)
    if "nstep" in args.only:
        nstep_cost(max(args.capacities), args.repeats, rng)
    if "prioritized" in args.only:
        prioritized(max(args.capacities), args.repeats, rng)


if __name__ == "__main__":
    main()
