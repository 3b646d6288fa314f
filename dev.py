#!/usr/bin/env python3
"""Set up and run, with nothing but Python installed.

    python3 dev.py train [OPTIONS]   # a short training run (DQN on CartPole-v1 by default)
    python3 dev.py test [PYTEST ARGS] # the test suite

The first call creates `.venv/`, installs the CPU build of torch 2.13.0 and
this package with its test extras; later calls reuse it, and re-install when
`pyproject.toml` changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".offpolicy-installed"
TORCH = "torch==2.13.0"


def ensure_environment() -> None:
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted and PYTHON.exists():
        return
    if not PYTHON.exists():
        print(f"Creating {VENV} ...", flush=True)
        venv.create(VENV, with_pip=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    print(f"Installing {TORCH} (CPU) ...", flush=True)
    subprocess.run(pip + [TORCH], check=True)
    print("Installing offpolicy and its test tools ...", flush=True)
    subprocess.run(pip + ["-e", f"{ROOT}[test]"], check=True)
    STAMP.write_text(wanted)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("train", "test"):
        print(__doc__)
        return 2
    ensure_environment()
    command, rest = argv[0], argv[1:]
    if command == "train":
        args = [str(BIN / "offpolicy"), "train", *rest]
    else:
        args = [str(PYTHON), "-m", "pytest", *rest]
    return subprocess.call(args, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
