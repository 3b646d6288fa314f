"""No leaks: resident memory of a long run, once the replay buffer is full and at the end.

A run of 1,000,000 environment steps (DQN on CartPole-v1, 8 in-process envs,
a 100,000-transition buffer that is full after the first tenth, training,
evaluations, checkpoints and metric logs all on) must not keep growing once
everything is allocated: the target is under 5% growth from the moment the
buffer is full to the end. Prints both figures and the ratio.

    python benchmarks/memory.py [--steps 1000000] [--backend inprocess]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from offpolicy import OffPolicyConfig, RunConfig, train
from offpolicy.events import StepsCollected, TrainingEnded

BUFFER = 100_000


def resident_bytes() -> int:
    """This process's resident set size (Linux /proc, or psutil elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            import os

            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil

        return psutil.Process().memory_info().rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--backend", default="inprocess", choices=["inprocess", "threads", "processes"])
    args = parser.parse_args()

    samples: dict[str, int] = {}
    timeline: list[tuple[int, int]] = []

    def measure(event, stats) -> None:
        if isinstance(event, StepsCollected):
            if "buffer_full" not in samples and event.step >= BUFFER:
                samples["buffer_full"] = resident_bytes()
            if event.step % 100_000 < 64:
                timeline.append((event.step, resident_bytes()))
        elif isinstance(event, TrainingEnded):
            samples["end"] = resident_bytes()

    config = RunConfig(
        num_steps=args.steps,
        strategy=OffPolicyConfig(num_envs=8, autobatch_size=8, replay_buffer_size=BUFFER, train_interval=64,
                                 train_steps=4, train_batch_size=64, eval_interval=100_000, eval_episodes=2,
                                 warmup_steps=1_000, backend=args.backend),
        hyperparameters={"hidden": 64},
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        result = train(config, run_dir=Path(run_dir) / "run", quiet=True, callbacks=[measure])
    elapsed = time.perf_counter() - started

    mib = 1 << 20
    growth = samples["end"] / samples["buffer_full"] - 1
    print(f"{result.stats.step:,} env steps, {result.stats.train_steps:,} updates, {result.stats.episodes:,} "
          f"episodes in {elapsed:.0f} s ({args.backend})")
    print("resident memory by step: " + ", ".join(f"{step // 1000}k {rss / mib:.0f} MiB" for step, rss in timeline))
    print(f"resident memory: {samples['buffer_full'] / mib:.1f} MiB when the buffer was full (step {BUFFER:,}), "
          f"{samples['end'] / mib:.1f} MiB at the end")
    print(f"growth after the buffer filled: {growth * 100:+.2f}% (target < 5%): {'OK' if growth < 0.05 else 'FAIL'}")


if __name__ == "__main__":
    main()
