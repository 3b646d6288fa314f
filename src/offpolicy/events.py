"""Training and evaluation events, the metrics drawn from them, and where they go.

The strategy emits one event per collected chunk, per optimisation step and
per evaluation; sinks (the metrics log, the live display, user callbacks) turn
them into rows and lines. Per-step work is kept out of the hot path: train
outputs stay tensors until a phase is over, files are written buffered.

Metric files (JSON lines, one object per line, in `RUN_DIR/metrics/`):
- `train.jsonl`: `{"event": "episode", "step", "episode_return", "episode_length",
  "exploration_rate"}` per finished training episode, and `{"event": "update", "step",
  "loss", ...}` with the mean learner outputs of each training phase;
- `eval.jsonl`: `{"step", "mean_return", "std_return", "min_return", "max_return",
  "mean_length", "episodes"}` per evaluation.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Union

import torch

from offpolicy.interrupt import Interrupter
from offpolicy.policy import TrainOutput
from offpolicy.runners.core import TimeStep


@dataclass
class TrainingStarted:
    start_step: int
    total_steps: int


@dataclass
class StepsCollected:
    step: int
    """Progress after this chunk."""
    timesteps: list[TimeStep]


@dataclass
class TrainStep:
    step: int
    output: TrainOutput


@dataclass
class EvaluationStarted:
    step: int
    episodes: int


@dataclass
class EvaluationEnded:
    step: int
    returns: list[float]
    lengths: list[int]

    @property
    def mean_return(self) -> float:
        return sum(self.returns) / len(self.returns)


@dataclass
class TrainingEnded:
    step: int
    interrupted: str | None
    """The stop reason when the run ended before its total, else None."""


Event = Union[TrainingStarted, StepsCollected, TrainStep, EvaluationStarted, EvaluationEnded, TrainingEnded]


@dataclass
class RunStats:
    """What a person wants to know about a run right now; kept by the processor."""

    start_step: int = 0
    total_steps: int = 0
    step: int = 0
    episodes: int = 0
    recent_returns: deque = field(default_factory=lambda: deque(maxlen=20))
    exploration_rate: float | None = None
    last_outputs: dict[str, float] = field(default_factory=dict)
    """Mean learner outputs of the latest training phase (loss, ...)."""
    closed_phase: dict[str, float] | None = None
    """Set only while dispatching the first event after a training phase: that phase's means."""
    closed_phase_step: int = 0
    last_eval_return: float | None = None
    best_eval_return: float | None = None
    best_eval_step: int | None = None
    evaluations: int = 0
    train_steps: int = 0
    started_at: float = field(default_factory=time.perf_counter)

    COUNTERS = ("episodes", "train_steps", "evaluations", "last_eval_return", "best_eval_return", "best_eval_step")

    def counters(self) -> dict[str, Any]:
        """The running totals a checkpoint keeps, so a resumed run's summary counts the whole run."""
        return {name: getattr(self, name) for name in self.COUNTERS}

    def restore_counters(self, counters: dict[str, Any]) -> None:
        for name in self.COUNTERS:
            setattr(self, name, counters.get(name, getattr(self, name)))

    @property
    def steps_per_second(self) -> float:
        elapsed = time.perf_counter() - self.started_at
        return (self.step - self.start_step) / elapsed if elapsed > 0 else 0.0

    @property
    def recent_return(self) -> float | None:
        return sum(self.recent_returns) / len(self.recent_returns) if self.recent_returns else None

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started_at


class EventSink(Protocol):
    wants_train_steps: bool
    """False for sinks that ignore `TrainStep` events, which then skip them (one per update)."""

    def on_event(self, event: Event, stats: RunStats) -> None: ...


