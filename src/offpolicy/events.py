"""Training and evaluation events, the metrics drawn from them, and where they go.

The strategy emits one event per collected chunk, per optimisation step and
per evaluation; sinks (the metrics log, the live display, user callbacks) turn
them into rows and lines. Per-step work is kept out of the hot path: train
outputs stay tensors until a phase is over, files are written buffered.

Metric files (JSON lines, one object per line, in `RUN_DIR/metrics/`):
- `train.jsonl`: `{"event": "episode", "step", "episode_return", "episode_length",
  "exploration_rate"}` per finished training episode, `{"event": "update", "step",
  "loss", ...}` with the mean learner outputs of each training phase, and
  `{"event": "env_restart", "step", "restarts", "error"}` when envs were recreated;
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
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, Union

import numpy as np
import torch

from offpolicy.interrupt import Interrupter
from offpolicy.policy import TrainMetrics
from offpolicy.runners.core import StepBatch


@dataclass
class TrainingStarted:
    start_step: int
    total_steps: int


@dataclass
class StepsCollected:
    step: int
    """Progress after this chunk."""
    steps: StepBatch
    """The chunk's steps; the last one is environment step `step` of the run."""

    @cached_property
    def finished_episodes(self) -> tuple[np.ndarray, np.ndarray]:
        """Row indices of the steps that ended an episode, and the run's step number of each
        (computed once, whichever sink asks first)."""
        rows = np.flatnonzero(self.steps.done)
        return rows, rows + (self.step - len(self.steps) + 1)


@dataclass
class EnvsRestarted:
    """The training envs failed and were recreated (`on_env_error="restart"`); the run goes on."""

    step: int
    restarts: int
    """Restarts so far in this run, this one included."""
    error: str


@dataclass
class TrainStep:
    step: int
    output: TrainMetrics


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


Event = Union[
    TrainingStarted, StepsCollected, EnvsRestarted, TrainStep, EvaluationStarted, EvaluationEnded, TrainingEnded
]


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
    env_restarts: int = 0
    started_at: float = field(default_factory=time.perf_counter)

    COUNTERS = ("episodes", "train_steps", "evaluations", "env_restarts", "last_eval_return", "best_eval_return",
                "best_eval_step")

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
        self._phase_outputs: list[TrainMetrics] = []

    def process_train(self, event: Event) -> None:
        self._dispatch(event)

    def process_valid(self, event: Event) -> None:
        self._dispatch(event)

    def _close_phase(self) -> None:
        """Average the learner outputs of the phase just ended, with one device sync."""
        outputs, self._phase_outputs = self._phase_outputs, []
        if outputs:
            self.stats.closed_phase = phase_means(outputs)
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
            rows, _ = event.finished_episodes
            stats.episodes += len(rows)
            stats.recent_returns.extend(event.steps.episode_returns[rows].tolist())
            rate = event.steps.context.get("exploration_rate")
            if rate is not None and len(rate):
                stats.exploration_rate = float(rate[-1])
        elif isinstance(event, EnvsRestarted):
            stats.env_restarts = event.restarts
        elif isinstance(event, TrainStep):
            stats.train_steps += 1
            self._phase_outputs.append(event.output)
        elif isinstance(event, EvaluationEnded):
            stats.evaluations += 1
            stats.last_eval_return = event.mean_return
            if stats.best_eval_return is None or event.mean_return >= stats.best_eval_return:  # ties: the later, as the checkpointer
                stats.best_eval_return = event.mean_return
                stats.best_eval_step = event.step
        is_train_step = isinstance(event, TrainStep)
        for sink in self.sinks:
            if is_train_step and not getattr(sink, "wants_train_steps", True):
                continue
            self.interrupter.fail_on_error(lambda: sink.on_event(event, stats))


