"""ray_scaling: what the Ray backend costs and gives, against the processes backend, in one run.

1. throughput: env steps/s collecting on the CPU-heavy env (CartPole + ~0.2 ms of CPU per
   step, from collect.py) with the DQN MLP acting, no training: in-process (one core), the
   processes backend, and Ray with 1, 2 and 4 actors, all over the same --num-envs envs.
   Systems alternate; each figure is the median of --repeats windows.
2. broadcast: publishing new parameters to every actor after a phase, for MLPs from the
   default DQN one (4.6k parameters) to 9M: the trainer's cost (one `ray.put`; each actor's
   next chunk request carries the reference) and the time until every actor has loaded them.
3. transfer: the per-chunk cost of steps coming back from an actor: a chunk's round trip
   on Ray minus stepping the same envs in-process, the bytes of a chunk, and the trainer's
   own CPU time per chunk (what limits how many chunks one trainer can take in).
4. learner: DQN updates/s (batch 128) per model size, which with the replay ratio says how
   many env steps/s one learner can absorb (docs/scaling.md works through it).

    python benchmarks/ray_scaling.py [--parts throughput broadcast transfer learner] [--seconds 2]

Ray runs locally, sized to this machine (one instance for the whole benchmark; its start-up
is reported separately and never counted in a rate).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from collect import FACTORIES, measure

from offpolicy.agents import make_learner
from offpolicy.policy import PolicyLearner
from offpolicy.runners import BackendOptions, RayFleet, make_collection_runner

MODEL_SIZES = {"4.6k (DQN default)": (64, 3), "70k": (256, 3), "1.1M": (1024, 3), "9M": (3000, 3)}


def learner_for(env: str, hidden: int = 64, layers: int = 3) -> PolicyLearner:
    probe = FACTORIES[env]()
    return make_learner("dqn", probe.observation_space, probe.action_space, {"hidden": hidden, "layers": layers},
                        "cpu", 0)


def collection_rate(backend: str, num_envs: int, seconds: float, actors: int = 0, steps_per_env: int = 1) -> float:
    fleet = RayFleet(actors=actors, steps_per_env=steps_per_env)
    runner = make_collection_runner(backend, FACTORIES["heavy"], list(range(num_envs)), learner_for("heavy").policy(),
                                    max(1, num_envs // 2), BackendOptions(ray=fleet))
    try:
        return measure(lambda: runner.run_steps(num_envs), num_envs, seconds)
    finally:
        runner.close()


def throughput(args: argparse.Namespace) -> None:
    systems = {"inprocess": lambda: collection_rate("inprocess", args.num_envs, args.seconds),
               "processes": lambda: collection_rate("processes", args.num_envs, args.seconds)}
    for actors in (1, 2, 4):
        for per_env in sorted({1, args.steps_per_env}):
            systems[f"ray, {actors} actor{'s' * (actors > 1)}, chunk {per_env}"] = (
                lambda a=actors, k=per_env: collection_rate("ray", args.num_envs, args.seconds, a, k))
    rates: dict[str, list[float]] = {name: [] for name in systems}
    for round_index in range(args.repeats):
        names = list(systems)
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            rates[name].append(systems[name]())
    base, processes = statistics.median(rates["inprocess"]), statistics.median(rates["processes"])
    print(f"\n1. throughput: heavy env x{args.num_envs}, autobatch {args.num_envs // 2}, {os.cpu_count()} CPUs "
          "(chunk: steps per env in one request to an actor)")
    print(f"   {'system':<26}{'steps/s':>10}{'vs inprocess':>14}{'vs processes':>14}")
    for name, values in rates.items():
        rate = statistics.median(values)
        print(f"   {name:<26}{rate:>10,.0f}{rate / base:>14.2f}{rate / processes:>14.2f}", flush=True)


def timed(call, repeats: int) -> tuple[float, float]:
    """Median wall-clock seconds of `call()`, and the mean CPU seconds this process spent in it."""
    call()
    samples = []
    cpu = time.process_time()
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), (time.process_time() - cpu) / repeats


def broadcast(args: argparse.Namespace, ray) -> None:
    from offpolicy.runners.ray_actors import EnvActor

    print("\n2. broadcast: new parameters to every actor, once per phase")
    print(f"   {'model':<20}{'MB':>7}{'actors':>7}{'put ms':>9}{'all loaded ms':>15}")
    remote_actor = ray.remote(num_cpus=0.1)(EnvActor)
    for label, (hidden, layers) in MODEL_SIZES.items():
        policy = learner_for("CartPole-v1", hidden, layers).policy()
        state = {name: tensor.detach().cpu().numpy() for name, tensor in policy.state().items()}  # as the runner
        megabytes = sum(array.nbytes for array in state.values()) / 1e6
        for actors in (1, 4):
            fleet = [remote_actor.remote(FACTORIES["CartPole-v1"], [i], [i], policy, 1) for i in range(actors)]
            ray.get([actor.ready.remote() for actor in fleet])
            trainer_s, everyone_s = [], []
            for _ in range(10 * args.repeats + 1):  # the first round warms up
                started = time.perf_counter()
                shared = ray.put(state)
                trainer_s.append(time.perf_counter() - started)
                ray.get([actor.update_policy.remote(shared, 0) for actor in fleet])  # what a request does first
                everyone_s.append(time.perf_counter() - started)
            trainer, everyone = statistics.median(trainer_s[1:]), statistics.median(everyone_s[1:])
            print(f"   {label:<20}{megabytes:>7.2f}{actors:>7}{trainer * 1e3:>9.2f}{everyone * 1e3:>15.2f}",
                  flush=True)
            for actor in fleet:
                ray.kill(actor)


def transfer(args: argparse.Namespace, ray) -> None:
    from offpolicy.runners.ray_actors import EnvActor

    print("\n3. transfer: one chunk (a step of each of an actor's envs) coming back, CartPole")
    print(f"   {'envs/actor':>10}{'KB/chunk':>10}{'local ms':>10}{'Ray ms':>9}{'overhead ms':>13}{'per step us':>13}"
          f"{'trainer CPU us':>16}")
    policy = learner_for("CartPole-v1").policy()
    remote_actor = ray.remote(num_cpus=1)(EnvActor)
    for envs in (1, 8, 64):
        local = EnvActor(FACTORIES["CartPole-v1"], list(range(envs)), list(range(envs)), policy, envs)
        actor = remote_actor.remote(FACTORIES["CartPole-v1"], list(range(envs)), list(range(envs)), policy, envs)
        ray.get(actor.ready.remote())
        chunk = local.run_steps(envs)
        kilobytes = sum(v.nbytes for v in vars(chunk).values() if isinstance(v, np.ndarray)) / 1e3
        kilobytes += sum(v.nbytes for v in chunk.context.values()) / 1e3
        here, _ = timed(lambda: local.run_steps(envs), args.repeats * 30)
        there, trainer_cpu = timed(lambda: ray.get(actor.run_steps.remote(envs)), args.repeats * 30)
        print(f"   {envs:>10}{kilobytes:>10.1f}{here * 1e3:>10.2f}{there * 1e3:>9.2f}{(there - here) * 1e3:>13.2f}"
              f"{(there - here) / envs * 1e6:>13.1f}{trainer_cpu * 1e6:>16.0f}", flush=True)
        local.close()
        ray.kill(actor)


def learner_rate(args: argparse.Namespace) -> None:
    from offpolicy.buffer import TransitionBuffer
    from offpolicy.steps import StepBatch

    print("\n4. learner: DQN updates/s on this CPU, batch 128 (1 torch thread)")
    print(f"   {'model':<20}{'updates/s':>10}")
    rng = np.random.default_rng(0)
    for label, (hidden, layers) in MODEL_SIZES.items():
        learner = learner_for("CartPole-v1", hidden, layers)
        buffer = TransitionBuffer(10_000, torch.device("cpu"), 0)
        n = 10_000
        buffer.push(StepBatch.of_transitions(rng.normal(size=(n, 4)).astype(np.float32),
                                             rng.normal(size=(n, 4)).astype(np.float32),
                                             rng.integers(0, 2, n), np.ones(n, np.float32), np.zeros(n, bool)))
        count = max(20, int(200 / max(1, hidden / 256) ** 2))
        batches = list(buffer.sample_batches(128, count))
        start = time.perf_counter()
        for batch in batches:
            learner.train(batch)
        rate = count / (time.perf_counter() - start)
        print(f"   {label:<20}{rate:>10,.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", default=["throughput", "broadcast", "transfer", "learner"],
                        choices=["throughput", "broadcast", "transfer", "learner"])
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps-per-env", type=int, default=4,
                        help="the larger Ray chunk measured (train_interval 64 over 16 envs gives 4)")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)

    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    started = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    print(f"local Ray started in {time.perf_counter() - started:.1f} s ({os.cpu_count()} CPUs); not counted below")
    try:
        if "throughput" in args.parts:
            throughput(args)
        if "broadcast" in args.parts:
            broadcast(args, ray)
        if "transfer" in args.parts:
            transfer(args, ray)
        if "learner" in args.parts:
            learner_rate(args)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