class EventProcessor:
    """Updates the run's stats from each event and passes it to every sink.

    A sink that raises stops training through the interrupter (with the error
    as reason) instead of crashing mid-phase.
    """

    def __init__(self, sinks: list[EventSink], interrupter: Interrupter | None = None) -> None:
        self.sinks = sinks
        self.interrupter = interrupter or Interrupter()
        self.stats = RunStats()
        self._phase_outputs: list[TrainOutput] = []

    def process_train(self, event: Event) -> None:
        self._dispatch(event)

    def process_valid(self, event: Event) -> None:
        self._dispatch(event)

    def _close_phase(self) -> None:
        """Average the learner outputs of the phase just ended, with one device sync."""
        outputs, self._phase_outputs = self._phase_outputs, []
        if outputs:
            names = list(outputs[0])
            means = torch.stack([torch.stack([o[n] for n in names]) for o in outputs]).float().mean(0)
            self.stats.closed_phase = dict(zip(names, means.tolist()))
            self.stats.closed_phase_step = self.stats.step
            self.stats.last_outputs = self.stats.closed_phase

    def _dispatch(self, event: Event) -> None:
        stats = self.stats
        stats.closed_phase = None
        if not isinstance(event, TrainStep):
            self._close_phase()
        if isinstance(event, TrainingStarted):
            stats.start_step = stats.step = event.start_step
            stats.total_steps = event.total_steps
            stats.started_at = time.perf_counter()
        elif isinstance(event, StepsCollected):
            stats.step = event.step
            for timestep in event.timesteps:
                if timestep.done:
                    stats.episodes += 1
                    stats.recent_returns.append(timestep.episode_return)
            if event.timesteps:
                stats.exploration_rate = event.timesteps[-1].context.get("exploration_rate")
        elif isinstance(event, TrainStep):
            stats.train_steps += 1
            self._phase_outputs.append(event.output)
        elif isinstance(event, EvaluationEnded):
            stats.evaluations += 1
            stats.last_eval_return = event.mean_return
            if stats.best_eval_return is None or event.mean_return > stats.best_eval_return:
                stats.best_eval_return = event.mean_return
                stats.best_eval_step = event.step
        is_train_step = isinstance(event, TrainStep)
        for sink in self.sinks:
            if is_train_step and not getattr(sink, "wants_train_steps", True):
                continue
            self.interrupter.fail_on_error(lambda: sink.on_event(event, stats))


class MetricsLog:
    """Appends the documented JSON-lines rows to `RUN_DIR/metrics/{train,eval}.jsonl`."""

    wants_train_steps = False

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._train = open(directory / "train.jsonl", "a", encoding="utf-8")
        self._eval = open(directory / "eval.jsonl", "a", encoding="utf-8")

    def on_event(self, event: Event, stats: RunStats) -> None:
        if stats.closed_phase is not None:
            row = {"event": "update", "step": stats.closed_phase_step, **stats.closed_phase}
            self._train.write(json.dumps(row) + "\n")
        if isinstance(event, StepsCollected):
            first_step = event.step - len(event.timesteps)
            for index, timestep in enumerate(event.timesteps):
                if timestep.done:
                    row = {
                        "event": "episode",
                        "step": first_step + index + 1,
                        "episode_return": timestep.episode_return,
                        "episode_length": timestep.episode_length,
                    }
                    row.update(timestep.context)
                    self._train.write(json.dumps(row) + "\n")
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


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def status_line(stats: RunStats) -> str:
    """One plain line: steps, speed, recent and evaluation returns, loss."""
    loss = stats.last_outputs.get("loss")
    exploration = "" if stats.exploration_rate is None else f" | epsilon {stats.exploration_rate:.2f}"
    return (
        f"step {stats.step:,}/{stats.total_steps:,} | {stats.steps_per_second:,.0f} steps/s"
        f" | return {_fmt(stats.recent_return)} | eval {_fmt(stats.last_eval_return)}"
        f" | loss {_fmt(loss, 4)}{exploration}"
    )


class ProgressDisplay:
    """Live progress: a rich bar in a terminal, one plain line per evaluation otherwise."""

    wants_train_steps = False

    def __init__(self, quiet: bool = False, stream: Any = None) -> None:
        self.quiet = quiet
        self.stream = stream or sys.stdout
        self.live = bool(getattr(self.stream, "isatty", lambda: False)()) and not quiet
        self._progress: Any = None
        self._task: Any = None
        self._last_refresh = 0.0

    def on_event(self, event: Event, stats: RunStats) -> None:
        if self.quiet:
            return
        if isinstance(event, TrainingStarted) and self.live:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("[bold]training"),
                BarColumn(bar_width=20),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                refresh_per_second=4,
            )
            self._task = self._progress.add_task(
                "train", total=event.total_steps, completed=event.start_step, status=""
            )
            self._progress.start()
        elif isinstance(event, StepsCollected) and self._progress is not None:
            now = time.perf_counter()
            if now - self._last_refresh > 0.25:
                self._last_refresh = now
                self._progress.update(self._task, completed=stats.step, status=status_line(stats).split(" | ", 1)[1])
        elif isinstance(event, EvaluationEnded):
            if self._progress is not None:
                self._progress.console.print(status_line(stats))
            else:
                print(status_line(stats), file=self.stream, flush=True)
        elif isinstance(event, TrainingEnded) and self._progress is not None:
            self._progress.update(self._task, completed=stats.step)
            self._progress.stop()
            self._progress = None


class CallbackSink:
    """Hands every event to a user function `callback(event, stats)`."""

    wants_train_steps = True

    def __init__(self, callback: Callable[[Event, RunStats], None]) -> None:
        self.callback = callback

    def on_event(self, event: Event, stats: RunStats) -> None:
        self.callback(event, stats)