def phase_means(outputs: list[TrainMetrics]) -> dict[str, float]:
    """Each metric's mean over the updates that reported it (TD3 reports `actor_loss` on delayed updates
    only), read with one device sync."""
    names = [name for output in outputs for name in output]
    values = torch.stack([value for output in outputs for value in output.values()]).float().tolist()
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for name, value in zip(names, values):
        sums[name] = sums.get(name, 0.0) + value
        counts[name] = counts.get(name, 0) + 1
    return {name: sums[name] / counts[name] for name in sums}


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
            rows, run_steps = event.finished_episodes
            if len(rows):
                steps = event.steps
                columns = {
                    "step": run_steps.tolist(),
                    "episode_return": steps.episode_returns[rows].tolist(),
                    "episode_length": steps.episode_lengths[rows].tolist(),
                    **{key: values[rows].tolist() for key, values in steps.context.items()},
                }
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

    `rollout/ep_return`, `rollout/ep_length` and `rollout/exploration_rate` per
    training episode, `train/<output>` (loss, q_values, ...) per training phase,
    `eval/mean_return`, `eval/std_return`, `eval/mean_length` per evaluation and
    `time/steps_per_second`; the x axis is the environment step.
    """

    wants_train_steps = False

    def __init__(self, directory: Path, resumed_at: int | None = None) -> None:
        """`resumed_at` drops events a killed run logged after its last checkpoint, as the JSON logs do."""
        self._writer = tensorboard_writer_class()(log_dir=str(directory), purge_step=resumed_at)

    def on_event(self, event: Event, stats: RunStats) -> None:
        scalar = self._writer.add_scalar
        if stats.closed_phase is not None:
            for name, value in stats.closed_phase.items():
                scalar(f"train/{name}", value, stats.closed_phase_step)
        if isinstance(event, StepsCollected):
            rows, run_steps = event.finished_episodes
            steps = event.steps
            for row, step in zip(rows.tolist(), run_steps.tolist()):
                scalar("rollout/ep_return", steps.episode_returns[row], step)
                scalar("rollout/ep_length", steps.episode_lengths[row], step)
                if "exploration_rate" in steps.context:
                    scalar("rollout/exploration_rate", steps.context["exploration_rate"][row], step)
        elif isinstance(event, EnvsRestarted):
            scalar("rollout/env_restarts", event.restarts, event.step)
        elif isinstance(event, EvaluationEnded):
            returns = event.returns
            scalar("eval/mean_return", event.mean_return, event.step)
            scalar("eval/std_return", float(torch.tensor(returns, dtype=torch.float64).std(unbiased=False)), event.step)
            scalar("eval/mean_length", sum(event.lengths) / len(event.lengths), event.step)
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


SPARK_BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 40) -> str:
    """The last `width` values as a row of block characters, lowest to highest."""
    values = list(values)[-width:]
    if not values:
        return ""
    low, high = min(values), max(values)
    if high - low < 1e-12:
        return SPARK_BLOCKS[len(SPARK_BLOCKS) // 2] * len(values)
    scale = (len(SPARK_BLOCKS) - 1) / (high - low)
    return "".join(SPARK_BLOCKS[round((value - low) * scale)] for value in values)


class ProgressDisplay:
    """Live progress: a dashboard in a terminal, one plain line per evaluation otherwise.

    The dashboard is a progress bar (steps, speed, time left), a table of the
    latest training and evaluation metrics, and sparklines of recent episode
    returns and of every evaluation. It is redrawn from the trainer's thread at
    most four times a second, so it costs nothing between redraws. Without a
    terminal (CI, a log file) there are no control characters, only lines.
    """

    wants_train_steps = False
    REFRESH_S = 0.25

    def __init__(self, quiet: bool = False, stream: Any = None, live: bool | None = None) -> None:
        self.quiet = quiet
        self.stream = stream or sys.stdout
        is_terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.live = (is_terminal if live is None else live) and not quiet
        self._live: Any = None
        self._progress: Any = None
        self._task: Any = None
        self._last_refresh = 0.0
        self._episode_returns: deque[float] = deque(maxlen=60)
        self._eval_returns: list[float] = []

    def on_event(self, event: Event, stats: RunStats) -> None:
        if self.quiet:
            return
        if isinstance(event, StepsCollected):
            self._episode_returns.extend(event.steps.episode_returns[event.finished_episodes[0]].tolist())
        elif isinstance(event, EvaluationEnded):
            self._eval_returns.append(event.mean_return)
        if isinstance(event, EnvsRestarted):
            message = f"step {event.step:,}: environments restarted ({event.restarts} so far) after: {event.error}"
            if self._live is not None:
                self._live.console.print(message)
            else:
                print(message, file=self.stream, flush=True)
        if not self.live:
            if isinstance(event, EvaluationEnded):
                print(status_line(stats), file=self.stream, flush=True)
            return
        if isinstance(event, TrainingStarted):
            self._start(event)
        elif self._live is None:
            return
        now = time.perf_counter()
        if isinstance(event, (EvaluationEnded, TrainingEnded)) or now - self._last_refresh > self.REFRESH_S:
            self._last_refresh = now
            self._progress.update(self._task, completed=stats.step)
            self._live.update(self._dashboard(stats), refresh=True)
        if isinstance(event, TrainingEnded):
            self._live.stop()
            self._live = None

    def _start(self, event: TrainingStarted) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

        console = Console(file=self.stream, force_terminal=True)
        self._progress = Progress(
            TextColumn("[bold]training"), BarColumn(bar_width=30), MofNCompleteColumn(), TaskProgressColumn(),
            TextColumn("•"), TimeRemainingColumn(), console=console,
        )
        self._task = self._progress.add_task("train", total=event.total_steps, completed=event.start_step)
        self._live = Live(console=console, auto_refresh=False, transient=False)
        self._live.start()

    def _dashboard(self, stats: RunStats) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table.grid(padding=(0, 3))
        for _ in range(4):
            table.add_column()
        best = "-" if stats.best_eval_return is None else f"{stats.best_eval_return:,.1f} at step {stats.best_eval_step:,}"
        cells = [
            ("steps/s", f"{stats.steps_per_second:,.0f}"),
            ("episodes", f"{stats.episodes:,}"),
            (f"return (last {len(stats.recent_returns)})", _fmt(stats.recent_return)),
            ("updates", f"{stats.train_steps:,}"),
            ("eval return", _fmt(stats.last_eval_return)),
            ("best eval", best),
        ]
        if stats.exploration_rate is not None:
            cells.append(("epsilon", f"{stats.exploration_rate:.3f}"))
        if stats.env_restarts:
            cells.append(("env restarts", f"{stats.env_restarts:,}"))
        cells.extend((name, _fmt(value, 4)) for name, value in stats.last_outputs.items())
        if len(cells) % 2:
            cells.append(("", ""))
        for (name_a, value_a), (name_b, value_b) in zip(cells[::2], cells[1::2]):
            table.add_row(f"[dim]{name_a}", value_a, f"[dim]{name_b}", value_b)
        episodes = Text.assemble(("episode returns  ", "dim"), (sparkline(self._episode_returns, 60), "cyan"))
        evaluations = Text.assemble(("eval returns     ", "dim"), (sparkline(self._eval_returns, 60), "green"))
        return Group(self._progress, table, episodes, evaluations)


class CallbackSink:
    """Hands every event to a user function `callback(event, stats)`."""

    wants_train_steps = True

    def __init__(self, callback: Callable[[Event, RunStats], None]) -> None:
        self.callback = callback

    def on_event(self, event: Event, stats: RunStats) -> None:
        self.callback(event, stats)
