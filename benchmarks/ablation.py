"""ablation: what each DQN-family component adds: plain DQN, each component alone, and all together.

Variants, all from one preset at equal steps (our DQN always uses double-DQN targets):
plain; dueling (`--dueling`); n-step (`--n-step 3`); prioritized (`--prioritized`); all three;
and QR-DQN (the `qrdqn` agent with the preset's settings, 50 quantiles).
Each variant runs with seeds 0, 1, 2 as an ordinary training run, two at a time with one torch
thread each. A finished run's summary and evaluation curve go to
`benchmarks/results/ablation/<preset>/<variant>-s<seed>.json`, and a run already there is never
repeated, so the ablation can be completed over several sittings. Afterwards (or with --report
alone) it writes a table to `docs/ablation.md` and the curves to `docs/images/ablation-<preset>.png`.

    python benchmarks/ablation.py [--preset dqn-lunarlander] [--seeds 0 1 2] [--jobs 2] [--report]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "ablation"
VARIANTS: dict[str, dict] = {
    # name: changes to the preset (agent, strategy, hyperparameters)
    "plain": {},
    "dueling": {"hyperparameters": {"dueling": True}},
    "n-step 3": {"strategy": {"n_step": 3}},
    "prioritized": {"strategy": {"prioritized": True}},
    "all": {"strategy": {"n_step": 3, "prioritized": True}, "hyperparameters": {"dueling": True}},
    "qr-dqn": {"agent": "qrdqn"},
}


def result_path(preset_name: str, variant: str, seed: int) -> Path:
    return RESULTS / preset_name / f"{variant.replace(' ', '-')}-s{seed}.json"


def run_one(preset_name: str, variant: str, seed: int) -> dict:
    """One training run; its summary and evaluation curve."""
    import offpolicy
    from offpolicy.events import EvaluationEnded
    from offpolicy.presets import preset

    values = preset(preset_name)
    changes = VARIANTS[variant]
    values["agent"] = changes.get("agent", values["agent"])
    values["strategy"].update(changes.get("strategy", {}))
    values["hyperparameters"].update(changes.get("hyperparameters", {}))
    values.update(seed=seed, torch_threads=1)
    curve: list[tuple[int, float]] = []

    def record(event, stats) -> None:
        if isinstance(event, EvaluationEnded):
            curve.append((event.step, event.mean_return))

    start = time.perf_counter()
    result = offpolicy.train(offpolicy.RunConfig(**values), save=False, quiet=True, callbacks=[record])
    return {
        "preset": preset_name,
        "variant": variant,
        "seed": seed,
        "steps": result.stats.step,
        "seconds": time.perf_counter() - start,
        "final_return": curve[-1][1] if curve else None,
        "best_return": result.stats.best_eval_return,
        "curve": curve,
    }


def run_missing(preset_name: str, seeds: list[int], jobs: int) -> None:
    missing = [(variant, seed) for seed in seeds for variant in VARIANTS
               if not result_path(preset_name, variant, seed).exists()]
    print(f"{len(missing)} run(s) to do for {preset_name}", flush=True)
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(run_one, preset_name, variant, seed): (variant, seed) for variant, seed in missing}
        for future in as_completed(futures):
            summary = future.result()
            path = result_path(preset_name, summary["variant"], summary["seed"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(summary, indent=1) + "\n")
            print(f"  {summary['variant']:<12} seed {summary['seed']}: final {summary['final_return']:.1f}, "
                  f"best {summary['best_return']:.1f}, {summary['seconds']:.0f} s", flush=True)


def load(preset_name: str) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
    for path in sorted((RESULTS / preset_name).glob("*.json")):
        summary = json.loads(path.read_text())
        found.setdefault(summary["variant"], []).append(summary)
    return found


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def last_quarter_mean(curve: list[list[float]]) -> float:
    """The mean evaluation return over the last quarter of the run: steadier than the last one alone."""
    tail = curve[-max(1, len(curve) // 4):]
    return statistics.mean(value for _, value in tail)


def report(preset_name: str, command: str) -> None:
    found = load(preset_name)
    lines = [
        "| variant | seeds | final evaluation | last quarter's evaluations | best evaluation | minutes per run |",
        "|---|---|---|---|---|---|",
    ]
    for variant, runs in found.items():
        if not runs:
            continue
        lines.append(
            f"| {variant} | {len(runs)} | {spread([r['final_return'] for r in runs])} "
            f"| {spread([last_quarter_mean(r['curve']) for r in runs])} "
            f"| {spread([r['best_return'] for r in runs])} "
            f"| {statistics.median(r['seconds'] for r in runs) / 60:.1f} |"
        )
    steps = next((r["steps"] for runs in found.values() for r in runs), 0)
    image = f"images/ablation-{preset_name}.png"
    text = "\n".join([
        f"## {preset_name}, {steps:,} steps",
        "",
        "Mean ± standard deviation over seeds of the evaluation return (deterministic episodes), with",
        "our DQN's double-DQN targets in every variant.",
        "",
        *lines,
        "",
        f"![evaluation curves]({image})",
        "",
        f"Produced by `{command}`.",
        "",
    ])
    doc = ROOT / "docs" / "ablation.md"
    header = "# DQN-family ablation\n\nWhat dueling heads, 3-step returns and prioritized replay each add to DQN, and how QR-DQN compares.\n\n"
    sections = doc.read_text().split("\n## ")[1:] if doc.exists() else []
    kept = ["## " + section.rstrip() + "\n" for section in sections if not section.startswith(f"{preset_name},")]
    doc.write_text(header + "\n".join(kept + [text]))
    plot(found, ROOT / "docs" / image, preset_name)
    print(text)


def plot(found: dict[str, list[dict]], path: Path, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        print("matplotlib missing: no curves (pip install -e .[plot])")
        return
    figure, axes = plt.subplots(figsize=(7, 4))
    for variant, runs in found.items():
        if not runs:
            continue
        steps = [step for step, _ in runs[0]["curve"]]
        length = min(len(r["curve"]) for r in runs)
        values = np.array([[value for _, value in r["curve"][:length]] for r in runs])
        mean = values.mean(0)
        axes.plot(steps[:length], mean, label=variant)
        if len(runs) > 1:
            axes.fill_between(steps[:length], values.min(0), values.max(0), alpha=0.15)
    axes.set_xlabel("environment steps")
    axes.set_ylabel("evaluation return")
    axes.set_title(f"{title}: mean over seeds, band from lowest to highest")
    axes.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="dqn-lunarlander")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one torch thread each")
    parser.add_argument("--report", action="store_true", help="only write the report from stored results")
    args = parser.parse_args()
    if not args.report:
        run_missing(args.preset, args.seeds, args.jobs)
    report(args.preset, f"python benchmarks/ablation.py --preset {args.preset} --seeds "
                        f"{' '.join(map(str, args.seeds))}")


if __name__ == "__main__":
    main()
