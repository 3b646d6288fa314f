import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import StubLearner
from offpolicy.checkpoint import CheckpointError, Checkpointer, NonFiniteStateError, load_state, save_state


def test_nested_state_round_trips(tmp_path):
    state = {
        "net": {"w": torch.arange(6.0).view(2, 3), "b": torch.zeros(2)},
        "optimizer": {"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99)}]},
        "updates": 17,
        "name": "x",
        "nothing": None,
    }
    save_state(tmp_path, "s", state)
    loaded = load_state(tmp_path, "s")
    assert torch.equal(loaded["net"]["w"], state["net"]["w"])
    assert list(loaded["optimizer"]["state"]) == [0]
    assert float(loaded["optimizer"]["state"][0]["step"]) == 3.0
    assert loaded["optimizer"]["param_groups"][0]["betas"] == [0.9, 0.99]
    assert loaded["updates"] == 17 and loaded["name"] == "x" and loaded["nothing"] is None


def test_keeps_last_two_and_best(tmp_path):
    checkpointer = Checkpointer(tmp_path, keep_last=2)
    learner = StubLearner()
    for step, score in [(10, 5.0), (20, 50.0), (30, 7.0), (40, 8.0), (50, None)]:
        checkpointer.checkpoint(learner.policy(), learner, step, score)
    assert sorted(e.step for e in checkpointer.entries) == [20, 40, 50]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        "step_000000020", "step_000000040", "step_000000050",
    ]
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["best"] == 20 and index["latest"] == 50
    reopened = Checkpointer(tmp_path)
    assert reopened.latest.step == 50 and reopened.best.step == 20


def test_pickle_payload_is_refused_and_never_runs(tmp_path):
    checkpointer = Checkpointer(tmp_path)
    learner = StubLearner()
    path = checkpointer.checkpoint(learner.policy(), learner, 10, 1.0)
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (path / "learner.safetensors").write_bytes(pickle.dumps({"x": Payload()}))
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        checkpointer.load(10)
    assert not marker.exists()


def test_missing_step_and_corrupt_index(tmp_path):
    checkpointer = Checkpointer(tmp_path)
    with pytest.raises(CheckpointError, match="no checkpoint for step 5"):
        checkpointer.load(5)
    (tmp_path / "index.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupted"):
        Checkpointer(tmp_path)


WRITER = """
import sys
import torch
from offpolicy.checkpoint import Checkpointer
from helpers import StubLearner

class BigLearner(StubLearner):
    step = 0
    def state_dict(self):
        return {"step": self.step, "weights": torch.full((512, 1024), float(self.step))}

checkpointer = Checkpointer(sys.argv[1], keep_last=1)
learner = BigLearner()
learner.step = checkpointer.latest.step if checkpointer.latest else 0
print("ready", flush=True)
while True:
    learner.step += 1
    checkpointer.checkpoint(learner.policy(), learner, learner.step, None)
"""


def test_sigkill_mid_checkpoint_leaves_the_previous_one_loadable(tmp_path):
    """Kill a writer at random moments (keep_last=1, so every write also deletes the previous one)."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    directory = tmp_path / "checkpoints"
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    random = np.random.default_rng(0)
    reached = 0
    for _ in range(6):
        writer = subprocess.Popen([sys.executable, str(script), str(directory)], stdout=subprocess.PIPE,
                                  env=environment, text=True)
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(random.uniform(0.05, 0.4))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        writer.stdout.close()

        checkpointer = Checkpointer(directory, keep_last=1)
        latest = checkpointer.latest
        assert latest is not None and latest.step >= reached
        _, state = checkpointer.load(latest.step)
        assert state["step"] == latest.step and bool((state["weights"] == latest.step).all())
        listed = json.loads((directory / "index.json").read_text())["checkpoints"]
        assert all(checkpointer.path(entry["step"]).is_dir() for entry in listed)
        reached = latest.step
    assert reached > 1


def test_non_finite_state_is_never_saved(tmp_path):
    checkpointer = Checkpointer(tmp_path, keep_last=1)
    learner = StubLearner()
    checkpointer.checkpoint(learner.policy(), learner, 10, 1.0)
    learner.policy().version = torch.tensor(float("nan"))
    with pytest.raises(NonFiniteStateError, match="step 20.*NaN or infinite"):
        checkpointer.checkpoint(learner.policy(), learner, 20, None)
    assert [e.step for e in Checkpointer(tmp_path).entries] == [10]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json", "step_000000010"]
