"""The `offpolicy` command: `train`, `eval`, `plot`, `presets`.

Every config field is an option spelled like the field (`--num-envs`,
`--train-steps`, ...), documented from the field's own docstring, so the
help and the code never disagree.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import dataclasses
import inspect
import json
import os
import sys
import textwrap
import traceback
from functools import lru_cache
from pathlib import Path
from typing import Any, NoReturn, Sequence

from offpolicy.agents import AGENTS
from offpolicy.checkpoint import CheckpointError, NonFiniteStateError
from offpolicy.config import ConfigError, OffPolicyConfig, RunConfig
from offpolicy.envs import EnvError
from offpolicy.events import TrainingStarted
from offpolicy import __version__
from offpolicy.presets import PRESET_DESCRIPTIONS, PRESETS, apply_settings, pair_values, preset, same_family
from offpolicy.runners import EnvRunnerError

EXIT_ERROR = 2
"""Bad input: an option, a config file, an env that cannot be made, a run directory or checkpoint."""
EXIT_RUN_FAILED = 3
"""The run started but could not go on (an env failed or hung, training diverged); its last checkpoint is intact."""
EXIT_INTERRUPTED = 130
"""Stopped by Ctrl-C (SIGINT); a final checkpoint was written unless Ctrl-C came twice."""
EXIT_TERMINATED = 143
"""Stopped by SIGTERM (e.g. a job scheduler); a final checkpoint was written."""
RUN_OPTIONS = ("num_steps", "seed", "device", "inference_device", "torch_threads", "keep_checkpoints", "env_timeout",
               "on_env_error", "ray_address", "ray_actors", "envs_per_actor")
USER_ERRORS = (ConfigError, EnvError, CheckpointError)
RUN_FAILURES = (EnvRunnerError, NonFiniteStateError)


@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each dataclass field, CleanRL style."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, following in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
        ):
            docs[node.target.id] = " ".join(str(following.value.value).split())
    return docs


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_fields(group: Any, cls: type, names: Sequence[str], defaults: dict[str, Any]) -> None:
    docs = field_docs(cls)
    types = {f.name: f.type for f in dataclasses.fields(cls)}
    for name in names:
        default = defaults.get(name)
        shown = f" (default: {default})" if default not in (None, "") else ""
        if str(types[name]) == "bool":
            group.add_argument(_option(name), dest=name, action=argparse.BooleanOptionalAction, default=None,
                               help=docs.get(name, "") + shown)
            continue
        if str(types[name]) == "tuple[int, ...]":
            group.add_argument(_option(name), dest=name, type=_widths, default=None, metavar="W,W,...",
                               help=docs.get(name, ""))
            continue
        kind = {"int": int, "float": float, "str": str}.get(str(types[name]), str)
        group.add_argument(_option(name), dest=name, type=kind, default=None, metavar=kind.__name__.upper(),
                           help=docs.get(name, "") + shown)


def _widths(text: str) -> tuple[int, ...]:
    """`256,256` as (256, 256): layer widths from the command line."""
    try:
        return tuple(int(part) for part in text.replace(" ", "").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected widths separated by commas, e.g. 256,256, got {text!r}") from None


class OneLineErrors(argparse.ArgumentParser):
    """Usage mistakes get one line naming the problem and where help is, like every other error."""

    def error(self, message: str) -> NoReturn:
        unknown = message.split("unrecognized arguments: ", 1)[-1].split()[0] if "unrecognized" in message else ""
        close = difflib.get_close_matches(unknown, self._every_option(), n=1) if unknown.startswith("--") else []
        hint = f"did you mean {close[0]}? " if close else ""
        self.exit(EXIT_ERROR, f"offpolicy: error: {message} ({hint}see: {self.prog} --help)\n")

    def _every_option(self) -> list[str]:
        parsers = [self]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
        return [option for parser in parsers for option in parser._option_string_actions]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(prog="offpolicy", description="Train off-policy RL agents, fast.", allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"offpolicy {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    base = preset("dqn-cartpole")
    train = commands.add_parser(
        "train",
        allow_abbrev=False,  # a misspelt option is an error, never silently another option
        help="train an agent",
        description="Train an agent. Settings come from the tuned preset for the agent and env "
        "(or --preset), then from the options given. Defaults shown are the bare `offpolicy train` ones.",
    )
    train.add_argument("agent", nargs="?", help=f"agent: {', '.join(AGENTS)} (default: dqn, or the preset's)")
    train.add_argument("env", nargs="?", help="Gymnasium env id, or MODULE:ENV_ID to import the module that "
                       "registers it (default: CartPole-v1, or the preset's)")
    train.add_argument("--env-kwargs", nargs="+", metavar="KEY=VALUE", type=_env_argument,
                       help="arguments for the env's constructor, e.g. map_name=8x8 is_slippery=false "
                       "(values read as JSON where they parse, as text otherwise)")
    train.add_argument("--env-package", action="append", metavar="PACKAGE", dest="env_packages",
                       help="import PACKAGE before making envs, so that its env registrations run (repeatable); "
                       "or name the env as MODULE:ENV_ID")
    train.add_argument("--encoder", metavar="MODULE:NAME",
                       help="build every network over your own encoder: a class or function in MODULE called with the "
                       "observation space (and --encoder-kwargs), returning a torch module with an int `features`; "
                       "resuming such a run takes the same option")
    train.add_argument("--encoder-kwargs", nargs="+", metavar="KEY=VALUE", type=_env_argument,
                       help="arguments for --encoder (values read as JSON where they parse, as text otherwise)")
    train.add_argument("--preset", help=f"named settings to start from: {', '.join(PRESETS)}")
    train.add_argument("--config", type=Path, metavar="FILE",
                       help="settings from a file (JSON, TOML or YAML; a run's config.json re-runs it)")
    train.add_argument("--run-dir", type=Path, help="where metrics and checkpoints go (default: runs/<env>-<agent>-s<seed>-<time>)")
    train.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue RUN_DIR from its latest checkpoint, with its config")
    train.add_argument("--quiet", action="store_true", help="print only the run directory and the summary")
    train.add_argument("--save-buffer", action="store_const", const=True, default=None,
                       help=field_docs(RunConfig)["save_buffer"])
    train.add_argument("--tensorboard", action="store_const", const=True, default=None,
                       help=field_docs(RunConfig)["tensorboard"])
    train.add_argument("--seeds", type=int, nargs="+", metavar="SEED",
                       help="train once per seed, one after another, into RUN_DIR/s<SEED> "
                       "(RUN_DIR from --run-dir or made up), then print a table of the results")
    train.add_argument("--debug", action="store_true", help="show full tracebacks on errors")

    run_defaults = {**dataclasses.asdict(RunConfig()), **base}
    _add_fields(train.add_argument_group("run"), RunConfig, RUN_OPTIONS, run_defaults)
    strategy_names = [f.name for f in dataclasses.fields(OffPolicyConfig)]
    replay_names = [name for name in strategy_names
                    if name == "n_step" or name.startswith(("prioritized", "priority", "her"))]
    strategy_defaults = {**dataclasses.asdict(OffPolicyConfig()), **base["strategy"]}
    normalize_names = [name for name in strategy_names if name.startswith("normalize")]
    _add_fields(train.add_argument_group("collection and training schedule"), OffPolicyConfig,
                [name for name in strategy_names if name not in replay_names + normalize_names], strategy_defaults)
    _add_fields(train.add_argument_group("replay"), OffPolicyConfig, replay_names, strategy_defaults)
    _add_fields(train.add_argument_group("normalisation"), OffPolicyConfig, normalize_names, strategy_defaults)
    seen: set[str] = set()
    for agent, spec in AGENTS.items():
        names = [f.name for f in dataclasses.fields(spec.config_class) if f.name not in seen]
        seen.update(names)
        shared = [n for n in names if all(
            any(f.name == n for f in dataclasses.fields(other.config_class)) for other in AGENTS.values())]
        own = [n for n in names if n not in shared]
        if shared:
            defaults = {**dataclasses.asdict(spec.config_class()), **base["hyperparameters"]}
            _add_fields(train.add_argument_group("hyperparameters of every agent (defaults: dqn's)"),
                        spec.config_class, shared, defaults)
        defaults = {**dataclasses.asdict(spec.config_class()), **(base["hyperparameters"] if agent == base["agent"] else {})}
        _add_fields(train.add_argument_group(f"{agent} hyperparameters"), spec.config_class, own, defaults)

    commands.add_parser("presets", help="list the named presets")

    evaluate = commands.add_parser(
        "eval", allow_abbrev=False, help="evaluate a trained policy, optionally recording a video",
        description="Run deterministic episodes with a run's checkpoint (or a saved policy) and print the "
        "mean and spread of the return.")
    evaluate.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory or a saved policy folder")
    evaluate.add_argument("--checkpoint", default="best", help="best (default: highest evaluation return), last, or a step")
    evaluate.add_argument("--episodes", type=int, default=10, help="episodes to run (default: 10)")
    evaluate.add_argument("--seed", type=int, default=0, help="seed of the first episode (default: 0)")
    evaluate.add_argument("--video", type=Path, metavar="FILE",
                          help="also record episodes to FILE (.mp4; a .gif when no video encoder is installed)")
    evaluate.add_argument("--video-episodes", type=int, default=1, help="episodes in the video (default: 1)")
    evaluate.add_argument("--device", default="cpu", help="device to act on (default: cpu)")
    evaluate.add_argument("--encoder", metavar="MODULE:NAME",
                          help="the encoder of your own the run was trained with (checked against its record)")
    evaluate.add_argument("--debug", action="store_true", help="show full tracebacks on errors")

    plot = commands.add_parser(
        "plot", allow_abbrev=False, help="draw learning curves of one or several runs",
        description="Draw training and evaluation return against environment steps. Runs sharing a config "
        "but the seed are drawn as their mean with the min-max spread. A folder of runs (from --seeds) "
        "stands for all of them.")
    plot.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    plot.add_argument("-o", "--output", type=Path, default=Path("curves.png"), help="image file (default: curves.png)")
    plot.add_argument("--title", help="a title above the plots")
    plot.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    return parser


def read_config_file(path: Path) -> dict[str, Any]:
    """A run config written as JSON (e.g. a run's `config.json`), TOML or YAML."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror}") from error
    try:
        if path.suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                try:
                    import tomli as tomllib
                except ImportError:
                    raise ConfigError("TOML config files need Python 3.11+ or: pip install tomli") from None
            values = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise ConfigError("YAML config files need PyYAML: pip install pyyaml (or use JSON or TOML)") from None
            values = yaml.safe_load(text)
        else:
            values = json.loads(text)
    except ConfigError:
        raise
    except Exception as error:
        raise ConfigError(f"config file {path} is not valid: {error}") from error
    if not isinstance(values, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings")
    return RunConfig.from_dict(values).to_dict()  # names unknown keys


def resolve_config(args: argparse.Namespace) -> RunConfig:
    """A config file or a preset (named, or the tuned one for this agent and env), then the options given."""
    if args.config and args.preset:
        raise ConfigError("give either --config or --preset, not both")
    if args.config or args.preset:
        values: dict[str, Any] = read_config_file(args.config) if args.config else preset(args.preset)
        source = f"config file {args.config}" if args.config else f"preset {args.preset!r}"
        for given, key in ((args.agent, "agent"), (args.env, "env")):
            if given is not None and given != values[key]:
                if key == "env" and same_family(values[key], given):  # a preset for every game of a family
                    values["env"] = given
                    continue
                raise ConfigError(f"{source} is for {key} {values[key]}, not {given}")
    else:
        values = pair_values(args.agent or "dqn", args.env or "CartPole-v1")
    names = [*RUN_OPTIONS, "save_buffer", "tensorboard", *(f.name for f in dataclasses.fields(OffPolicyConfig))]
    names += [f.name for spec in AGENTS.values() for f in dataclasses.fields(spec.config_class)]
    settings = {name: getattr(args, name) for name in dict.fromkeys(names) if getattr(args, name) is not None}
    if args.ray_actors and args.envs_per_actor and args.num_envs is None:
        settings["num_envs"] = args.ray_actors * args.envs_per_actor  # the fleet sizes the run
    if args.env_kwargs:
        settings["env_kwargs"] = {**values.get("env_kwargs", {}), **dict(args.env_kwargs)}
    if args.env_packages:
        settings["env_packages"] = [*values.get("env_packages", []), *args.env_packages]
    apply_settings(values, settings, label=lambda name: f"option {_option(name)}")
    return RunConfig(**values)


def _env_argument(text: str) -> tuple[str, Any]:
    """KEY=VALUE, the value read as JSON where it parses (false, 3, [1, 2]) and as text otherwise (8x8)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _changed_options(args: argparse.Namespace) -> list[str]:
    names = [f.name for f in dataclasses.fields(OffPolicyConfig)] + [n for n in RUN_OPTIONS if n != "num_steps"]
    names += ["save_buffer", "tensorboard", "env_kwargs", "env_packages"]
    for spec in AGENTS.values():
        names += [f.name for f in dataclasses.fields(spec.config_class)]
    return [_option(n).removesuffix("s") if n == "env_packages" else _option(n)
            for n in dict.fromkeys(names) if getattr(args, n, None) is not None]


def announce(run_dir: Path):
    """Print the run directory once everything is validated and training starts."""

    def on_event(event, stats) -> None:
        if isinstance(event, TrainingStarted):
            action = "Resuming" if event.start_step else "Run directory:"
            at = f" at step {event.start_step:,}" if event.start_step else ""
            print(f"{action} {run_dir}{at}", flush=True)

    return on_event


def command_train(args: argparse.Namespace) -> int:
    from offpolicy.training import load_run_config, train

    if args.resume is not None:
        changed = _changed_options(args) + (["--preset"] if args.preset else []) + (["--config"] if args.config else [])
        if changed:
            raise ConfigError(
                f"--resume continues with the run's stored config; {', '.join(changed)} cannot change "
                "(only --num-steps may, to extend the run)"
            )
        if args.agent or args.env or args.seeds:
            raise ConfigError("--resume continues the stored run; give no agent, env or --seeds")
        config = load_run_config(args.resume)
        if args.num_steps is not None:
            config = dataclasses.replace(config, num_steps=args.num_steps)
        result = train(config, run_dir=args.resume, resume=True, quiet=args.quiet, callbacks=[announce(args.resume)],
                       **_encoder_arguments(args))
    else:
        config = resolve_config(args)
        if args.seeds:
            return train_seeds(config, args)
        from offpolicy.training import new_run_dir

        run_dir = args.run_dir or new_run_dir(config)
        result = train(config, run_dir=run_dir, quiet=args.quiet, callbacks=[announce(run_dir)],
                       **_encoder_arguments(args))
    return report(result)


def _encoder_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """`train`'s encoder and encoder_kwargs from --encoder (imported: the user named it) and --encoder-kwargs."""
    from offpolicy.agents.custom_encoder import import_encoder

    arguments: dict[str, Any] = {}
    if getattr(args, "encoder", None):
        arguments["encoder"] = import_encoder(args.encoder)
    if getattr(args, "encoder_kwargs", None):
        arguments["encoder_kwargs"] = dict(args.encoder_kwargs)
    return arguments


def report(result: Any) -> int:
    """Print a run's summary line and return the command's exit code."""
    stats = result.stats
    best = "-" if stats.best_eval_return is None else f"{stats.best_eval_return:.1f} at step {stats.best_eval_step:,}"
    last = "-" if stats.last_eval_return is None else f"{stats.last_eval_return:.1f}"
    print(
        f"{'Stopped' if result.interrupted else 'Done'}: {stats.step:,} steps in {stats.elapsed:.1f} s "
        f"({stats.steps_per_second:,.0f} steps/s), {stats.episodes:,} episodes, {stats.train_steps:,} updates; "
        f"evaluation return: last {last}, best {best}"
    )
    if result.failure is not None:
        print(f"offpolicy: error: {result.failure} (the run stopped with a checkpoint; fix it and continue with: "
              f"offpolicy train --resume {result.run_dir})", file=sys.stderr)
        return EXIT_RUN_FAILED
    if result.interrupted:
        print(f"Interrupted ({result.interrupted}). Continue with: offpolicy train --resume {result.run_dir}")
        return EXIT_TERMINATED if result.interrupted.startswith("SIGTERM") else EXIT_INTERRUPTED
    return 0


def train_seeds(config: RunConfig, args: argparse.Namespace) -> int:
    """`--seeds`: one run per seed into sibling folders, then a table; stops at the first run that does not finish."""
    from rich.console import Console
    from rich.table import Table

    from offpolicy.training import new_run_dir, train

    if args.seed is not None:
        raise ConfigError("give either --seed or --seeds, not both")
    if len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        raise ConfigError(f"--seeds must be distinct non-negative integers, got {' '.join(map(str, args.seeds))}")
    parent = args.run_dir or new_run_dir(config, tag="seeds")
    table = Table("seed", "steps", "last eval", "best eval", "at step", "time (s)", "run directory",
                  title=f"{config.agent} on {config.env}, {len(args.seeds)} seeds")
    bests = []
    for seed in args.seeds:
        run_dir = Path(parent) / f"s{seed}"
        result = train(dataclasses.replace(config, seed=seed), run_dir=run_dir, quiet=args.quiet,
                       callbacks=[announce(run_dir)], **_encoder_arguments(args))
        code = report(result)
        stats = result.stats
        table.add_row(str(seed), f"{stats.step:,}", _shown(stats.last_eval_return), _shown(stats.best_eval_return),
                      "-" if stats.best_eval_step is None else f"{stats.best_eval_step:,}", f"{stats.elapsed:.0f}",
                      str(run_dir))
        if stats.best_eval_return is not None:
            bests.append(stats.best_eval_return)
        if code != 0:
            return code
    if bests:
        table.caption = f"best evaluation return: mean {sum(bests) / len(bests):.1f}, min {min(bests):.1f}, max {max(bests):.1f}"
    Console(width=max(100, Console().width)).print(table)
    print(f"Plot them with: offpolicy plot {parent} -o curves.png")
    return 0


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def command_eval(args: argparse.Namespace) -> int:
    from offpolicy.envs import config_env_factory
    from offpolicy.evaluation import describe_checkpoint, evaluate_policy, load_policy, record_video
    from offpolicy.training import check_device

    check_device(args.device, "--device")
    for name in ("episodes", "video_episodes"):
        if getattr(args, name) < 1:
            raise ConfigError(f"{_option(name)} must be at least 1, got {getattr(args, name)}")
    loaded = load_policy(args.run_dir, args.checkpoint, device=args.device, **_encoder_arguments(args))
    print(f"Policy: {describe_checkpoint(loaded)}")
    config = loaded.config
    result = evaluate_policy(loaded.policy, config_env_factory(config), args.episodes, args.seed)
    print(f"Evaluation on {config.env}, {result.summary()}")
    if args.video is not None:
        path, recorded, frames = record_video(loaded.policy, config.env, args.video, args.video_episodes, args.seed,
                                              config.env_kwargs, config.env_packages)
        note = "" if path.suffix == args.video.suffix else " (no video encoder installed: pip install imageio-ffmpeg)"
        print(f"Video: {path}{note}, {frames} frames, return {', '.join(f'{r:.1f}' for r in recorded.returns)}")
    return 0


def command_plot(args: argparse.Namespace) -> int:
    from offpolicy.plotting import plot_runs

    print(f"Plot: {plot_runs(args.run_dirs, args.output, args.title)}")
    return 0


def command_presets(args: argparse.Namespace) -> int:
    width = max(len(name) for name in PRESETS) + 2
    agent_width = max(len(values["agent"]) for values in PRESETS.values()) + 2
    env_width = max(len(values["env"]) for values in PRESETS.values()) + 2
    for name, values in PRESETS.items():
        print(f"{name:<{width}}{values['agent']:<{agent_width}}{values['env']:<{env_width}}"
              f"{PRESET_DESCRIPTIONS.get(name, '')}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, or a usage error already printed on one line
        return int(done.code or 0)
    if os.getcwd() not in sys.path:  # MODULE:ENV_ID, --env-package, --encoder: a module beside you, as `python -m`
        sys.path.append(os.getcwd())
    try:
        commands = {"train": command_train, "eval": command_eval, "plot": command_plot, "presets": command_presets}
        return commands[args.command](args)
    except USER_ERRORS + RUN_FAILURES as error:
        if getattr(args, "debug", False):
            traceback.print_exc()
            if getattr(error, "worker_traceback", None):
                print(f"In the worker process:\n{error.worker_traceback}", file=sys.stderr)
        print(f"offpolicy: error: {error}", file=sys.stderr)
        return EXIT_RUN_FAILED if isinstance(error, RUN_FAILURES) else EXIT_ERROR
    except KeyboardInterrupt:
        print("offpolicy: stopped at once (second Ctrl-C); the last checkpoint is intact", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # whoever read our output stopped reading (`offpolicy presets | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flushes nowhere, quietly
        return 0


if __name__ == "__main__":
    sys.exit(main())
