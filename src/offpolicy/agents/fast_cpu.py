"""DQN's fast path on the CPU: the same acting and the same update as `dqn.py`, computed by NumPy.

For the small networks of classic control, an update's cost is per-operation
overhead, not arithmetic. Autograd's graph and engine roughly double the cost of
the dozen matrix operations the gradient really needs, and each torch call
costs several microseconds of dispatch where NumPy's costs one or two. So for a
Q-network that is a plain Linear/ReLU MLP after a flattening encoder or after the
small image encoder (MinAtar's one 3x3 convolution), this module runs the forward
pass and a hand-derived backward pass with NumPy, on views of the network's own
parameters (the optimiser, torch's, and the forward here see the same memory):
about 2-3 times as fast as autograd for a 64-wide network. The convolution is
one matrix product over every 3x3 window of the images laid out as rows. A
dueling network is covered too: its value and advantage heads together are one
linear layer (`DuelingOutput`).

`make_learner` picks `FastDQNLearner` wherever it applies (`covers`); it trains
with autograd on other devices. Tests check that both paths give the same
actions, losses and parameters.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view
from torch import nn

from offpolicy.agents.dqn import DQNConfig, DQNLearner, DQNPolicy
from offpolicy.agents.networks import DuelingQNetwork, EncodedMLP, Encoder, FlattenEncoder, ImageEncoder, make_encoder
from offpolicy.buffer import TransitionBatch
from offpolicy.policy import TrainOutput


def supported_encoder(encoder: Encoder) -> bool:
    """A flattening encoder, or the small image encoder: one 3x3 convolution of stride 1."""
    if isinstance(encoder, ImageEncoder):
        layers = list(encoder.convolutions)
        if len(layers) != 1:
            return False
        shape = (layers[0].kernel_size, layers[0].stride, layers[0].padding, layers[0].dilation, layers[0].groups)
        return shape == ((3, 3), (1, 1), (0, 0), (1, 1), 1)
    return isinstance(encoder, FlattenEncoder)


def supports(network: nn.Module) -> bool:
    """True for a supported encoder (`supported_encoder`) followed by Linear, ReLU, Linear, ..., Linear, or
    by a dueling network's trunk of Linear, ReLU pairs and its two heads of one value per action."""
    if isinstance(network, DuelingQNetwork) and network.atoms == 1:
        layers = [*network.trunk[0], *network.trunk[1:]]
        expected = len(layers) % 2 == 0
    elif isinstance(network, EncodedMLP):
        layers = network.head
        expected = len(layers) % 2 == 1
    else:
        return False
    return supported_encoder(network.encoder) and expected and all(
        isinstance(layer, nn.Linear if index % 2 == 0 else nn.ReLU) for index, layer in enumerate(layers)
    )


def flat_rows(values: np.ndarray) -> np.ndarray:
    """A batch as a float32 matrix, one flattened row per item (what `FlattenEncoder` computes), without
    copying where possible."""
    return values.reshape(len(values), -1).astype(np.float32, copy=False)


def scalar_tensor(value: np.floating) -> torch.Tensor:
    """A NumPy scalar as a 0-d float32 tensor (a third of `torch.tensor`'s cost)."""
    return torch.from_numpy(np.asarray(value, dtype=np.float32))


