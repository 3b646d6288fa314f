"""Training and evaluation events, the run's statistics drawn from them, and the processor that hands
them to sinks.

The strategy emits one event per collected chunk, per optimisation step, per
training phase and per evaluation; sinks (`sinks.py`: the metrics log,
TensorBoard, user callbacks; `display.py`: the live display) turn them into
rows and lines. Events report what the loop did; they never steer it: the
loop's own counts are its `RunProgress`, which the statistics show.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Protocol, Union

import numpy as np

from offpolicy.interrupt import Interrupter
from offpolicy.policy import TrainMetrics
from offpolicy.progress import RunProgress
from offpolicy.steps import StepBatch


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
    """One optimisation step (sinks that set `wants_train_steps = False` never see these)."""

    step: int
    output: TrainMetrics


@dataclass
class TrainingPhaseEnded:
    """A training phase is over: its updates' mean metrics (each over the updates that reported it)."""

    step: int
    updates: int
    metrics: dict[str, float]


@dataclass
class EvaluationStarted:
    step: int
    episodes: int


@dataclass
class EvaluationEnded:
    step: int
    returns: list[float]
    lengths: list[int]
    successes: list[float] = field(default_factory=list)
    """Each episode's success at its last step (1.0 or 0.0; NaN where the env reports none)."""

    @property
    def mean_return(self) -> float:
        return sum(self.returns) / len(self.returns)

    @property
    def success_rate(self) -> float | None:
        """The fraction of episodes that ended in success, for envs that report `is_success`; else None."""
        return success_rate(self.successes)


def success_rate(successes: "Iterable[float]") -> float | None:
    """The mean of the reported successes (NaN is none reported), or None if there are none."""
    reported = [value for value in successes if not math.isnan(value)]
    return sum(reported) / len(reported) if reported else None


@dataclass
class TrainingEnded:
    step: int
    interrupted: str | None
    """The stop reason when the run ended before its total, else None."""


Event = Union[
    TrainingStarted, StepsCollected, EnvsRestarted, TrainStep, TrainingPhaseEnded, EvaluationStarted,
    EvaluationEnded, TrainingEnded,
]


@dataclass
class RunStats:
    """What a person wants to know about a run right now: the loop's progress, and what the events show."""

    progress: RunProgress = field(default_factory=RunProgress)
    """The training loop's own counts (read-only here)."""
    start_step: int = 0
    total_steps: int = 0
    recent_returns: deque = field(default_factory=lambda: deque(maxlen=20))
    recent_successes: deque = field(default_factory=lambda: deque(maxlen=20))
    """Whether each recent training episode ended in success, for envs that report `is_success`."""
    last_eval_success_rate: float | None = None
    exploration_rate: float | None = None
    last_outputs: dict[str, float] = field(default_factory=dict)
    """Mean learner outputs of the latest training phase (loss, ...)."""
    started_at: float = field(default_factory=time.perf_counter)

    @property
    def step(self) -> int:
        return self.progress.step

    @property
    def episodes(self) -> int:
        return self.progress.episodes

    @property
    def train_steps(self) -> int:
        return self.progress.train_steps

    @property
    def evaluations(self) -> int:
        return self.progress.evaluations

    @property
    def env_restarts(self) -> int:
        return self.progress.env_restarts

    @property
    def last_eval_return(self) -> float | None:
        return self.progress.last_eval_return

    @property
    def best_eval_return(self) -> float | None:
        return self.progress.best_eval_return

    @property
    def best_eval_step(self) -> int | None:
        return self.progress.best_eval_step

    @property
    def steps_per_second(self) -> float:
        elapsed = time.perf_counter() - self.started_at
        return (self.step - self.start_step) / elapsed if elapsed > 0 else 0.0

    @property
    def recent_success_rate(self) -> float | None:
        return success_rate(self.recent_successes)

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
    """Updates the run's statistics from each event and passes it to every sink.

    A sink that raises stops training through the interrupter (with the error
    as reason) instead of crashing mid-phase.
    """

    def __init__(
        self, sinks: list[EventSink], interrupter: Interrupter | None = None, progress: RunProgress | None = None
    ) -> None:
        """`progress` is the training loop's (the statistics show its counts)."""
        self.sinks = sinks
        self.interrupter = interrupter or Interrupter()
        self.stats = RunStats(progress if progress is not None else RunProgress())

    def process(self, event: Event) -> None:
        stats = self.stats
        if isinstance(event, TrainingStarted):
            stats.start_step = event.start_step
            stats.total_steps = event.total_steps
            stats.started_at = time.perf_counter()
        elif isinstance(event, StepsCollected):
            rows, _ = event.finished_episodes
            stats.recent_returns.extend(event.steps.episode_returns[rows].tolist())
            ended = event.steps.successes[rows]
            stats.recent_successes.extend(ended[~np.isnan(ended)].tolist())
            rate = event.steps.context.get("exploration_rate")
            if rate is not None and len(rate):
                stats.exploration_rate = float(rate[-1])
        elif isinstance(event, TrainingPhaseEnded):
            stats.last_outputs = event.metrics
        elif isinstance(event, EvaluationEnded) and event.success_rate is not None:
            stats.last_eval_success_rate = event.success_rate
        is_train_step = isinstance(event, TrainStep)
        for sink in self.sinks:
            if is_train_step and not getattr(sink, "wants_train_steps", True):
                continue
            self.interrupter.fail_on_error(lambda: sink.on_event(event, stats))
