"""Learning curves from run directories: `offpolicy plot RUN_DIR ... -o curves.png`.

Runs that share a config except the seed form one group, drawn as the mean
across seeds with the min-max spread shaded; a group of one run is a plain
line. The left panel is the training episode return (a moving average over
episodes), the right one the evaluation return, both against environment steps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from offpolicy.config import ConfigError

SMOOTHING_EPISODES = 20
GRID_POINTS = 200


@dataclass
class RunCurves:
    run_dir: Path
    config: dict[str, Any]
    train_steps: np.ndarray
    train_returns: np.ndarray
    """Moving average of episode returns over the last `SMOOTHING_EPISODES` episodes."""
    eval_steps: np.ndarray
    eval_returns: np.ndarray


def expand_run_dirs(paths: Sequence[Path]) -> list[Path]:
    """Run directories among `paths`; a folder of runs (e.g. from `--seeds`) stands for all of them."""
    runs: list[Path] = []
    for path in map(Path, paths):
        if (path / "config.json").is_file():
            runs.append(path)
            continue
        children = sorted(child for child in path.glob("*") if (child / "config.json").is_file())
        if not children:
            raise ConfigError(f"{path} is not a run directory and holds none")
        runs.extend(children)
    return runs


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a row cut short by a killed run
    return rows


def load_curves(run_dir: Path) -> RunCurves:
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    episodes = [row for row in _rows(run_dir / "metrics" / "train.jsonl") if row.get("event") == "episode"]
    returns = np.array([row["episode_return"] for row in episodes], dtype=np.float64)
    window = np.ones(SMOOTHING_EPISODES)
    counts = np.convolve(np.ones_like(returns), window)[: len(returns)]
    smoothed = np.convolve(returns, window)[: len(returns)] / np.maximum(counts, 1)
    evaluations = _rows(run_dir / "metrics" / "eval.jsonl")
    return RunCurves(
        run_dir,
        config,
        np.array([row["step"] for row in episodes], dtype=np.float64),
        smoothed,
        np.array([row["step"] for row in evaluations], dtype=np.float64),
        np.array([row["mean_return"] for row in evaluations], dtype=np.float64),
    )


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def group_runs(runs: list[RunCurves]) -> dict[str, list[RunCurves]]:
    """Runs with the same config apart from the seed, labelled by agent, env and what sets groups apart."""
    groups: dict[str, list[RunCurves]] = {}
    keys: dict[str, dict[str, Any]] = {}
    for run in runs:
        key_config = {k: v for k, v in _flatten(run.config).items() if k != "seed"}
        key = json.dumps(key_config, sort_keys=True)
        groups.setdefault(key, []).append(run)
        keys[key] = key_config
    differing = sorted(
        name for name in set().union(*keys.values()) if len({json.dumps(k.get(name)) for k in keys.values()}) > 1
    )
    labelled = {}
    for key, members in groups.items():
        config = keys[key]
        label = f"{config['agent']} {config['env']}"
        extra = [f"{name.rsplit('.', 1)[-1]}={config.get(name)}" for name in differing if name not in ("agent", "env")]
        if extra:
            label += " (" + ", ".join(extra) + ")"
        seeds = sorted(run.config.get("seed", 0) for run in members)
        label += f", {len(members)} seeds" if len(members) > 1 else f", seed {seeds[0]}"
        labelled[label] = members
    return labelled


def _band(axis: Any, curves: list[tuple[np.ndarray, np.ndarray]], label: str, color: Any) -> None:
    curves = [(x, y) for x, y in curves if len(x)]
    if not curves:
        return
    if len(curves) == 1:
        axis.plot(*curves[0], label=label, color=color)
        return
    end = min(x[-1] for x, _ in curves)
    start = max(x[0] for x, _ in curves)
    grid = np.linspace(start, end, GRID_POINTS)
    values = np.stack([np.interp(grid, x, y) for x, y in curves])
    axis.plot(grid, values.mean(0), label=label, color=color)
    axis.fill_between(grid, values.min(0), values.max(0), color=color, alpha=0.2, linewidth=0)


def plot_runs(paths: Sequence[Path], output: Path, title: str | None = None) -> Path:
    """Draw training and evaluation return against steps for the runs in `paths` into `output`."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'offpolicy[plot]'") from None
    runs = [load_curves(path) for path in expand_run_dirs(paths)]
    figure, (train_axis, eval_axis) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (label, members) in enumerate(group_runs(runs).items()):
        color = colors[index % len(colors)]
        _band(train_axis, [(r.train_steps, r.train_returns) for r in members], label, color)
        _band(eval_axis, [(r.eval_steps, r.eval_returns) for r in members], label, color)
    train_axis.set_title(f"training episode return (mean of last {SMOOTHING_EPISODES})")
    eval_axis.set_title("evaluation return (deterministic)")
    for axis in (train_axis, eval_axis):
        axis.set_xlabel("environment steps")
        axis.grid(alpha=0.3)
    train_axis.set_ylabel("return")
    eval_axis.legend(loc="lower right", fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=120)
    plt.close(figure)
    return output
