"""Forward and hand-derived backward for plain Linear/ReLU MLPs.

For the small networks of classic control, an update's cost is per-operation
overhead, not arithmetic: autograd's graph building and engine roughly double
the time of the dozen matrix operations the gradient really needs. This module
does those operations directly. It covers `nn.Sequential(Linear, ReLU, ...,
Linear)` only; agents fall back to autograd for anything else, and a test
checks both paths give the same parameters.
"""

from __future__ import annotations

import torch
from torch import nn


def supports(network: nn.Module) -> bool:
    """True for Sequential(Linear, ReLU, Linear, ..., Linear)."""
    if not isinstance(network, nn.Sequential) or len(network) % 2 == 0:
        return False
    return all(
        isinstance(layer, nn.Linear if index % 2 == 0 else nn.ReLU) for index, layer in enumerate(network)
    )


_relu_backward = torch.ops.aten.threshold_backward.default


class FastMLP:
    """A view of an MLP's parameters with a manual forward and backward (no autograd)."""

    def __init__(self, network: nn.Sequential) -> None:
        if not supports(network):
            raise ValueError("FastMLP covers Sequential(Linear, ReLU, ..., Linear) networks only")
        # The Parameter objects themselves (their values change in place or through `.data`), looked up
        # once: nn.Module attribute access costs about a microsecond per call.
        self.layers = [(layer.weight, layer.bias) for layer in network if isinstance(layer, nn.Linear)]

    def predict(self, inputs: torch.Tensor) -> torch.Tensor:
        """The output alone (inference; call under `torch.no_grad()`)."""
        hidden = inputs
        last = len(self.layers) - 1
        for index, (weight, bias) in enumerate(self.layers):
            hidden = torch.addmm(bias, hidden, weight.t())
            if index < last:
                hidden = hidden.relu_()
        return hidden

    def forward(self, inputs: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The output, and the input of every linear layer (what the backward pass needs)."""
        layer_inputs = [inputs]
        hidden = inputs
        last = len(self.layers) - 1
        for index, (weight, bias) in enumerate(self.layers):
            hidden = torch.addmm(bias, hidden, weight.t())
            if index < last:
                hidden = hidden.relu_()
                layer_inputs.append(hidden)
        return hidden, layer_inputs

    def backward(self, output_grad: torch.Tensor, layer_inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Gradients of every parameter, in `network.parameters()` order (weight, bias, ...)."""
        grads: list[torch.Tensor] = []
        grad = output_grad
        for index in range(len(self.layers) - 1, -1, -1):
            layer_input = layer_inputs[index]
            grads.append(grad.sum(0))
            grads.append(grad.t().mm(layer_input))
            if index:  # through the ReLU: the kernel autograd uses, one op instead of compare and multiply
                grad = _relu_backward(grad.mm(self.layers[index][0]), layer_input, 0.0)
        grads.reverse()
        return grads
