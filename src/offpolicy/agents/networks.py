"""Network parts every agent builds from: an encoder chosen from the observation space, the MLP, and the
networks made of them (Q-network, dueling Q-network, actor, twin critic).

The encoder turns a batch of observations as stored (any dtype and shape) into
float feature rows; everything after it is sized from `encoder.features`, so an
agent never looks at the observation's shape itself. Images (uint8 or bool Boxes
of three dimensions) go through convolutions, other Boxes and MultiBinary
observations are flattened, a Discrete observation becomes a one-hot row, and a
Dict or Tuple observation (stored as one record, `offpolicy.observations`) is
unpacked key by key, each key encoded by its own kind and the results joined.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from offpolicy.agents.custom_encoder import CustomEncoder
from offpolicy.envs import EnvError
from offpolicy.observations import Leaf, ObservationLayout


class Encoder(nn.Module):
    """Observations (batched along the first dimension) to float32 feature rows of width `features`."""

    features: int


class FlattenEncoder(Encoder):
    """A Box (or MultiBinary) observation of any shape, flattened to one float32 row per observation (no
    parameters)."""

    def __init__(self, observation_space: gym.spaces.Box | gym.spaces.MultiBinary | None, features: int = 0) -> None:
        """Sized from `observation_space`, or given the row width `features` directly."""
        super().__init__()
        self.features = int(np.prod(observation_space.shape)) if observation_space is not None else features

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


def image_layout(space: gym.Space) -> tuple[int, int, int, bool] | None:
    """(channels, height, width, channels_last) when `space` holds images, as Gymnasium and Stable-Baselines3
    judge them: a 3-dimensional Box of uint8 in [0, 255] or of bool; the channels are the smaller end
    dimension (the last where both ends are equal, as Gymnasium renders them). None otherwise."""
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
        return None
    pixels = space.dtype == np.uint8 and bool(np.all(space.low == 0)) and bool(np.all(space.high == 255))
    if not (pixels or space.dtype == np.bool_):
        return None
    first, height, last = space.shape
    if first < last:
        return first, height, last, False
    return last, first, height, True


class ImageEncoder(Encoder):
    """Images to feature rows through convolutions, scaled to [0, 1] inside the network (on the learner's
    device), channels moved first where the env gives them last.

    Frames of 36 pixels or more a side get the Nature-DQN stack (Mnih et al., 2015: 32 8x8 filters with
    stride 4, 64 4x4 with stride 2, 64 3x3); smaller grids, such as MinAtar's 10x10, one layer of 16 3x3
    filters (Young and Tian, 2019). The MLP after the encoder plays the fully connected layers.

    Memory layout: the Nature stack's weights and images are channels last, which the CPU's kernels run about
    a quarter faster on, and its last feature map is made contiguous before its ReLU, so that the ReLU, its
    gradient and the flattening (in channel, row, column order) all see one layout. The small stack is
    faster contiguous throughout.
    """

    def __init__(self, observation_space: gym.spaces.Box) -> None:
        super().__init__()
        layout = image_layout(observation_space)
        assert layout is not None
        channels, height, width, self.channels_last = layout
        self.scale = 1.0 if observation_space.dtype == np.bool_ else 1.0 / 255.0
        self.memory_format = torch.channels_last if min(height, width) >= 36 else torch.contiguous_format
        if self.memory_format == torch.channels_last:
            self.convolutions = nn.Sequential(
                nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
                nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=1),
            )
        else:
            self.convolutions = nn.Sequential(nn.Conv2d(channels, 16, 3, stride=1))
        self.convolutions.to(memory_format=self.memory_format)
        with torch.no_grad():
            self.features = int(self(torch.zeros(1, *observation_space.shape, dtype=torch.uint8)).shape[1])

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        images = observations.permute(0, 3, 1, 2) if self.channels_last else observations
        # a copy (never the caller's tensor), converted and laid out in one pass
        images = images.to(torch.float32, memory_format=self.memory_format, copy=True).mul_(self.scale)
        return torch.relu(self.convolutions(images).contiguous()).flatten(1)


class DictEncoder(Encoder):
    """A Dict or Tuple observation, stored as one record per step: each leaf read back from its stretch of
    the record (its bytes viewed as its dtype where the record is bytes), encoded by the encoder of its own
    kind (an image by convolutions, a vector flattened, a Discrete one-hot) and the features joined in the
    space's key order."""

    def __init__(self, layout: ObservationLayout, encoders: list[Encoder]) -> None:
        super().__init__()
        self.leaves: tuple[Leaf, ...] = layout.leaves
        self.bytes = layout.bytes
        self.encoders = nn.ModuleList(encoders)
        self.features = sum(encoder.features for encoder in encoders)
        self._dtypes = [torch.from_numpy(np.zeros(0, leaf.dtype)).dtype for leaf in self.leaves]

    def unpack(self, records: torch.Tensor) -> list[torch.Tensor]:
        """Each leaf of a batch of records, shape (batch, *leaf shape)."""
        parts = []
        for leaf, dtype in zip(self.leaves, self._dtypes):
            part = records[:, leaf.start : leaf.stop]
            if self.bytes:
                part = part.contiguous().view(dtype)
            parts.append(part.reshape(-1, *leaf.shape))
        return parts

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        parts = self.unpack(observations)
        return torch.cat([encoder(part) for encoder, part in zip(self.encoders, parts)], dim=1)


