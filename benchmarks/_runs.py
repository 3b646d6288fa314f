"""Resumable learning runs for the benchmark suite and the ablation: run, store, summarise, plot.

A run is an ordinary training run from a preset with some changes, one torch
thread, evaluation curve recorded. Each finished run's summary is written to its
own JSON file, and a run whose file exists is never repeated, so a long set of
runs can be completed over several sittings, two at a time.
"""

from __future__ import annotations

import copy
import json
import multiprocessing as mp
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def merged(preset_name: str, changes: dict[str, Any]) -> dict[str, Any]:
    """The preset's settings with `changes` applied (`strategy` and `hyperparameters` merged key by key)."""
    from offpolicy.presets import preset

    values = preset(preset_name)
    for key, value in copy.deepcopy(changes).items():
        if key in ("strategy", "hyperparameters"):
            values[key].update(value)
        else:
            values[key] = value
    return values


def run_one(values: dict[str, Any], labels: dict[str, Any]) -> dict[str, Any]:
    """One training run of `values` (RunConfig fields) with one torch thread; its summary, with `labels`."""
    import offpolicy
    from offpolicy.events import EvaluationEnded

    curve: list[tuple[int, float]] = []

    def record(event, stats) -> None:
        if isinstance(event, EvaluationEnded):
            curve.append((event.step, event.mean_return))

    start = time.perf_counter()
    result = offpolicy.train(offpolicy.RunConfig(**dict(values, torch_threads=1)), save=False, quiet=True,
                             callbacks=[record])
    return {
        **labels,
        "seed": values["seed"],
        "steps": result.stats.step,
        "seconds": time.perf_counter() - start,
        "final_return": curve[-1][1] if curve else None,
        "best_return": result.stats.best_eval_return,
        "curve": curve,
    }


def run_missing(runs: list[tuple[Path, dict[str, Any], dict[str, Any]]], jobs: int,
                runner: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] = run_one) -> None:
    """Run each (result path, RunConfig fields, labels) whose result file does not exist yet with `runner`,
    `jobs` at once, writing each summary as soon as its run finishes."""
    missing = [run for run in runs if not run[0].exists()]
    print(f"{len(missing)} of {len(runs)} run(s) to do", flush=True)
    if not missing:
        return
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(runner, values, labels): path for path, values, labels in missing}
        for future in as_completed(futures):
            summary, path = future.result(), futures[future]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(summary, indent=1) + "\n")
            best = f"best {summary['best_return']:.1f}, " if "best_return" in summary else ""
            print(f"  {path.relative_to(RESULTS)}: final {summary['final_return']:.1f}, {best}"
                  f"{summary['seconds'] / 60:.1f} min", flush=True)


def load(paths: list[Path]) -> list[dict[str, Any]]:
    """The stored summaries among `paths`."""
    return [json.loads(path.read_text()) for path in paths if path.exists()]


def spread(values: list[float]) -> str:
    """Mean ± standard deviation (the value alone for one run, '-' for none)."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def last_quarter_mean(curve: list[list[float]]) -> float:
    """The mean evaluation return over the last quarter of the run: steadier than the last one alone."""
    tail = curve[-max(1, len(curve) // 4):]
    return statistics.mean(value for _, value in tail)


def plot_curves(series: dict[str, list[dict[str, Any]]], path: Path, title: str,
                markers: dict[str, tuple[int, float]] | None = None, marker_label: str = "reference") -> None:
    """Mean evaluation curve over seeds per label, a band from lowest to highest; `markers` (label: (step,
    return)) are reference figures drawn as points: one keyed by a series' label in that series' colour
    (all of those under one legend entry, `marker_label`), any other under its own label."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        print("matplotlib missing: no curves (pip install -e .[plot])")
        return
    figure, axes = plt.subplots(figsize=(7, 4))
    colours: dict[str, str] = {}
    for label, runs in series.items():
        if not runs:
            continue
        length = min(len(run["curve"]) for run in runs)
        steps = [step for step, _ in runs[0]["curve"][:length]]
        values = np.array([[value for _, value in run["curve"][:length]] for run in runs])
        line, = axes.plot(steps, values.mean(0), label=f"{label} ({len(runs)} seed{'s' if len(runs) > 1 else ''})")
        colours[label] = line.get_color()
        if len(runs) > 1:
            axes.fill_between(steps, values.min(0), values.max(0), alpha=0.15, color=line.get_color())
    shared_legend = False
    for label, (step, value) in (markers or {}).items():
        if label in colours:
            axes.plot([step], [value], marker="*", markersize=12, linestyle="none", color=colours[label],
                      label="_nolegend_" if shared_legend else marker_label)
            shared_legend = True
        else:
            axes.plot([step], [value], marker="*", markersize=12, linestyle="none", label=label)
    axes.set_xlabel("environment steps")
    axes.set_ylabel("evaluation return")
    axes.set_title(title)
    axes.legend(fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
