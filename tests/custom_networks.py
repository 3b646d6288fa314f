"""Encoders of a user's own, importable by name (in a fresh process, or with `--encoder custom_networks:...`)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

BUILT_FOR: list[gym.Space] = []
"""The observation spaces `SmallEncoder` was built for in this process, in order."""


class SmallEncoder(nn.Module):
    """One tanh layer over the flattened observation."""

    def __init__(self, observation_space: gym.Space, features: int = 16) -> None:
        super().__init__()
        BUILT_FOR.append(observation_space)
        self.features = features
        self.linear = nn.Linear(int(np.prod(observation_space.shape)), features)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(observations.flatten(1).float()))


class OtherEncoder(SmallEncoder):
    """Another class of the same shape: not the encoder a `SmallEncoder` run was trained with."""


class KeyedEncoder(nn.Module):
    """For Dict observations: a linear layer per key, summed; records the keys it was handed."""

    seen_keys: set[str] = set()

    def __init__(self, observation_space: gym.spaces.Dict, features: int = 8) -> None:
        super().__init__()
        self.features = features
        self.layers = nn.ModuleDict({key: nn.Linear(int(np.prod(space.shape)), features)
                                     for key, space in observation_space.spaces.items()})

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        KeyedEncoder.seen_keys.update(observations)
        return torch.relu(sum(layer(observations[key].flatten(1).float()) for key, layer in self.layers.items()))


def not_a_module(observation_space: gym.Space) -> torch.Tensor:
    return torch.zeros(1)


class NoFeatures(nn.Module):
    def __init__(self, observation_space: gym.Space) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
