"""Forward and hand-derived backward for plain Linear/ReLU MLPs on the CPU, computed by NumPy.

For the small networks of classic control, an update's cost is per-operation
overhead, not arithmetic. Autograd's graph and engine roughly double the cost of
the dozen matrix operations the gradient really needs, and each torch call
costs several microseconds of dispatch where NumPy's costs one or two. This
module does those operations with NumPy on views of the network's own
parameters, so the optimiser (torch) and the forward here see the same memory.
It covers `nn.Sequential(Linear, ReLU, ..., Linear)` on the CPU only; agents
fall back to autograd for anything else, and a test checks both give the same
parameters.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def supports(network: nn.Module) -> bool:
    """True for Sequential(Linear, ReLU, Linear, ..., Linear)."""
    if not isinstance(network, nn.Sequential) or len(network) % 2 == 0:
        return False
    return all(
        isinstance(layer, nn.Linear if index % 2 == 0 else nn.ReLU) for index, layer in enumerate(network)
    )


class FastMLP:
    """NumPy views of a CPU MLP's parameters, with a forward and a hand-derived backward (no autograd)."""

    def __init__(self, network: nn.Sequential) -> None:
        if not supports(network):
            raise ValueError("FastMLP covers Sequential(Linear, ReLU, ..., Linear) networks only")
        # The Parameter objects themselves (their values change in place or through `.data`), looked up
        # once: nn.Module attribute access costs about a microsecond per call.
        self.layers = [(layer.weight, layer.bias) for layer in network if isinstance(layer, nn.Linear)]
        self._tensors = [tensor for layer in self.layers for tensor in layer]
        self._views_key: list[int] = []
        self._views: list[tuple[np.ndarray, np.ndarray]] = []
        self._gradient: np.ndarray | None = None
        self._gradient_views: list[np.ndarray] = []
        self.grads: list[torch.Tensor] = []
        """Torch views of `backward`'s result, one per parameter in `network.parameters()` order: what the
        optimiser reads as `.grad`."""

    def predict(self, inputs: np.ndarray) -> np.ndarray:
        """The output alone (for acting: 8 rows through 4-64-64-2 take 25 us here, against 49 us in torch)."""
        return self.forward(inputs)[0]

    def forward(self, inputs: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """The output, and the input of every linear layer (what `backward` needs)."""
        layers = self._parameter_views()
        layer_inputs = [inputs]
        hidden = inputs
        last = len(layers) - 1
        for index, (weight_t, bias) in enumerate(layers):
            hidden = hidden @ weight_t
            hidden += bias
            if index < last:
                np.maximum(hidden, 0.0, out=hidden)
                layer_inputs.append(hidden)
        return hidden, layer_inputs

    def backward(self, output_grad: np.ndarray, layer_inputs: list[np.ndarray]) -> np.ndarray:
        """The gradient of every parameter, as one flat array that `grads` views (overwritten by the next
        call): its norm is then one call, and nothing is allocated per parameter. Call it after the
        `forward` that made `layer_inputs`: that call refreshed the parameter views this one reads."""
        gradient, views = self._gradient_storage()
        layers = self._views
        grad = output_grad
        for index in range(len(layers) - 1, -1, -1):
            layer_input = layer_inputs[index]
            np.matmul(grad.T, layer_input, out=views[2 * index])
            np.add.reduce(grad, axis=0, out=views[2 * index + 1])
            if index:  # through the ReLU: its input was positive where its output is
                grad = grad @ layers[index][0].T
                grad *= layer_input > 0
        return gradient

    def _parameter_views(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(weight transposed, bias) per layer. In-place updates show through these views; they are made
        again when a tensor's storage changes (`ParameterHandover.adopt` swaps `.data`)."""
        key = [tensor.data_ptr() for tensor in self._tensors]
        if key != self._views_key:
            self._views = [(weight.detach().numpy().T, bias.detach().numpy()) for weight, bias in self.layers]
            self._views_key = key
        return self._views

    def _gradient_storage(self) -> tuple[np.ndarray, list[np.ndarray]]:
        if self._gradient is None:
            parameters = self._tensors
            flat = torch.zeros(sum(p.numel() for p in parameters), dtype=parameters[0].dtype)
            self.grads = [view.view_as(p) for view, p in zip(flat.split([p.numel() for p in parameters]), parameters)]
            self._gradient = flat.numpy()
            self._gradient_views = [grad.numpy() for grad in self.grads]
        return self._gradient, self._gradient_views
