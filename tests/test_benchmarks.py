"""`benchmarks/collect.py` runs end to end and reports every system and target.

Windows are tiny, so no figure is checked, only that each was measured. The other benchmarks
compare against Stable-Baselines3, which only the `bench` extra installs.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

COLLECT = Path(__file__).resolve().parents[1] / "benchmarks" / "collect.py"


def run_collect(*arguments: str) -> str:
    done = subprocess.run([sys.executable, str(COLLECT), "--seconds", "0.05", "--repeats", "2", *arguments],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("env, num_envs, backends, target", [
    ("CartPole-v1", "8", ["inprocess"], "CartPole x8: inprocess (MLP policy) / SyncVectorEnv"),
    ("heavy", "2", ["inprocess", "processes"], "heavy x2: processes / inprocess"),
])
def test_collect_measures_every_system_and_reports_the_target(env, num_envs, backends, target):
    output = run_collect("--envs", env, "--num-envs", num_envs, "--backends", *backends)
    # a row: env, envs, batch, the system's name (one or two words), steps/s, ratio to sync, host steal
    table = [line.split() for line in output.splitlines() if line.startswith(env)]
    measured = {(" ".join(fields[3:-3]), fields[2]) for fields in table}
    expected = {("gym sync", "-"), ("gym async", "-")} | {
        (backend, str(batch)) for backend in backends for batch in {1, int(num_envs) // 2, int(num_envs)}}
    if env == "heavy":
        expected.add(("bare parallel", "-"))
    assert measured == expected
    assert all(float(fields[-3].replace(",", "")) > 0 for fields in table)
    targets = output.split("Targets (2 cores):")[1]
    assert target in targets
    assert re.search(r"per repeat: median \d+\.\d\d, from \d+\.\d\d to \d+\.\d\d", targets)
