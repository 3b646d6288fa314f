"""sb3_mujoco: SAC and TD3 on HalfCheetah-v5 for 100k steps, ours beside Stable-Baselines3 at equal settings.

Each agent runs its offpolicy preset (`sac-halfcheetah`: RL-Zoo's SAC; `td3-halfcheetah`: CleanRL's TD3)
and SB3's SAC or TD3 given the same values: one env, one update of 256 per step, 1M buffer, 256x256
networks, tau 0.005, gamma 0.99, the same learning rates and learning start, TD3's noises and delay.
Every run has one torch thread and runs beside one other run (two at a time), and runs no evaluation
while it trains; its policy is then evaluated on 10 deterministic episodes (seeds 10,000-10,009, the
same for both libraries). Runs go seed by seed, ours and SB3's together, so that both sides of a seed run
in the same sitting: the machine's speed differs by up to a fifth between sittings, so re-measure a seed
by deleting both of its files. Each finished run is stored in `benchmarks/results/sb3_mujoco/` and never repeated, so the
comparison can be completed over several sittings; `python benchmarks/suite.py --report` puts the table
into `docs/benchmarks.md`.

    python benchmarks/sb3_mujoco.py [--agents sac td3] [--seeds 0 1 2] [--jobs 2]   # needs: .[bench,mujoco]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from _common import evaluate
from _runs import RESULTS, load, merged, run_missing, spread

ENV = "HalfCheetah-v5"
STEPS = 100_000
EVAL_EPISODES = 10
SYSTEMS = ("offpolicy", "sb3")
PRESETS = {"sac": "sac-halfcheetah", "td3": "td3-halfcheetah"}


def path(agent: str, system: str, seed: int):
    return RESULTS / "sb3_mujoco" / f"{agent}-{system}-s{seed}.json"


def settings(agent: str, seed: int) -> dict[str, Any]:
    """The preset's RunConfig fields for this comparison: no evaluation while training."""
    values = dict(merged(PRESETS[agent], {}), num_steps=STEPS, seed=seed)
    values["strategy"]["eval_interval"] = STEPS * 10
    return values


def run_offpolicy(values: dict[str, Any]) -> tuple[float, Any]:
    import offpolicy

    start = time.perf_counter()
    result = offpolicy.train(offpolicy.RunConfig(**dict(values, torch_threads=1)), save=False, quiet=True)
    return time.perf_counter() - start, result.policy.predict


def run_sb3(agent: str, values: dict[str, Any]) -> tuple[float, Any]:
    import numpy as np
    import torch
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise

    torch.set_num_threads(1)
    strategy, hyper = values["strategy"], dict(values["hyperparameters"])
    common = dict(
        buffer_size=strategy["replay_buffer_size"], batch_size=strategy["train_batch_size"],
        learning_starts=strategy["warmup_steps"], train_freq=strategy["train_interval"],
        gradient_steps=strategy["train_steps"], seed=values["seed"], device="cpu", verbose=0,
        policy_kwargs={"net_arch": [256, 256]},
    )
    if agent == "sac":
        model = SAC("MlpPolicy", ENV, learning_rate=hyper.get("lr", 3e-4), **common)
    else:
        noise = NormalActionNoise(np.zeros(6), np.full(6, 0.1))
        model = TD3("MlpPolicy", ENV, learning_rate=hyper.get("lr", 1e-3), action_noise=noise, policy_delay=2,
                    target_policy_noise=0.2, target_noise_clip=0.5, **common)
    start = time.perf_counter()
    model.learn(values["num_steps"])
    return time.perf_counter() - start, lambda obs: model.predict(obs, deterministic=True)[0]


def run_pair_member(values: dict[str, Any], labels: dict[str, Any]) -> dict[str, Any]:
    """One library's run (labels name it), timed, then evaluated outside the timing."""
    if labels["system"] == "offpolicy":
        seconds, act = run_offpolicy(values)
    else:
        seconds, act = run_sb3(labels["agent"], values)
    return {**labels, "seed": values["seed"], "seconds": seconds, "final_return": evaluate(ENV, act, EVAL_EPISODES)}


def table() -> list[str]:
    """The comparison's rows for docs/benchmarks.md (empty before any run)."""
    rows = []
    for agent in PRESETS:
        runs = {system: load([path(agent, system, seed) for seed in range(10)]) for system in SYSTEMS}
        seeds = sorted({run["seed"] for run in runs["offpolicy"]} & {run["seed"] for run in runs["sb3"]})
        if not seeds:
            continue
        paired = {system: [run for run in runs[system] if run["seed"] in seeds] for system in SYSTEMS}
        returns = {system: [run["final_return"] for run in paired[system]] for system in SYSTEMS}
        seconds = {system: {run["seed"]: run["seconds"] for run in paired[system]} for system in SYSTEMS}
        minutes = {system: statistics.median(seconds[system].values()) / 60 for system in SYSTEMS}
        ratios = [seconds["offpolicy"][seed] / seconds["sb3"][seed] for seed in seeds]
        rows.append(f"| {agent} | {len(seeds)} | {spread(returns['offpolicy'])} | {spread(returns['sb3'])} "
                    f"| {minutes['offpolicy']:.1f} | {minutes['sb3']:.1f} "
                    f"| {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")
    if not rows:
        return []
    return [
        f"## Beside Stable-Baselines3 on {ENV}",
        "",
        f"The same settings and budget ({STEPS:,} steps, the preset's values given to SB3's agent), one torch",
        "thread each, two runs at a time, no evaluation while training; the final policy is evaluated on 10",
        "deterministic episodes. Each seed's two runs share a sitting, and sittings can fall on machines of",
        "different speed, so the wall-clock ratio is the median of the seeds' own ratios (lowest-highest).",
        "Produced by `python benchmarks/sb3_mujoco.py`.",
        "",
        "| agent | seeds | offpolicy return | SB3 return | offpolicy minutes (median) | SB3 minutes (median) "
        "| wall-clock ratio |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", choices=list(PRESETS), default=list(PRESETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one torch thread each")
    args = parser.parse_args()
    runs = [(path(agent, system, seed), settings(agent, seed), {"agent": agent, "system": system})
            for seed in args.seeds for agent in args.agents for system in SYSTEMS]
    run_missing(runs, args.jobs, runner=run_pair_member)
    print("\n".join(table()))


if __name__ == "__main__":
    main()
