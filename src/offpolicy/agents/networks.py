"""Network parts every agent builds from: an encoder chosen from the observation space, the MLP, and the
networks made of them (Q-network, dueling Q-network, actor, twin critic).

The encoder turns a batch of observations as stored (any dtype and shape) into
float feature rows; everything after it is sized from `encoder.features`, so an
agent never looks at the observation's shape itself. Flat vectors (a Box or
MultiBinary of any shape) are flattened, a Discrete observation becomes a one-hot
row; other kinds of observation plug in here as encoders of their own.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from offpolicy.envs import EnvError


class Encoder(nn.Module):
    """Observations (batched along the first dimension) to float32 feature rows of width `features`."""

    features: int


class FlattenEncoder(Encoder):
    """A Box (or MultiBinary) observation of any shape, flattened to one float32 row per observation (no
    parameters)."""

    def __init__(self, observation_space: gym.spaces.Box | gym.spaces.MultiBinary) -> None:
        super().__init__()
        self.features = int(np.prod(observation_space.shape))

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return observations.flatten(1).to(torch.float32)


class OneHotEncoder(Encoder):
    """A Discrete observation (one integer, such as a grid world's cell) as a one-hot row of width n: stored
    as one integer per step, expanded only inside the network."""

    def __init__(self, observation_space: gym.spaces.Discrete) -> None:
        super().__init__()
        self.features = int(observation_space.n)
        self.start = int(observation_space.start)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return F.one_hot(observations.reshape(-1).long() - self.start, self.features).to(torch.float32)


def make_encoder(observation_space: gym.Space, agent: str) -> Encoder:
    """The encoder for `observation_space`, or an error naming the agent and the space it cannot take."""
    if isinstance(observation_space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return FlattenEncoder(observation_space)
    if isinstance(observation_space, gym.spaces.Discrete):
        return OneHotEncoder(observation_space)
    raise EnvError(f"{agent} needs a Box, Discrete or MultiBinary observation space, got {observation_space}")


def mlp(inputs: int, outputs: int, hidden: int, layers: int) -> nn.Sequential:
    """`layers` linear layers of width `hidden` with ReLU between them."""
    sizes = [inputs] + [hidden] * (layers - 1) + [outputs]
    modules: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        if index:
            modules.append(nn.ReLU())
        modules.append(nn.Linear(fan_in, fan_out))
    return nn.Sequential(*modules)


class EncodedMLP(nn.Sequential):
    """An encoder, then an MLP to `outputs` values: DQN's Q-network (one value per action), SAC's actor
    (mean and log-std per action dimension), TD3's actor (one pre-tanh value per action dimension).

    The MLP's layers are named 0, 1, 2, ... after `encoder`, as in a plain `nn.Sequential` MLP, so the
    parameters of a network over flat observations keep the names they had before encoders existed
    (and older checkpoints load as they are).
    """

    encoder: Encoder

    def __init__(self, encoder: Encoder, outputs: int, hidden: int, layers: int) -> None:
        head = mlp(encoder.features, outputs, hidden, layers)
        super().__init__(OrderedDict([("encoder", encoder), *((str(i), layer) for i, layer in enumerate(head))]))

    @property
    def head(self) -> list[nn.Module]:
        """The MLP's layers, in order."""
        return list(self)[1:]


def q_network(encoder: Encoder, actions: int, hidden: int, layers: int, dueling: bool, atoms: int = 1) -> nn.Module:
    """A network from observations to `atoms` values per action, shape (batch, actions * atoms), action-major:
    a plain MLP, or with `dueling` separate value and advantage heads."""
    if dueling:
        return DuelingQNetwork(encoder, actions, hidden, layers, atoms)
    return EncodedMLP(encoder, actions * atoms, hidden, layers)


class DuelingQNetwork(nn.Module):
    """Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a') (Wang et al., 2016): an encoder and an MLP trunk of
    `layers - 1` layers shared by a value head and an advantage head; with `atoms` > 1 each of V and A
    has that many values (quantiles), combined atom by atom."""

    def __init__(self, encoder: Encoder, actions: int, hidden: int, layers: int, atoms: int = 1) -> None:
        super().__init__()
        self.encoder = encoder
        self.actions, self.atoms = actions, atoms
        self.trunk = nn.Sequential(mlp(encoder.features, hidden, hidden, layers - 1), nn.ReLU())
        self.value = nn.Linear(hidden, atoms)
        self.advantage = nn.Linear(hidden, actions * atoms)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        features = self.trunk(self.encoder(observations))
        advantages = self.advantage(features).unflatten(1, (self.actions, self.atoms))
        values = self.value(features).unsqueeze(1)
        return (values + advantages - advantages.mean(dim=1, keepdim=True)).flatten(1)


class TwinCritic(nn.Module):
    """`copies` independent critics Q(s, a), each an MLP over [encoder(s), a], computed together.

    Stacking the critics' weights lets one batched matrix product per layer evaluate all of them, which
    halves the operations an update runs; on a CPU, where small updates are bound by per-operation
    overhead, that is a large part of an update's time.
    """

    def __init__(self, encoder: Encoder, action_size: int, hidden: int, layers: int, copies: int = 2) -> None:
        super().__init__()
        sizes = [encoder.features + action_size] + [hidden] * (layers - 1) + [1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes, sizes[1:]):
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default initialisation
            self.weights.append(nn.Parameter(torch.empty(copies, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(copies, 1, fan_out).uniform_(-bound, bound)))
        self.encoder = encoder
        self.copies = copies

    def forward(self, observations: torch.Tensor, unit_actions: torch.Tensor) -> torch.Tensor:
        """Q-values of shape (copies, batch), for actions scaled to [-1, 1]."""
        features = torch.cat((self.encoder(observations), unit_actions), dim=1)
        hidden = features.unsqueeze(0).expand(self.copies, -1, -1)
        last = len(self.weights) - 1
        for index, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            hidden = torch.baddbmm(bias, hidden, weight)
            if index < last:
                hidden = hidden.relu()
        return hidden.squeeze(-1)
