"""suite: the presets on the benchmarks people know, beside the peers' published figures.

A declared list of jobs (preset, steps, seeds), each run as an ordinary training
run, two at a time with one torch thread each. A finished run's summary and
evaluation curve go to `benchmarks/results/suite/<job>/s<seed>.json` and are
never repeated, so the suite can be completed over several sittings. The report
(written after every sitting, or alone with --report) goes to `docs/benchmarks.md`
with one curve plot per environment under `docs/images/`.

    python benchmarks/suite.py [--only JOB ...] [--seeds 0 1 2] [--jobs 2] [--report]
    # needs: pip install -e .[box2d,mujoco,plot]
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _runs import RESULTS, ROOT, last_quarter_mean, load, merged, plot_curves, run_missing, spread
from sb3_mujoco import table as sb3_table

SEEDS = (0, 1, 2)
CLEANRL_PLOTS = "CleanRL, read off its published curves"


@dataclass(frozen=True)
class Reference:
    """A peer's published figure for the same task and budget."""

    value: float
    source: str


@dataclass(frozen=True)
class Job:
    """One preset at one budget, run with every seed of `SEEDS`."""

    name: str
    preset: str
    steps: int
    reference: Reference | None = None
    changes: dict[str, Any] = field(default_factory=dict)

    def values(self, seed: int) -> dict[str, Any]:
        return dict(merged(self.preset, self.changes), num_steps=self.steps, seed=seed)

    def path(self, seed: int) -> Path:
        return RESULTS / "suite" / self.name / f"s{seed}.json"

    @property
    def env(self) -> str:
        return merged(self.preset, self.changes)["env"]

    @property
    def agent(self) -> str:
        return merged(self.preset, self.changes)["agent"]


RL_ZOO_CARTPOLE_DQN = Reference(500, "RL-Zoo's tuned DQN at 50k, one run")
"""The reference of both CartPole DQN jobs, from RL-Zoo's benchmark table."""

JOBS = [
    Job("dqn-cartpole-40k", "dqn-cartpole", 40_000, RL_ZOO_CARTPOLE_DQN),
    Job("seed-example-40k", "seed-example", 40_000, RL_ZOO_CARTPOLE_DQN),
    Job("qrdqn-cartpole-40k", "qrdqn-cartpole", 40_000, Reference(500, "RL-Zoo's tuned QR-DQN at 50k, one run")),
    Job("td3-pendulum-20k", "td3-pendulum", 20_000, Reference(-151.9, "RL-Zoo's tuned TD3, one run, ± 90")),
    Job("sac-pendulum-20k", "sac-pendulum", 20_000, Reference(-157.0, "RL-Zoo's tuned SAC, one run, ± 89")),
    Job("dqn-lunarlander-100k", "dqn-lunarlander", 100_000,
        Reference(154, "RL-Zoo's tuned DQN, ± 79")),
    Job("dqn-lunarlander-combined-100k", "dqn-lunarlander-combined", 100_000,
        Reference(154, "RL-Zoo's tuned DQN, ± 79")),
    Job("sac-lunarlandercontinuous-100k", "sac-lunarlander", 100_000),
    Job("dqn-acrobot-500k", "dqn-acrobot", 500_000, Reference(-91.5, "CleanRL's DQN")),
    Job("dqn-mountaincar-120k", "dqn-mountaincar", 120_000, Reference(-100.8, "RL-Zoo's tuned DQN, one run, ± 10")),
    Job("sac-halfcheetah-100k", "sac-halfcheetah", 100_000, Reference(5_500, CLEANRL_PLOTS)),
    Job("sac-hopper-100k", "sac-hopper", 100_000, Reference(1_450, CLEANRL_PLOTS)),
    Job("sac-walker2d-100k", "sac-walker2d", 100_000, Reference(550, CLEANRL_PLOTS)),
    Job("td3-halfcheetah-100k", "td3-halfcheetah", 100_000, Reference(4_000, CLEANRL_PLOTS)),
    Job("td3-hopper-100k", "td3-hopper", 100_000, Reference(280, CLEANRL_PLOTS)),
    Job("td3-walker2d-100k", "td3-walker2d", 100_000, Reference(300, CLEANRL_PLOTS)),
    Job("sac-lunarlandercontinuous-500k", "sac-lunarlander", 500_000,
        Reference(260.4, "RL-Zoo's tuned SAC, one run, ± 65")),
]
"""Cheapest first, so that a short sitting finishes whole jobs."""


