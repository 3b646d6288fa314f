"""Your own encoder: a network part of yours in front of every network an agent builds.

`train(..., encoder=MyEncoder, encoder_kwargs={"features": 128})` builds each of
the agent's networks (Q-network, actor, critics, their targets) over its own
`MyEncoder(observation_space, **encoder_kwargs)` instead of the encoder chosen
from the observation space, as Stable-Baselines3's `features_extractor_class`
does. The hidden layers after it (`net_arch`) and the agent's heads stay the
agent's. An encoder is a `torch.nn.Module` that maps a batch of observations
(a Dict or Tuple observation as a dict of batched tensors, one per leaf, keyed
by its path such as `observation` or `sensors/0`) to float rows of width
`features`, an attribute it sets.

The run records the encoder's name (`module:qualname`) and its JSON arguments in
`config.json`; its weights are saved with every other parameter, in
safetensors. Loading never imports that name: a file says what it was trained
with, and only code you hand over (`load_policy(path, encoder=MyEncoder)`,
`train(..., resume=True, encoder=MyEncoder)`, `--encoder MODULE:NAME`) is ever
called, after its name is checked against the record.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import gymnasium as gym
from torch import nn

from offpolicy.config import ConfigError, check_keyword_arguments

EncoderFactory = Callable[..., nn.Module]
"""A class or function called as `factory(observation_space, **kwargs)`, returning an encoder module."""


def encoder_name(factory: EncoderFactory) -> str:
    """`module:qualname` of a class or function, as a run records it."""
    module, qualname = getattr(factory, "__module__", None), getattr(factory, "__qualname__", None)
    if not callable(factory) or not module or not qualname:
        raise ConfigError(f"encoder must be a class or function taking the observation space, got {factory!r}")
    return f"{module}:{qualname}"


def same_encoder(recorded: str, given: str) -> bool:
    """Whether two recorded names denote the same encoder: equal, or the same qualified name where one side
    was defined in a script run as `__main__` (trained by `python train.py`, loaded by `from train import
    MyEncoder`)."""
    if recorded == given:
        return True
    recorded_module, _, recorded_qualname = recorded.partition(":")
    given_module, _, given_qualname = given.partition(":")
    return recorded_qualname == given_qualname and "__main__" in (recorded_module, given_module)


@dataclass(frozen=True)
class CustomEncoder:
    """A user's encoder class or factory and the JSON keyword arguments it is called with."""

    factory: EncoderFactory
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        encoder_name(self.factory)
        check_keyword_arguments(self.kwargs, "encoder_kwargs")

    @property
    def name(self) -> str:
        return encoder_name(self.factory)

    def record(self) -> dict[str, Any]:
        """What `config.json` keeps of it: the name and the arguments, never code."""
        return {"name": self.name, "kwargs": dict(self.kwargs)}

    def build(self, observation_space: gym.Space) -> nn.Module:
        """A fresh encoder for `observation_space`, checked to be a module with a positive `features`."""
        encoder = self.factory(observation_space, **self.kwargs)
        if not isinstance(encoder, nn.Module):
            raise ConfigError(f"encoder {self.name} returned {type(encoder).__name__}, not a torch.nn.Module")
        features = getattr(encoder, "features", None)
        if isinstance(features, bool) or not isinstance(features, int) or features < 1:
            raise ConfigError(f"encoder {self.name} must set `features`, the width of the rows it returns, to a "
                              f"positive int; got {features!r}")
        return encoder


def recorded_encoder(
    record: Mapping[str, Any], given: EncoderFactory | None, kwargs: Mapping[str, Any] | None, where: str
) -> CustomEncoder | None:
    """The encoder to rebuild a stored run with: `given` (with `kwargs`, else the recorded arguments) once its
    name matches the run's `record`; None for a run with the built-in encoders. `where` names the run in
    errors. The recorded name is only compared, never imported."""
    if not record:
        if given is not None:
            raise ConfigError(f"{where} was trained with the built-in encoder, not {encoder_name(given)}: "
                              "leave out encoder")
        return None
    recorded = record.get("name") if isinstance(record, Mapping) else None
    if not isinstance(recorded, str):
        raise ConfigError(f"{where} has a malformed encoder record in its config: {record!r}")
    if given is None:
        module, _, qualname = recorded.partition(":")
        option = f"MODULE:{qualname} with the module that defines it" if module == "__main__" else recorded
        raise ConfigError(
            f"{where} was trained with your encoder {recorded}; hand it over to load the run "
            f"(in Python encoder={qualname}; on the command line --encoder {option}): "
            "offpolicy never imports a name read from a file")
    chosen = CustomEncoder(given, kwargs if kwargs is not None else record.get("kwargs") or {})
    if not same_encoder(recorded, chosen.name):
        raise ConfigError(f"{where} was trained with encoder {recorded}, but {chosen.name} was given")
    return chosen


def import_encoder(path: str) -> EncoderFactory:
    """The class or function `module:qualname` names, imported because the user typed it (`--encoder`)."""
    module_name, _, qualname = path.partition(":")
    if not module_name or not qualname:
        raise ConfigError(f"--encoder takes MODULE:NAME (e.g. mypkg.nets:MyEncoder), got {path!r}")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(f"--encoder {path}: cannot import {module_name} ({error})") from None
    for part in qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError(f"--encoder {path}: {module_name} has no {qualname}")
    return target


__all__ = ["CustomEncoder", "EncoderFactory", "encoder_name", "import_encoder", "recorded_encoder"]
