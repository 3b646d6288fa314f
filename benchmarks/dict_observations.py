"""dict_observations: what a Dict observation costs over the same values in one array, in one run.

Two systems, each in a fresh process, alternated seed by seed, with the `seed-example` DQN settings
(in-process backend, 8 envs, 1 torch thread, 40,000 steps):
- dict: CartPole-v1 with its observation handed over as a Dict of two Box keys (cart and pole);
- array: CartPole-v1 as it is, i.e. the two keys concatenated.

The Dict is packed into one record per step as it leaves the env; the work after that is the same.
Prints wall-clock per system, medians over seeds, and the ratio dict / array (target: at most 1.15).

    python benchmarks/dict_observations.py [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
from _common import child_options, run_alternating, run_child

from offpolicy.presets import preset


class CartAndPole(gym.ObservationWrapper):
    """CartPole's four values as {"cart": position and velocity, "pole": angle and angular velocity}."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Dict({
            "cart": gym.spaces.Box(box.low[:2], box.high[:2], dtype=np.float32),
            "pole": gym.spaces.Box(box.low[2:], box.high[2:], dtype=np.float32),
        })

    def observation(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        return {"cart": observation[:2], "pole": observation[2:]}


def dict_cartpole() -> gym.Env:
    return CartAndPole(gym.make("CartPole-v1"))


def one(system: str, seed: int) -> dict:
    """One run of the seed example's settings, on the Dict env ("dict") or plain CartPole-v1 ("array")."""
    import torch

    from offpolicy import RunConfig, train

    torch.set_num_threads(1)
    values = dict(preset("seed-example"), seed=seed)
    values["strategy"] = dict(values["strategy"], eval_interval=10**9)
    start = time.perf_counter()
    result = train(RunConfig(**values), env=dict_cartpole if system == "dict" else None, save=False, quiet=True)
    return {"seconds": time.perf_counter() - start, "steps": result.stats.step}


SYSTEMS = {"dict": lambda seed: one("dict", seed), "array": lambda seed: one("array", seed)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    child_options(parser)
    args = parser.parse_args()
    if run_child(args, SYSTEMS):
        return
    results = run_alternating(__file__, list(SYSTEMS), args.seeds)
    medians = {name: statistics.median(r["seconds"] for r in runs) for name, runs in results.items()}
    ratios = [d["seconds"] / a["seconds"] for d, a in zip(results["dict"], results["array"])]
    print(f"median seconds: dict {medians['dict']:.1f}, array {medians['array']:.1f}")
    print(f"dict / array: {medians['dict'] / medians['array']:.2f} (per seed {min(ratios):.2f}-{max(ratios):.2f}; "
          f"target <= 1.15)")


if __name__ == "__main__":
    main()