def against(final: float, reference: float) -> float:
    """How a mean final return compares with the reference, above 1 where it is better: final / reference for
    positive returns, reference / final where both are negative (costs, as on Pendulum or Acrobot)."""
    return reference / final if final < 0 and reference < 0 else final / reference


def report(jobs: list[Job]) -> str:
    lines = [
        "| job | agent | env | steps | seeds | final evaluation | last quarter's evaluations | reference | "
        "against the reference | minutes per run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_env: dict[str, list[Job]] = {}
    for job in jobs:
        by_env.setdefault(job.env, []).append(job)
        done = load([job.path(seed) for seed in SEEDS])
        finals = [run["final_return"] for run in done]
        reference = f"{job.reference.value:,} ({job.reference.source})" if job.reference else "-"
        ratio = "-"
        if job.reference and finals:
            ratio = f"{against(statistics.mean(finals), job.reference.value):.2f}"
        minutes = "-"
        if done:
            median = statistics.median(run["seconds"] for run in done) / 60
            minutes = f"{median:.1f}" if median < 10 else f"{median:.0f}"
        lines.append(f"| {job.name} | {job.agent} | {job.env} | {job.steps:,} | {len(done)} of {len(SEEDS)} "
                     f"| {spread(finals)} | {spread([last_quarter_mean(run['curve']) for run in done])} "
                     f"| {reference} | {ratio} | {minutes} |")
    images = []
    for env, env_jobs in by_env.items():
        series = {job.name: load([job.path(seed) for seed in SEEDS]) for job in env_jobs}
        if not any(series.values()):
            continue
        markers = {f"{job.agent}: {job.reference.source}": (job.steps, job.reference.value)
                   for job in env_jobs if job.reference}
        image = f"images/suite-{env.lower()}.png"
        plot_curves(series, ROOT / "docs" / image, f"{env}: mean over seeds, band from lowest to highest",
                    markers)
        images.append(f"![{env}]({image})")
    text = "\n".join([
        "# Benchmarks",
        "",
        "Each job is a preset run as an ordinary `offpolicy train` run, seeds 0, 1 and 2, one torch thread,",
        "evaluated with deterministic actions. Mean ± standard deviation over seeds; \"final\" is the last",
        "evaluation of the run, \"last quarter\" the mean of the evaluations in its last quarter. References are",
        "the peers' published figures at the same budget; \"against the reference\" is final / reference, or",
        "reference / final where both are negative, so that above 1 is better. A job with fewer than three",
        "seeds is still running over sittings.",
        "",
        *lines,
        "",
        *images,
        "",
        "Produced by `python benchmarks/suite.py` (resumable; `--report` rewrites this page from the stored",
        "results in `benchmarks/results/suite/`).",
        "",
        *sb3_table(),
    ])
    (ROOT / "docs" / "benchmarks.md").write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="JOB", choices=[job.name for job in JOBS],
                        help="run just these jobs (the report covers all)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), choices=SEEDS,
                        help="run just these seeds (a long job split over sittings)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one torch thread each")
    parser.add_argument("--report", action="store_true", help="only write the report from stored results")
    args = parser.parse_args()
    if not args.report:
        chosen = [job for job in JOBS if not args.only or job.name in args.only]
        run_missing([(job.path(seed), job.values(seed), {"job": job.name}) for job in chosen for seed in args.seeds],
                    args.jobs)
    print(report(JOBS))


if __name__ == "__main__":
    main()