class NamedLeavesEncoder(DictEncoder):
    """A user's encoder over a Dict or Tuple observation: each batch of records unpacked into a dict of
    batched tensors keyed by leaf name (`observation`, `sensors/0`), handed to it whole."""

    def __init__(self, layout: ObservationLayout, inner: nn.Module) -> None:
        super().__init__(layout, [])
        self.inner = inner
        self.features = inner.features

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.inner({leaf.name: part for leaf, part in zip(self.leaves, self.unpack(observations))})


def make_encoder(
    observation_space: gym.Space, agent: str, network: str = "auto", custom: CustomEncoder | None = None
) -> Encoder:
    """The encoder for `observation_space` (`network` auto, mlp or cnn; or the user's `custom` one), or an
    error naming the agent and the space it cannot take."""
    layout = ObservationLayout(observation_space)
    if custom is not None:
        inner = custom.build(observation_space)
        return NamedLeavesEncoder(layout, inner) if layout.structured else inner  # type: ignore[return-value]
    if layout.structured:
        return _structured_encoder(layout, agent, network)
    image = image_layout(observation_space) is not None
    if network == "cnn" and not image:
        raise EnvError(f"network cnn needs image observations (a 3-dimensional Box of uint8 in [0, 255] or of "
                       f"bool), got {observation_space}")
    return _leaf_encoder(observation_space, agent, network)


def _leaf_encoder(space: gym.Space, agent: str, network: str) -> Encoder:
    if image_layout(space) is not None and network != "mlp":
        return ImageEncoder(space)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return FlattenEncoder(space)
    if isinstance(space, gym.spaces.Discrete):
        return OneHotEncoder(space)
    raise EnvError(f"{agent} needs a Box, Discrete, MultiBinary, Dict or Tuple observation space, got {space}")


def _structured_encoder(layout: ObservationLayout, agent: str, network: str) -> Encoder:
    """A `DictEncoder`; or, where every leaf is flattened and the record is one dtype, a `FlattenEncoder`
    over the whole record, which computes the same (the record is the leaves' concatenation)."""
    encoders = [_leaf_encoder(leaf.stored_space, agent, network) for leaf in layout.leaves]
    if network == "cnn" and not any(isinstance(encoder, ImageEncoder) for encoder in encoders):
        raise EnvError(f"network cnn needs an image among the observation's keys (a 3-dimensional Box of uint8 in "
                       f"[0, 255] or of bool), got {layout.space}")
    if not layout.bytes and all(type(encoder) is FlattenEncoder for encoder in encoders):
        return FlattenEncoder(None, features=sum(encoder.features for encoder in encoders))
    return DictEncoder(layout, encoders)


ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "gelu": nn.GELU}
"""The activations between hidden layers one may ask for (`--activation`)."""
_FUNCTIONAL = {"relu": torch.relu, "tanh": torch.tanh, "elu": F.elu, "gelu": F.gelu}


def mlp(inputs: int, outputs: int, widths: Sequence[int], activation: str = "relu") -> nn.Sequential:
    """Linear layers through hidden layers of `widths`, with `activation` between them."""
    sizes = [inputs, *widths, outputs]
    modules: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        if index:
            modules.append(ACTIVATIONS[activation]())
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

    def __init__(self, encoder: Encoder, outputs: int, widths: Sequence[int], activation: str = "relu") -> None:
        head = mlp(encoder.features, outputs, widths, activation)
        super().__init__(OrderedDict([("encoder", encoder), *((str(i), layer) for i, layer in enumerate(head))]))

    @property
    def head(self) -> list[nn.Module]:
        """The MLP's layers, in order."""
        return list(self)[1:]


def q_network(
    encoder: Encoder, actions: int, widths: Sequence[int], dueling: bool, atoms: int = 1, activation: str = "relu"
) -> nn.Module:
    """A network from observations to `atoms` values per action, shape (batch, actions * atoms), action-major:
    a plain MLP, or with `dueling` separate value and advantage heads."""
    if dueling:
        return DuelingQNetwork(encoder, actions, widths, atoms, activation)
    return EncodedMLP(encoder, actions * atoms, widths, activation)


class DuelingQNetwork(nn.Module):
    """Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a') (Wang et al., 2016): an encoder and an MLP trunk through
    the hidden `widths`, shared by a value head and an advantage head; with `atoms` > 1 each of V and A
    has that many values (quantiles), combined atom by atom."""

    def __init__(
        self, encoder: Encoder, actions: int, widths: Sequence[int], atoms: int = 1, activation: str = "relu"
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.actions, self.atoms = actions, atoms
        trunk = mlp(encoder.features, widths[-1], widths[:-1], activation)
        self.trunk = nn.Sequential(trunk, ACTIVATIONS[activation]())
        self.value = nn.Linear(widths[-1], atoms)
        self.advantage = nn.Linear(widths[-1], actions * atoms)

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

    def __init__(
        self, encoder: Encoder, action_size: int, widths: Sequence[int], copies: int = 2, activation: str = "relu"
    ) -> None:
        super().__init__()
        self.activation = _FUNCTIONAL[activation]  # a function, not a module: one call less per layer
        sizes = [encoder.features + action_size, *widths, 1]
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
                hidden = self.activation(hidden)
        return hidden.squeeze(-1)
