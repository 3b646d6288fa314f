"""Where events go: the metrics log (JSON lines), TensorBoard, and user callbacks.

Metric files (JSON lines, one object per line, in `RUN_DIR/metrics/`):
- `train.jsonl`: `{"event": "episode", "step", "episode_return", "episode_length",
  "exploration_rate"}` per finished training episode (with `"is_success"` for envs that
  report it), `{"event": "update", "step",
  "loss", ...}` with the mean learner outputs of each training phase, and
  `{"event": "env_restart", "step", "restarts", "error"}` when envs were recreated;
- `eval.jsonl`: `{"step", "mean_return", "std_return", "min_return", "max_return",
  "mean_length", "episodes"}` per evaluation, and `"success_rate"` for envs that report
  `is_success` (goal-conditioned ones).

Files are written buffered and flushed at each evaluation, restart and at the end.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from offpolicy.events import (
    EnvsRestarted,
    Event,
    EvaluationEnded,
    RunStats,
    StepsCollected,
    TrainingEnded,
    TrainingPhaseEnded,
)


class MetricsLog:
    """Appends the documented JSON-lines rows to `RUN_DIR/metrics/{train,eval}.jsonl`."""

    wants_train_steps = False

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._train = open(directory / "train.jsonl", "a", encoding="utf-8")
        self._eval = open(directory / "eval.jsonl", "a", encoding="utf-8")

    def on_event(self, event: Event, stats: RunStats) -> None:
        if isinstance(event, TrainingPhaseEnded):
            self._train.write(json.dumps({"event": "update", "step": event.step, **event.metrics}) + "\n")
        elif isinstance(event, StepsCollected):
            rows, run_steps = event.finished_episodes
            if len(rows):
                steps = event.steps
                columns = {
                    "step": run_steps.tolist(),
                    "episode_return": steps.episode_returns[rows].tolist(),
                    "episode_length": steps.episode_lengths[rows].tolist(),
                    **{key: values[rows].tolist() for key, values in steps.context.items()},
                }
                ended = steps.successes[rows]
                if not np.isnan(ended).all():
                    columns["is_success"] = [None if math.isnan(value) else bool(value) for value in ended.tolist()]
                for values in zip(*columns.values()):
                    self._train.write(json.dumps({"event": "episode", **dict(zip(columns, values))}) + "\n")
        elif isinstance(event, EnvsRestarted):
            row = {"event": "env_restart", "step": event.step, "restarts": event.restarts, "error": event.error}
            self._train.write(json.dumps(row) + "\n")
            self.flush()
        elif isinstance(event, EvaluationEnded):
            returns = event.returns
            mean = event.mean_return
            row = {
                "step": event.step,
                "mean_return": mean,
                "std_return": math.sqrt(sum((r - mean) ** 2 for r in returns) / len(returns)),
                "min_return": min(returns),
                "max_return": max(returns),
                "mean_length": sum(event.lengths) / len(event.lengths),
                "episodes": len(returns),
            }
            if event.success_rate is not None:
                row["success_rate"] = event.success_rate
            self._eval.write(json.dumps(row) + "\n")
            self.flush()
        elif isinstance(event, TrainingEnded):
            self.close()

    def flush(self) -> None:
        self._train.flush()
        self._eval.flush()

    def close(self) -> None:
        if not self._train.closed:
            self._train.close()
            self._eval.close()


class TensorBoardLog:
    """Writes the same metrics as TensorBoard scalars to `RUN_DIR/tensorboard/`, under the usual names.

    `rollout/ep_return`, `rollout/ep_length`, `rollout/exploration_rate` (and
    `rollout/success`) per training episode, `train/<output>` (loss, q_values, ...)
    per training phase, `eval/mean_return`, `eval/std_return`, `eval/mean_length`
    (and `eval/success_rate`) per evaluation and `time/steps_per_second`; the x
    axis is the environment step. The success entries appear for envs that
    report `is_success`.
    """

    wants_train_steps = False

    def __init__(self, directory: Path, resumed_at: int | None = None) -> None:
        """`resumed_at` drops events a killed run logged after its last checkpoint, as the JSON logs do."""
        self._writer = tensorboard_writer_class()(log_dir=str(directory), purge_step=resumed_at)

    def on_event(self, event: Event, stats: RunStats) -> None:
        scalar = self._writer.add_scalar
        if isinstance(event, TrainingPhaseEnded):
            for name, value in event.metrics.items():
                scalar(f"train/{name}", value, event.step)
        elif isinstance(event, StepsCollected):
            rows, run_steps = event.finished_episodes
            steps = event.steps
            for row, step in zip(rows.tolist(), run_steps.tolist()):
                scalar("rollout/ep_return", steps.episode_returns[row], step)
                scalar("rollout/ep_length", steps.episode_lengths[row], step)
                if "exploration_rate" in steps.context:
                    scalar("rollout/exploration_rate", steps.context["exploration_rate"][row], step)
                if not math.isnan(steps.successes[row]):
                    scalar("rollout/success", steps.successes[row], step)
        elif isinstance(event, EnvsRestarted):
            scalar("rollout/env_restarts", event.restarts, event.step)
        elif isinstance(event, EvaluationEnded):
            returns = event.returns
            scalar("eval/mean_return", event.mean_return, event.step)
            scalar("eval/std_return", float(torch.tensor(returns, dtype=torch.float64).std(unbiased=False)), event.step)
            scalar("eval/mean_length", sum(event.lengths) / len(event.lengths), event.step)
            if event.success_rate is not None:
                scalar("eval/success_rate", event.success_rate, event.step)
            scalar("time/steps_per_second", stats.steps_per_second, event.step)
            self._writer.flush()
        elif isinstance(event, TrainingEnded):
            self._writer.close()


def tensorboard_writer_class() -> Any:
    """TensorBoard's writer class, or a clear error naming the extra to install."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        from offpolicy.config import ConfigError

        raise ConfigError("TensorBoard logging needs the tensorboard package: pip install 'offpolicy[tensorboard]'") from None
    return SummaryWriter


class CallbackSink:
    """Hands every event to a user function `callback(event, stats)`."""

    wants_train_steps = True

    def __init__(self, callback: Callable[[Event, RunStats], None]) -> None:
        self.callback = callback

    def on_event(self, event: Event, stats: RunStats) -> None:
        self.callback(event, stats)