class SmallConvolution:
    """The small image encoder's convolution (3x3, stride 1), its ReLU and flattening, by NumPy.

    Every 3x3 window of the images becomes one row of `columns` (im2col), so that the convolution is one
    matrix product with the filters as rows, and their gradient another."""

    def __init__(self, encoder: ImageEncoder) -> None:
        self.scale = np.float32(encoder.scale)
        self.channels_last = encoder.channels_last

    def columns(self, images: np.ndarray) -> np.ndarray:
        """Each image's 3x3 windows as rows of (row offset, column offset, channel) values, scaled as the
        encoder scales its input: shape (images * windows, 9 * channels), windows in row-major order."""
        if not self.channels_last:
            images = images.transpose(0, 2, 3, 1)
        if images.dtype == np.bool_:
            images = images.view(np.uint8)
        count, height, width, channels = images.shape
        windows = sliding_window_view(images, (3, 3), axis=(1, 2))  # count, rows, columns, channel, 3, 3
        columns = np.empty((count, height - 2, width - 2, 3, 3, channels), np.float32)
        columns[...] = windows.transpose(0, 1, 2, 4, 5, 3)
        if self.scale != 1.0:
            columns *= self.scale
        return columns.reshape(-1, 9 * channels)

    def forward(self, images: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                columns: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The features after the ReLU, flattened in (filter, row, column) order as torch flattens them, and
        the columns (for `backward`; given, the images' `columns` already made). `weight` is laid out as
        torch's: (filters, channels, 3, 3)."""
        if columns is None:
            columns = self.columns(images)
        kernel = weight.transpose(0, 2, 3, 1).reshape(len(weight), -1)  # in `columns`' order: a small copy
        maps = columns @ kernel.T  # (images * windows, filters)
        maps += bias
        count = len(images)
        features = maps.reshape(count, -1, len(bias)).transpose(0, 2, 1).reshape(count, -1)
        np.maximum(features, 0.0, out=features)
        return features, columns

    @staticmethod
    def backward(features_grad: np.ndarray, columns: np.ndarray, weight_grad: np.ndarray,
                 bias_grad: np.ndarray) -> None:
        """The filters' and biases' gradients (into `weight_grad`, shaped as the weight, and `bias_grad`)
        from the gradient of the features (already through the ReLU) and the forward's `columns`."""
        filters = len(bias_grad)
        maps_grad = features_grad.reshape(len(features_grad), filters, -1).transpose(0, 2, 1).reshape(-1, filters)
        kernel_grad = maps_grad.T @ columns[:len(maps_grad)]  # (filters, 9 * channels)
        weight_grad[...] = kernel_grad.reshape(filters, 3, 3, -1).transpose(0, 3, 1, 2)
        np.add.reduce(maps_grad, axis=0, out=bias_grad)


class DuelingOutput:
    """A dueling network's value and advantage heads as the one linear layer they are together:
    Q = V + A - mean_a A = h W^T + b, with W = W_v + W_a - mean_a W_a (each row of W_a less their mean, plus
    the value's row) and b = b_v + b_a - mean_a b_a. So the network is an MLP whose last layer is computed
    from the heads' parameters, and that layer's gradient goes back to them: to W_v its sum over actions, to
    W_a its deviation from the mean over actions (likewise for the biases)."""

    @staticmethod
    def combine(value_weight: np.ndarray, value_bias: np.ndarray, advantage_weight: np.ndarray,
                advantage_bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(W transposed, b) of the output layer, from the heads' parameters (torch's layout)."""
        weight = advantage_weight - advantage_weight.mean(0)
        weight += value_weight
        bias = advantage_bias - advantage_bias.mean()
        bias += value_bias
        return weight.T, bias

    @staticmethod
    def split_gradient(weight_grad: np.ndarray, bias_grad: np.ndarray, head_grads: list[np.ndarray]) -> None:
        """The heads' gradients (into `head_grads`: value weight, value bias, advantage weight, advantage
        bias) from the output layer's (W's, shape (actions, width), and b's)."""
        value_weight, value_bias, advantage_weight, advantage_bias = head_grads
        np.add.reduce(weight_grad, axis=0, keepdims=True, out=value_weight)
        np.subtract(weight_grad, value_weight / len(weight_grad), out=advantage_weight)
        value_bias[...] = bias_grad.sum()
        np.subtract(bias_grad, value_bias / len(bias_grad), out=advantage_bias)


class FastMLP:
    """NumPy views of a CPU network's parameters (a supported encoder, then a Linear/ReLU MLP or a dueling
    network's trunk and heads), with a forward and a hand-derived backward (no autograd)."""

    def __init__(self, network: EncodedMLP | DuelingQNetwork) -> None:
        if not supports(network):
            raise ValueError("FastMLP covers a flattening or small image encoder and a Linear/ReLU MLP (or "
                             "dueling network) only")
        # The Parameter objects themselves (their values change in place or through `.data`), looked up
        # once: nn.Module attribute access costs about a microsecond per call.
        self.dueling = isinstance(network, DuelingQNetwork)
        linear = network.trunk.modules() if self.dueling else network.head
        self.layers = [(layer.weight, layer.bias) for layer in linear if isinstance(layer, nn.Linear)]
        self._heads = [network.value.weight, network.value.bias, network.advantage.weight,
                       network.advantage.bias] if self.dueling else []
        encoder = network.encoder
        self.convolution = SmallConvolution(encoder) if isinstance(encoder, ImageEncoder) else None
        self._encoder_tensors = list(encoder.parameters())  # in `network.parameters()` order
        self._tensors = self._encoder_tensors + [tensor for layer in self.layers for tensor in layer] + self._heads
        self._head_views: list[np.ndarray] = []
        self._layers: list[tuple[np.ndarray, np.ndarray]] = []
        self._views_key: list[int] = []
        self._views: list[tuple[np.ndarray, np.ndarray]] = []
        self._encoder_views: list[np.ndarray] = []
        self._gradient: np.ndarray | None = None
        self._gradient_views: list[np.ndarray] = []
        self.grads: list[torch.Tensor] = []
        """Torch views of `backward`'s result, one per parameter in `network.parameters()` order: what the
        optimiser reads as `.grad`."""

    def predict(self, observations: np.ndarray, columns: np.ndarray | None = None) -> np.ndarray:
        """The output alone (for acting: about half of torch's time for a few rows through a small MLP)."""
        return self.forward(observations, columns)[0]

    def forward(self, observations: np.ndarray,
                columns: np.ndarray | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
        """The output, and the input of every linear layer (what `backward` needs; after them, for a
        convolution, its columns). A convolution's `columns` of these observations, when another network's
        forward made them (`SmallConvolution.columns`), are not made again."""
        layers = self._parameter_views()
        if self.convolution is None:
            inputs, columns = flat_rows(observations), None
        else:
            weight, bias = self._encoder_views
            inputs, columns = self.convolution.forward(observations, weight, bias, columns)
        layer_inputs = [inputs]
        hidden = inputs
        last = len(layers) - 1
        for index, (weight_t, bias) in enumerate(layers):
            hidden = hidden @ weight_t
            hidden += bias
            if index < last:
                np.maximum(hidden, 0.0, out=hidden)
                layer_inputs.append(hidden)
        if columns is not None:
            layer_inputs.append(columns)
        return hidden, layer_inputs

    def backward(self, output_grad: np.ndarray, layer_inputs: list[np.ndarray]) -> np.ndarray:
        """The gradient of every parameter, as one flat array that `grads` views (overwritten by the next
        call): its norm is then one call, and nothing is allocated per parameter. `output_grad` may cover
        the first rows of the forward's batch alone. Call it after the `forward` that made `layer_inputs`:
        that call refreshed the parameter views this one reads."""
        gradient, views = self._gradient_storage()
        layers = self._layers
        rows = len(output_grad)
        first = len(self._encoder_tensors)  # where the linear layers' gradients start in `views`
        grad = output_grad
        for index in range(len(layers) - 1, -1, -1):
            layer_input = layer_inputs[index][:rows]
            if self.dueling and index == len(layers) - 1:
                DuelingOutput.split_gradient(grad.T @ layer_input, np.add.reduce(grad, axis=0), views[-4:])
            else:
                np.matmul(grad.T, layer_input, out=views[first + 2 * index])
                np.add.reduce(grad, axis=0, out=views[first + 2 * index + 1])
            if index or self.convolution is not None:  # through the ReLU: positive input where positive output
                grad = grad @ layers[index][0].T
                grad *= layer_input > 0
        if self.convolution is not None:
            self.convolution.backward(grad, layer_inputs[-1], views[0], views[1])
        return gradient

    def _parameter_views(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(weight transposed, bias) per layer, the dueling output layer computed afresh, and the encoder's
        parameters in `_encoder_views`. In-place updates show through these views; they are made again when a
        tensor's storage changes (`ParameterHandover.adopt` swaps `.data`). `backward` reads the layers of
        the last call."""
        key = [tensor.data_ptr() for tensor in self._tensors]
        if key != self._views_key:
            self._views = [(weight.detach().numpy().T, bias.detach().numpy()) for weight, bias in self.layers]
            self._encoder_views = [tensor.detach().numpy() for tensor in self._encoder_tensors]
            self._head_views = [tensor.detach().numpy() for tensor in self._heads]
            self._views_key = key
        self._layers = self._views + [DuelingOutput.combine(*self._head_views)] if self.dueling else self._views
        return self._layers

    def _gradient_storage(self) -> tuple[np.ndarray, list[np.ndarray]]:
        if self._gradient is None:
            parameters = self._tensors
            flat = torch.zeros(sum(p.numel() for p in parameters), dtype=parameters[0].dtype)
            self.grads = [view.view_as(p) for view, p in zip(flat.split([p.numel() for p in parameters]), parameters)]
            self._gradient = flat.numpy()
            self._gradient_views = [grad.numpy() for grad in self.grads]
        return self._gradient, self._gradient_views


class NumpyDQNPolicy(DQNPolicy):
    """`DQNPolicy` acting through NumPy on the CPU: what `act` chooses, without torch's per-call cost."""

    def __init__(self, q_network: EncodedMLP, exploration) -> None:
        super().__init__(q_network, exploration)
        self._numpy = FastMLP(q_network)

    def act_arrays(self, observations: np.ndarray, deterministic: bool) -> tuple[np.ndarray, dict[str, float]]:
        if self.device.type != "cpu":
            return super().act_arrays(observations, deterministic)
        greedy = self._numpy.predict(observations).argmax(1)
        if deterministic:
            return greedy, {}
        actions, epsilon = self.exploration.choose(greedy)
        return actions, {"exploration_rate": epsilon}


class FastDQNLearner(DQNLearner):
    """`DQNLearner` whose update, on the CPU, is computed by NumPy with the gradient written out by hand."""

    policy_class = NumpyDQNPolicy

    @staticmethod
    def covers(observation_space: gym.Space, config: DQNConfig) -> bool:
        """Whether DQN's networks for this observation space and config are ones this fast path computes
        (a flattening or small image encoder and ReLU layers, dueling or not)."""
        if config.activation != "relu":
            return False
        try:
            return supported_encoder(make_encoder(observation_space, "DQN", config.network))
        except ValueError:
            return False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._online = FastMLP(self.q_network)
        self._target = FastMLP(self.target_network)
        self._target_parameters = list(self.target_network.parameters())
        self._grad_scale = torch.ones(())

    def train(self, batch: TransitionBatch) -> TrainOutput:
        """`DQNLearner.train`, step for step."""
        if self.device.type != "cpu":
            return super().train(batch)
        c = self.config
        rewards, terminated, actions = batch.rewards.numpy(), batch.terminated.numpy(), batch.actions.numpy()
        discounts = batch.discounts.numpy()
        weights = batch.weights.numpy()
        size, rows = len(rewards), np.arange(len(rewards))
        observations, next_observations = batch.observations.numpy(), batch.next_observations.numpy()
        if c.double_q:  # one online pass over both halves: Q(s, .) for the loss, Q(s', .) for the argmax
            q_both, layer_inputs = self._online.forward(np.concatenate((observations, next_observations)))
            # the online pass laid out the windows of s' for its convolution: the target's takes them
            next_columns = layer_inputs[-1][len(layer_inputs[-1]) // 2:] if self._online.convolution else None
            next_q = self._target.predict(next_observations, next_columns)[rows, q_both[size:].argmax(1)]
        else:
            q_both, layer_inputs = self._online.forward(observations)
            next_q = self._target.predict(next_observations).max(1)
        target = rewards + discounts * (1.0 - terminated) * next_q
        q_values = q_both[rows, actions]
        error = q_values - target
        clipped = np.minimum(np.maximum(error, -1.0), 1.0)  # the Huber loss's gradient
        weighted = weights * clipped
        loss = np.dot(weighted, error - 0.5 * clipped) / size  # the Huber loss: clipped * (error - clipped / 2)

        q_grad = np.zeros((size, q_both.shape[1]), np.float32)
        q_grad[rows, actions] = weighted / size
        gradient = self._online.backward(q_grad, layer_inputs)
        # clip_grad_norm_'s rescaling, done by the optimiser's step: gradients divided by max(1, norm / max_norm)
        norm = float(np.sqrt(np.dot(gradient, gradient)))
        self._grad_scale.fill_(max(1.0, (norm + 1e-6) / c.max_grad_norm))
        for parameter, grad in zip(self.parameters, self._online.grads):
            parameter.grad = grad
        self.optimizer.step(self._grad_scale)
        self.updates += 1
        if c.target_update_interval == 0:  # update_target's soft update, on lists made once
            with torch.no_grad():
                torch._foreach_lerp_(self._target_parameters, self.parameters, c.tau)
        else:
            self.update_target()
        metrics = {"loss": scalar_tensor(loss), "q_values": scalar_tensor(np.add.reduce(q_values) / size)}
        return TrainOutput(metrics, torch.from_numpy(np.abs(error)))
