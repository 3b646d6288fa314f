"""The live display: a dashboard in a terminal, one plain line per evaluation otherwise."""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any, Sequence

from offpolicy.events import (
    EnvsRestarted,
    Event,
    EvaluationEnded,
    RunStats,
    StepsCollected,
    TrainingEnded,
    TrainingStarted,
)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def status_line(stats: RunStats) -> str:
    """One plain line: steps, speed, recent and evaluation returns, loss."""
    loss = stats.last_outputs.get("loss")
    exploration = "" if stats.exploration_rate is None else f" | epsilon {stats.exploration_rate:.2f}"
    success = "" if stats.last_eval_success_rate is None else f" | eval success {stats.last_eval_success_rate:.2f}"
    return (
        f"step {stats.step:,}/{stats.total_steps:,} | {stats.steps_per_second:,.0f} steps/s"
        f" | return {_fmt(stats.recent_return)} | eval {_fmt(stats.last_eval_return)}{success}"
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
        if stats.recent_success_rate is not None:
            cells.append((f"success (last {len(stats.recent_successes)})", f"{stats.recent_success_rate:.2f}"))
        if stats.last_eval_success_rate is not None:
            cells.append(("eval success", f"{stats.last_eval_success_rate:.2f}"))
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
