"""Write one documentation page per agent, `docs/agents/<agent>.md`, from the code itself: the update's
equations (the agent module's docstring), every hyperparameter with its default and meaning (the config
dataclass and its field docstrings) and the agent's presets (so the pages cannot drift from the code).

    python tools/agent_pages.py     # rewrites docs/agents/; tests/test_docs.py checks the pages are current
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "agents"

INTRODUCTIONS = {
    "dqn": (
        "DQN",
        "Deep Q-learning (Mnih et al., 2015) for discrete actions, with double-DQN targets (van Hasselt et al., "
        "2016) and the Huber loss. Epsilon-greedy exploration falls with the steps acted; `--dueling` splits the "
        "network into value and advantage heads. On the CPU, small networks over flat observations or MinAtar's "
        "grids, dueling or not, are updated by a NumPy path that computes the same thing as PyTorch's "
        "(`agents/fast_cpu.py`). Use it for discrete actions: CartPole, LunarLander, Atari and MinAtar from pixels.",
        "offpolicy train dqn CartPole-v1\noffpolicy train dqn ALE/Breakout-v5 --device cuda",
    ),
    "qrdqn": (
        "QR-DQN",
        "Quantile-regression DQN (Dabney et al., 2018) learns the distribution of the return as quantiles per "
        "action rather than its mean, with DQN's exploration, targets and options.",
        "offpolicy train qrdqn CartPole-v1 --quantiles 10",
    ),
    "sac": (
        "SAC",
        "Soft actor-critic (Haarnoja et al., 2018) for continuous actions: a stochastic tanh-squashed Gaussian "
        "actor trained to maximise value plus entropy, twin critics, and an entropy coefficient tuned to a "
        "target entropy. As Stable-Baselines3 computes it. Use it for bounded Box actions: Pendulum, "
        "LunarLanderContinuous, MuJoCo, and with `--her` the Fetch tasks.",
        "offpolicy train sac Pendulum-v1\noffpolicy train sac HalfCheetah-v5",
    ),
    "td3": (
        "TD3",
        "Twin delayed DDPG (Fujimoto et al., 2018) for continuous actions: a deterministic actor, twin critics "
        "whose minimum forms the target, smoothed target actions and delayed actor updates. As "
        "Stable-Baselines3 computes it.",
        "offpolicy train td3 Pendulum-v1\noffpolicy train td3 Walker2d-v5",
    ),
}


def field_docs(config_class: type) -> dict[str, str]:
    """Each dataclass field's docstring (the string after its annotation), base classes' first."""
    docs: dict[str, str] = {}
    for cls in reversed(config_class.__mro__):
        if not dataclasses.is_dataclass(cls):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
        for statement, following in zip(body, body[1:]):
            if (isinstance(statement, ast.AnnAssign) and isinstance(following, ast.Expr)
                    and isinstance(following.value, ast.Constant) and isinstance(following.value.value, str)):
                docs[statement.target.id] = " ".join(following.value.value.split())
    return docs


def page(agent: str) -> str:
    from offpolicy.agents import AGENTS
    from offpolicy.presets import FAMILY_PRESETS, PRESET_DESCRIPTIONS, PRESETS

    spec = AGENTS[agent]
    title, introduction, commands = INTRODUCTIONS[agent]
    module = importlib.import_module(spec.learner_class.__module__)
    equations = inspect.getdoc(module)
    docs = field_docs(spec.config_class)
    rows = ["| hyperparameter | option | default | what it sets |", "|---|---|---|---|"]
    for item in dataclasses.fields(spec.config_class):
        default = item.default if item.default is not dataclasses.MISSING else item.default_factory()
        shown = f"`{','.join(map(str, default)) if isinstance(default, tuple) else default}`" if default != () else "none"
        option = f"--{item.name.replace('_', '-')}"
        if isinstance(default, bool):  # a switch: either way
            option = f"{option}` / `--no-{option[2:]}"
        rows.append(f"| `{item.name}` | `{option}` | {shown} | "
                    f"{docs.get(item.name, '').replace('|', '/')} |")
    families = {name: prefix for (owner, prefix), name in FAMILY_PRESETS.items() if owner == agent}
    presets = ["| preset | env | steps | what it is, and what it measured |", "|---|---|---|---|"]
    for name, values in PRESETS.items():
        if values["agent"] != agent or name == "seed-example":
            continue
        env = f"every `{families[name]}...` id" if name in families else f"`{values['env']}`"
        presets.append(f"| `{name}` | {env} | {values['num_steps']:,} | {PRESET_DESCRIPTIONS.get(name, '')} |")
    return "\n".join([
        f"# {title}",
        "",
        introduction,
        "",
        "```bash",
        commands,
        "```",
        "",
        "## The update",
        "",
        f"From `{module.__name__}`, the file that computes it:",
        "",
        "```text",
        equations,
        "```",
        "",
        "## Hyperparameters",
        "",
        f"Each is an option of `offpolicy train {agent}` and a keyword of `offpolicy.train`; the schedule (envs, "
        "buffer, batches, when to train) is the strategy's, in the [training guide](../guide.md).",
        "",
        *rows,
        "",
        "## Presets",
        "",
        f"`offpolicy train {agent} ENV` starts from the preset for that env where there is one; "
        "`--preset NAME` picks one by name, and any option overrides it.",
        "",
        *(presets if len(presets) > 2 else ["None yet: the agent's defaults above apply."]),
        "",
        "Generated by `python tools/agent_pages.py` from the code.",
        "",
    ])


def pages() -> dict[str, str]:
    return {agent: page(agent) for agent in INTRODUCTIONS}


if __name__ == "__main__":
    DOCS.mkdir(parents=True, exist_ok=True)
    for agent, text in pages().items():
        (DOCS / f"{agent}.md").write_text(text, encoding="utf-8")
        print(f"wrote {DOCS / agent}.md")
