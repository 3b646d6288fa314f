"""The documentation site builds with `mkdocs build --strict`: a broken link or API reference fails CI."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, timeout=300, cwd=root,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_documentation_builds_strictly_with_its_api_reference(tmp_path):
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert "load_policy" in api and "evaluate_policy" in api and "ObservationLayout" in api


def test_a_broken_link_fails_the_build(tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("mkdocs.yml", "docs", "src"):
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, copy / name)
    guide = copy / "docs" / "guide.md"
    guide.write_text(guide.read_text(encoding="utf-8") + "\nSee [nowhere](no-such-page.md).\n", encoding="utf-8")
    done = build(copy, tmp_path / "site")
    assert done.returncode != 0 and "no-such-page.md" in done.stderr


def test_the_cli_reference_covers_every_option_and_default():
    """`docs/cli.md` is generated from the parser (`python tools/cli_reference.py`); an option added or a
    default changed since fails here until the page is regenerated. (Defaults are compared in order rather
    than the whole page, whose layout differs between Python versions.)"""
    sys.path.insert(0, str(ROOT / "tools"))
    from cli_reference import DOCS, reference, subcommands

    from offpolicy.cli import build_parser

    text = DOCS.read_text(encoding="utf-8")
    for name, command in subcommands(build_parser()).items():
        assert f"## offpolicy {name}" in text, name
        for action in command._actions:
            for option in action.option_strings:
                assert option in text, f"{option} of offpolicy {name} is not in docs/cli.md"

    def defaults(page: str) -> list[str]:
        return re.findall(r"\(default: [^)]*\)", " ".join(page.split()))

    assert defaults(text) == defaults(reference()), "docs/cli.md is stale: run python tools/cli_reference.py"


def test_the_agent_pages_are_generated_from_the_current_code():
    """`docs/agents/*.md` come from each agent's module docstring, config fields and presets
    (`python tools/agent_pages.py`); a changed hyperparameter or preset fails here until they are regenerated."""
    sys.path.insert(0, str(ROOT / "tools"))
    from agent_pages import DOCS, pages

    from offpolicy.agents import AGENTS

    generated = pages()
    assert set(generated) == set(AGENTS)
    for agent, text in generated.items():
        assert (DOCS / f"{agent}.md").read_text(encoding="utf-8") == text, f"docs/agents/{agent}.md is out of date"
