"""The run's progress: what the training loop has done so far, kept by the loop and saved in checkpoints.

The loop steers by it (evaluation points, fresh seeds for recreated envs) and a
resumed run continues its counts; metrics and the display read it and never
write it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping


@dataclass
class RunProgress:
    """Counts of the whole run, a resumed run's earlier part included."""

    step: int = 0
    """Environment steps taken."""
    episodes: int = 0
    """Training episodes finished."""
    train_steps: int = 0
    """Optimisation steps (updates) run."""
    evaluations: int = 0
    env_restarts: int = 0
    """Times the training envs were recreated after a failure (`on_env_error="restart"`)."""
    last_eval_return: float | None = None
    best_eval_return: float | None = None
    best_eval_step: int | None = None

    def record_evaluation(self, step: int, mean_return: float) -> None:
        """Count an evaluation; ties for the best go to the later one, as the checkpointer keeps it."""
        self.evaluations += 1
        self.last_eval_return = mean_return
        if self.best_eval_return is None or mean_return >= self.best_eval_return:
            self.best_eval_return = mean_return
            self.best_eval_step = step

    def counters(self) -> dict[str, Any]:
        """What a checkpoint keeps (the step is the checkpoint's own)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "step"}

    def restore_counters(self, counters: Mapping[str, Any]) -> None:
        """Continue from a checkpoint's counters; names it lacks keep their value."""
        for f in fields(self):
            if f.name != "step" and f.name in counters:
                setattr(self, f.name, counters[f.name])
