"""dqn_default: does the bare `offpolicy train` (DQN on CartPole-v1, preset `dqn-cartpole`) stay solved?

Runs the preset as `offpolicy train` does, 40k steps with its evaluation every 2,500 steps on 5
deterministic episodes, on 12 seeds, two at a time with one torch thread each, and prints per seed the
step of the first evaluation of at least 475 and the last evaluation. The goal: the last evaluation at
least 475 on at least 10 of the 12 seeds, with the median step of the first 475 as early as before.

    python benchmarks/dqn_default.py [--seeds 0 1 ... 11] [--jobs 2] [--changes '{"hyperparameters": {"tau": 0.01}}']

`--changes` tries other settings (RunConfig fields; `strategy` and `hyperparameters` merged key by key).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
from concurrent.futures import ProcessPoolExecutor

from _runs import merged, run_one

TARGET = 475.0


def first_reaching(curve: list[tuple[int, float]], target: float = TARGET) -> int | None:
    """The step of the first evaluation of at least `target`, or None."""
    return next((step for step, value in curve if value >= target), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(12)))
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one torch thread each")
    parser.add_argument("--changes", type=json.loads, default={}, help="JSON of RunConfig fields to change")
    args = parser.parse_args()
    values = merged("dqn-cartpole", args.changes)
    with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as pool:
        runs = list(pool.map(run_one, [dict(values, seed=seed) for seed in args.seeds], [{}] * len(args.seeds)))
    for run in runs:
        first = first_reaching(run["curve"])
        print(f"  seed {run['seed']:>2}: first {TARGET:g} at {first if first else 'never'}, "
              f"last evaluation {run['final_return']:.1f}, {run['seconds']:.0f} s")
    solved = [run for run in runs if run["final_return"] >= TARGET]
    firsts = [first_reaching(run["curve"]) or values["num_steps"] * 2 for run in runs]
    print(f"{json.dumps(args.changes)}: last evaluation >= {TARGET:g} on {len(solved)} of {len(runs)} seeds; "
          f"median step of the first {TARGET:g}: {statistics.median(firsts) / 1000:.1f}k "
          f"(a run that never got there counts as {values['num_steps'] * 2 / 1000:.0f}k)")


if __name__ == "__main__":
    main()
