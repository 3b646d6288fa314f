"""Agents actually learn (slow: real training runs; CI runs them)."""

import pytest

from offpolicy import RunConfig, train
from offpolicy.events import EvaluationEnded
from offpolicy.interrupt import Interrupter
from offpolicy.presets import preset

pytestmark = pytest.mark.slow


def train_until(config: RunConfig, target: float):
    """Train, stopping at the first evaluation that reaches `target` (saves CI time)."""
    interrupter = Interrupter()

    def stop_when_solved(event, stats):
        if isinstance(event, EvaluationEnded) and event.mean_return >= target:
            interrupter.stop(f"solved at step {event.step}")

    return train(config, save=False, quiet=True, callbacks=[stop_when_solved], interrupter=interrupter)


def test_default_dqn_solves_cartpole():
    """The bare `offpolicy train` settings reach a mean evaluation return of 475 (of 500)."""
    result = train_until(RunConfig(**preset("dqn-cartpole")), 475)
    assert result.stats.best_eval_return >= 475, f"best evaluation return {result.stats.best_eval_return}"


@pytest.mark.parametrize("agent", ["sac", "td3"])
def test_continuous_agents_learn_pendulum(agent):
    """SAC and TD3 with their Pendulum presets reach a mean evaluation return of -250 within 15,000 steps."""
    values = preset(f"{agent}-pendulum")
    values["num_steps"] = 15_000
    result = train_until(RunConfig(**values), -250)
    assert result.stats.best_eval_return >= -250, f"best evaluation return {result.stats.best_eval_return}"
