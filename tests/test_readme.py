"""The README's Python snippet runs as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.slow
def test_python_api_snippet_runs(tmp_path, monkeypatch, capsys):
    snippet = re.search(r"## Python API\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(snippet, "README.md", "exec"), namespace)
    result = namespace["result"]
    assert result.stats.step == 10_000 and result.stats.evaluations == 4
    assert (tmp_path / "runs" / "my-run" / "checkpoints" / "index.json").exists()
    out = capsys.readouterr().out
    assert "evaluation return" in out and "10 episodes: mean return" in out
    assert namespace["reward"] == 1.0
    assert (tmp_path / "my-policy" / "policy.safetensors").exists()
