"""Write `docs/cli.md`, the command-line reference, from the parser itself (so it cannot drift from it).

    python tools/cli_reference.py        # rewrites docs/cli.md; tests/test_docs.py checks it covers every option
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
WIDTH = "100"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser of each `offpolicy` command, by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def reference() -> str:
    """The reference page: each command's `--help`, as the command prints it at a width of 100 columns."""
    os.environ["COLUMNS"] = WIDTH  # argparse wraps to the terminal's width
    from offpolicy.cli import build_parser

    parser = build_parser()
    parts = [
        "# Command-line reference",
        "",
        "Every command's `--help`, generated from the parser by `python tools/cli_reference.py`.",
        "The [training guide](guide.md) explains what the options are for.",
        "",
        "## offpolicy",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
    ]
    for name, command in subcommands(parser).items():
        parts += ["", f"## offpolicy {name}", "", "```text", command.format_help().rstrip(), "```"]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    DOCS.write_text(reference(), encoding="utf-8")
    print(f"wrote {DOCS}")
