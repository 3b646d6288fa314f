"""Shared by the benchmarks: run each system in a fresh process, alternating, and collect JSON results."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any, Callable, Mapping


def child_options(parser: argparse.ArgumentParser) -> None:
    """Add the hidden options by which `run_alternating` starts one system's run in a fresh process."""
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)


def run_child(args: argparse.Namespace, systems: Mapping[str, Callable[[int], dict[str, Any]]]) -> bool:
    """In a process that `run_alternating` started, run the system asked for and print its result as JSON.

    Returns whether this was such a process (the caller then has nothing more to do)."""
    if not args.one:
        return False
    print(json.dumps(systems[args.one](args.seed)))
    return True


def run_alternating(script: str, systems: list[str], seeds: list[int]) -> dict[str, list[dict]]:
    """Run `script --one SYSTEM --seed SEED` for every pair, rotating the order each seed."""
    results: dict[str, list[dict]] = {name: [] for name in systems}
    for round_index, seed in enumerate(seeds if systems else []):
        shift = round_index % len(systems)
        for name in systems[shift:] + systems[:shift]:
            out = subprocess.run([sys.executable, script, "--one", name, "--seed", str(seed)],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"{name} seed {seed} failed:\n{out.stderr}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            results[name].append(result)
            shown = ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items())
            print(f"  seed {seed} {name:<10} {shown}", flush=True)
    return results


def evaluate(env_id: str, act, episodes: int = 10) -> float:
    """Mean return of deterministic episodes on seeds 10_000.. (the same for every system)."""
    import gymnasium as gym
    import numpy as np

    env = gym.make(env_id)
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=10_000 + episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(np.asarray(obs, dtype=np.float32)))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return sum(returns) / len(returns)


def profile_run(config, title: str) -> None:
    """Where one run of ours spends its time: each part timed around its own calls, the rest is overhead.

    Parts: env steps (`EnvSession.advance`), inference (the policy's `act_arrays`), replay push and sample,
    optimisation (the learner's `train`); overhead is the loop, events, step batches and the rest.
    """
    import functools
    import time

    import offpolicy
    from offpolicy.agents import make_learner
    from offpolicy.buffer import make_replay_buffer
    from offpolicy.envs import make_env_factory, probe_spaces
    from offpolicy.runners.inprocess import EnvSession

    factory = make_env_factory(config.env)
    spaces = probe_spaces(factory)
    sample = make_learner(config.agent, *spaces, config.hyperparameters, config.device, config.seed)
    learner_class, policy_class = type(sample), type(sample.policy())
    buffer_class = type(make_replay_buffer(config.strategy, config.device, config.seed, sample.gamma, config.num_steps,
                                           factory))

    spent: dict[str, float] = {}

    def timed(owner, method, part):
        original = getattr(owner, method)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[part] = spent.get(part, 0.0) + time.perf_counter() - start

        setattr(owner, method, wrapper)
        return original

    originals = [
        (EnvSession, "advance", timed(EnvSession, "advance", "env steps")),
        (policy_class, "act_arrays", timed(policy_class, "act_arrays", "inference")),
        (buffer_class, "push", timed(buffer_class, "push", "replay push")),
        (buffer_class, "sample", timed(buffer_class, "sample", "replay sample")),
        (learner_class, "train", timed(learner_class, "train", "optimisation")),
    ]
    try:
        start = time.perf_counter()
        offpolicy.train(config, save=False, quiet=True)
        total = time.perf_counter() - start
    finally:
        for owner, method, original in originals:
            setattr(owner, method, original)
    spent["overhead (loop, events, step batches)"] = total - sum(spent.values())
    print(f"\nwhere the time goes: {title} ({total:.1f} s, {config.torch_threads} torch thread(s))")
    for part, seconds in spent.items():
        print(f"  {part:<38}{seconds:7.2f} s {100 * seconds / total:5.1f} %")
