"""collect: collection throughput of each backend against Gymnasium's vector envs, in one run.

For CartPole-v1 and a deliberately CPU-heavy variant (each step also spends about 0.2 ms
computing, holding the GIL like a simulator written in Python), and num_envs 1, 4, 8, 16
with autobatch sizes 1, num_envs/2 and num_envs, this measures environment steps per second
of our runners (`inprocess`, `threads`, `processes`) acting with a fixed MLP policy
(4-64-64-2, epsilon-greedy, no training), and of Gymnasium's `SyncVectorEnv` and
`AsyncVectorEnv` stepping random actions (the raw limit, no policy at all). On the heavy env
it also measures the machine's parallel ceiling: one process per core stepping its share of
the envs with random actions, no policy and no communication at all (`bare parallel`), which
no collector on this machine can beat. Each figure is the median of --repeats windows, each
with systems built afresh (runners built afresh differ more than windows of one runner do);
systems alternate within each configuration. Beside each figure it prints how many cores the
host took from this virtual machine meanwhile (Linux's `steal`, median over the windows): a
collector that keeps every core busy loses far more to a crowded host than one that keeps one
core busy, so a parallel figure next to a high steal says more about the host than about us.
Each target is also given as the ratio within each repeat (median and range): the range shows
how far one run's figure can stray.

    python benchmarks/collect.py [--seconds 0.6] [--repeats 5] [--envs CartPole-v1 heavy]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
from typing import NamedTuple

import gymnasium as gym

HEAVY_STEP_S = 0.0002


class BusyStep(gym.Wrapper):
    """CartPole whose every step also burns about 0.2 ms of CPU (the `heavy` env)."""

    def step(self, action):
        # CPU time, not wall time: a worker preempted mid-step (by the trainer, or another worker) must still
        # do all of its work, as a real simulator would
        deadline = time.thread_time() + HEAVY_STEP_S
        while time.thread_time() < deadline:
            pass
        return self.env.step(action)


def make_heavy() -> gym.Env:
    return BusyStep(gym.make("CartPole-v1"))


def make_cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


FACTORIES = {"CartPole-v1": make_cartpole, "heavy": make_heavy}


WARM_UP_S = 0.2


def host_steal_s() -> float:
    """CPU seconds the hypervisor has so far taken from this virtual machine (Linux's `steal`; NaN elsewhere).

    On a shared VM the host runs other guests on our cores, and it takes more of them when all of our
    cores are busy: a parallel collector loses time that an in-process one, busy on one core, mostly keeps.
    """
    try:
        with open("/proc/stat") as stat:
            return int(stat.readline().split()[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


class Window(NamedTuple):
    """One timed window: environment steps per second, and the cores the host took meanwhile."""

    rate: float
    steal: float


def measure(step_chunk, chunk: int, seconds: float) -> Window:
    """Steps per second of `step_chunk()` (which takes `chunk` steps) over about `seconds`, after a warm-up."""
    start = time.perf_counter()
    while time.perf_counter() - start < WARM_UP_S:
        step_chunk()
    steps, stolen, start = 0, host_steal_s(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        step_chunk()
        steps += chunk
    elapsed = time.perf_counter() - start
    return Window(steps / elapsed, (host_steal_s() - stolen) / elapsed)


def ours(backend: str, env: str, num_envs: int, autobatch: int, seconds: float) -> Window:
    import torch

    from offpolicy.agents import make_learner
    from offpolicy.runners import make_collection_runner

    torch.set_num_threads(1)
    probe = FACTORIES[env]()
    learner = make_learner("dqn", probe.observation_space, probe.action_space, {"hidden": 64}, "cpu", 0)
    runner = make_collection_runner(backend, FACTORIES[env], list(range(num_envs)), learner.policy(), autobatch)
    try:
        return measure(lambda: runner.run_steps(num_envs), num_envs, seconds)
    finally:
        runner.close()


def vector(kind: str, env: str, num_envs: int, seconds: float) -> Window:
    cls = gym.vector.SyncVectorEnv if kind == "sync" else gym.vector.AsyncVectorEnv
    envs = cls([FACTORIES[env]] * num_envs)
    envs.reset(seed=0)
    try:
        return measure(lambda: envs.step(envs.action_space.sample()), num_envs, seconds)
    finally:
        envs.close()


def _step_alone(env: str, seeds: list[int], seconds: float, start: "mp.synchronize.Event", steps: "mp.Queue") -> None:
    envs = [FACTORIES[env]() for _ in seeds]
    for instance, seed in zip(envs, seeds):
        instance.reset(seed=seed)
        instance.action_space.seed(seed)
    start.wait()
    count, begin, stolen = 0, time.perf_counter(), None
    while time.perf_counter() - begin < WARM_UP_S + seconds:
        for instance in envs:
            _, _, terminated, truncated, _ = instance.step(instance.action_space.sample())
            if terminated or truncated:
                instance.reset()
            if time.perf_counter() - begin >= WARM_UP_S:
                stolen = host_steal_s() if stolen is None else stolen
                count += 1
    steps.put(Window(count / seconds, (host_steal_s() - stolen) / seconds))


def bare_parallel(env: str, num_envs: int, seconds: float) -> Window:
    """Steps per second of one process per core stepping its share of the envs, nothing else: the ceiling."""
    from offpolicy.runners.processes import START_TIMEOUT_S, usable_cores

    context = mp.get_context("spawn")
    start, steps = context.Event(), context.Queue()
    shares = [list(range(i, num_envs, usable_cores())) for i in range(min(num_envs, usable_cores()))]
    processes = [context.Process(target=_step_alone, args=(env, share, seconds, start, steps)) for share in shares]
    for process in processes:
        process.start()
    start.set()
    windows = [steps.get(timeout=START_TIMEOUT_S + WARM_UP_S + seconds) for _ in processes]
    for process in processes:
        process.join()
    return Window(sum(w.rate for w in windows), statistics.mean(w.steal for w in windows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--envs", nargs="+", default=list(FACTORIES), choices=list(FACTORIES))
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--backends", nargs="+", default=["inprocess", "threads", "processes"])
    args = parser.parse_args()
    from offpolicy.runners.processes import usable_cores

    print(f"{'env':<12}{'envs':>5}{'batch':>6}  {'system':<22}{'steps/s':>10}{'vs sync random':>16}"
          f"{'host steal':>12}")
    summary: dict[tuple[str, int, str], float] = {}  # median steps/s
    rounds: dict[tuple[str, int, str], list[Window]] = {}  # every window, in repeat order
    for env in args.envs:
        for num_envs in args.num_envs:
            systems = {"gym sync, random": lambda: vector("sync", env, num_envs, args.seconds),
                       "gym async, random": lambda: vector("async", env, num_envs, args.seconds)}
            if env == "heavy":
                systems["bare parallel, random"] = lambda: bare_parallel(env, num_envs, args.seconds)
            for backend in args.backends:
                for autobatch in sorted({1, max(1, num_envs // 2), num_envs}):
                    systems[f"{backend}, batch {autobatch}"] = (
                        lambda b=backend, a=autobatch: ours(b, env, num_envs, a, args.seconds)
                    )
            windows: dict[str, list[Window]] = {name: [] for name in systems}
            for _ in range(args.repeats):
                for name, run in systems.items():
                    windows[name].append(run())
            base = statistics.median(w.rate for w in windows["gym sync, random"])
            for name, measured in windows.items():
                rate = statistics.median(w.rate for w in measured)
                steal = statistics.median(w.steal for w in measured)
                summary[(env, num_envs, name)] = rate
                rounds[(env, num_envs, name)] = measured
                batch = name.split("batch ")[1] if "batch" in name else "-"
                print(f"{env:<12}{num_envs:>5}{batch:>6}  {name.split(',')[0]:<22}{rate:>10,.0f}{rate / base:>16.2f}"
                      f"{steal:>12.2f}", flush=True)

    print("\nTargets (2 cores):")
    ours_x8, sync_x8 = ("CartPole-v1", 8, "inprocess, batch 8"), ("CartPole-v1", 8, "gym sync, random")
    if ours_x8 in summary:
        ratio = summary[ours_x8] / summary[sync_x8]
        print(f"  CartPole x8: inprocess (MLP policy) / SyncVectorEnv (random actions) = {ratio:.2f}  (target >= 0.5)")
        print(f"    {paired(rounds, ours_x8, sync_x8)}")
    for num_envs in args.num_envs:
        same = [summary.get(("heavy", num_envs, f"{backend}, batch {num_envs}")) for backend in ("processes", "inprocess")]
        best = [best_batch(summary, "heavy", num_envs, backend) for backend in ("processes", "inprocess")]
        if None in same or None in best:
            continue
        print(f"  heavy x{num_envs}: processes / inprocess = {same[0] / same[1]:.2f} with autobatch {num_envs} for both, "
              f"{best[0][0] / best[1][0]:.2f} each at its best autobatch ({best[0][1]} vs {best[1][1]})  (target >= 1.7)")
        fastest = [("heavy", num_envs, f"{backend}, batch {batch}")
                   for backend, batch in (("processes", best[0][1]), ("inprocess", best[1][1]))]
        print(f"    at those autobatch sizes, {paired(rounds, *fastest)}")
        ceiling = summary.get(("heavy", num_envs, "bare parallel, random"))
        if ceiling:
            print(f"    the machine's ceiling (bare parallel) / inprocess = {ceiling / best[1][0]:.2f}; "
                  f"processes reach {best[0][0] / ceiling:.0%} of it")
        steal = [statistics.median(w.steal for w in rounds[key]) for key in fastest]
        print(f"    the host took {steal[0]:.2f} cores meanwhile from processes, {steal[1]:.2f} from inprocess "
              f"(median cores stolen per window, of {usable_cores()})")


def paired(rounds: dict, numerator: tuple, denominator: tuple) -> str:
    """The ratio within each repeat (its two windows ran seconds apart), as median and range: a ratio of
    medians hides how widely single windows stray on this machine (x16 heavy: 1.41-1.82 in one run)."""
    ratios = [a.rate / b.rate for a, b in zip(rounds[numerator], rounds[denominator])]
    return f"per repeat: median {statistics.median(ratios):.2f}, from {min(ratios):.2f} to {max(ratios):.2f}"


def best_batch(summary: dict, env: str, num_envs: int, backend: str) -> tuple[float, int] | None:
    """The highest rate of `backend` over the autobatch sizes measured, and that size."""
    rates = [(rate, int(name.split("batch ")[1])) for (e, n, name), rate in summary.items()
             if e == env and n == num_envs and name.startswith(f"{backend}, batch")]
    return max(rates) if rates else None


if __name__ == "__main__":
    main()
