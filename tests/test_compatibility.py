"""Results and files stay what they were: the fixtures in `tests/fixtures/` were recorded by
`tests/fixtures/record.py` with an earlier version, and the current code must reproduce them."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from offpolicy import load_policy, train
from offpolicy.checkpoint import load_state

FIXTURES = Path(__file__).resolve().parent / "fixtures"
sys.path.insert(0, str(FIXTURES))

from record import OLD_RUNS, REFERENCE_RUNS, probe_observations, reference_config  # noqa: E402


def tensors(state, prefix=""):
    """Every tensor of a nested state, by its path."""
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    if isinstance(state, dict):
        return {k: v for key, value in state.items() for k, v in tensors(value, f"{prefix}.{key}").items()}
    if isinstance(state, (list, tuple)):
        return {k: v for index, value in enumerate(state) for k, v in tensors(value, f"{prefix}.{index}").items()}
    return {}


@pytest.mark.parametrize("agent", sorted(REFERENCE_RUNS))
def test_same_seed_trains_to_the_recorded_parameters(agent):
    """A short in-process run gives the parameters, optimiser state and counts recorded before."""
    result = train(reference_config(agent), save=False, quiet=True)
    recorded = load_state(FIXTURES, f"{agent}_reference")
    assert recorded["counters"] == {"episodes": result.stats.episodes, "train_steps": result.stats.train_steps}
    expected, actual = tensors(recorded["learner"]), tensors(result.learner.state_dict())
    assert sorted(expected) == sorted(actual)
    for path, value in expected.items():
        assert torch.allclose(actual[path].to(value.dtype), value, rtol=1e-4, atol=1e-5), path


@pytest.mark.parametrize("agent", sorted(OLD_RUNS))
def test_a_run_written_before_still_loads_and_resumes(agent, tmp_path):
    run_dir = tmp_path / agent
    shutil.copytree(FIXTURES / "runs_v0_1" / agent, run_dir)
    policy = load_policy(run_dir).policy
    observations = probe_observations(OLD_RUNS[agent][0])
    expected = json.loads((run_dir / "expected_actions.json").read_text())
    for observation, action in zip(observations, expected):
        assert np.allclose(np.asarray(policy.predict(observation)), action, atol=1e-5)

    config = json.loads((run_dir / "config.json").read_text())
    from offpolicy import RunConfig

    extended = RunConfig.from_dict({**config, "num_steps": config["num_steps"] + 200})
    result = train(extended, run_dir=run_dir, resume=True, quiet=True)
    assert result.interrupted is None and result.stats.step == config["num_steps"] + 200
    assert result.stats.evaluations >= 2  # counted from the checkpoint, then one more
