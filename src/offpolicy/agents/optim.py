"""Lean optimisers for small networks: Adam's fused kernel called directly, and centred RMSProp in a
handful of multi-tensor calls.

For networks of a few thousand weights the cost of an optimiser step is
bookkeeping, not arithmetic: measured here, `torch.optim.Adam(fused=True).step()`
takes about 190 µs, of which the fused kernel itself is about 35 µs. And
building any `torch.optim` optimiser imports TorchDynamo, 2.5 s at start-up.
`LeanAdam` keeps Adam's state itself and runs one step as two calls, count and
kernel (every parameter's step count is a view of one tensor, so counting is one
op), with the same results as `torch.optim.Adam` and a `state_dict` in the same
layout (a test checks both). Where torch has no fused kernel for the
device it hands everything to `torch.optim.Adam`.

`LeanRMSProp` is the centred RMSProp of the DQN papers with the same results
and `state_dict` layout as `torch.optim.RMSprop` (a test checks both). On the
CPU each parameter's step is one pass of a loop compiled by numba over its
values, gradient and averages; elsewhere, or without numba, it is eight
multi-tensor calls, each a pass of its own (on the CPU those loop over the
parameters one at a time: for a MinAtar network about three times the compiled
step's time).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import torch


class LeanAdam:
    """Adam (no weight decay, no AMSGrad) with `zero_grad`, `step`, `state_dict`, `load_state_dict`."""

    def __init__(
        self,
        parameters: Iterable[torch.nn.Parameter],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params = list(parameters)
        self.lr, self.betas, self.eps = lr, betas, eps
        devices = {p.device for p in self.params}
        fused = hasattr(torch, "_fused_adam_") and len(devices) == 1 and devices.pop().type in ("cpu", "cuda")
        self._fallback = None if fused else torch.optim.Adam(self.params, lr=lr, betas=betas, eps=eps)
        self.exp_avgs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self._step_counts = torch.zeros(len(self.params), dtype=torch.float32, device=self.params[0].device)
        self.steps = list(self._step_counts.unbind())

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, grad_scale: torch.Tensor | None = None) -> None:
        """One Adam step from the parameters' `.grad`.

        `grad_scale` (a one-element tensor) divides every gradient first, inside the
        fused kernel: fast paths clip the gradient norm this way instead of with
        another pass over the gradients. The gradients are left divided.
        """
        if self._fallback is not None:
            if grad_scale is not None:
                torch._foreach_div_([p.grad for p in self.params], grad_scale)
            self._fallback.step()
            return
        self._step_counts.add_(1)
        torch._fused_adam_(
            self.params, [p.grad for p in self.params], self.exp_avgs, self.exp_avg_sqs, [], self.steps,
            amsgrad=False, lr=self.lr, beta1=self.betas[0], beta2=self.betas[1], weight_decay=0.0, eps=self.eps,
            maximize=False, grad_scale=grad_scale, found_inf=None,
        )

    def state_dict(self) -> dict[str, Any]:
        """Laid out as `torch.optim.Adam.state_dict()`, so either can load the other's."""
        if self._fallback is not None:
            return self._fallback.state_dict()
        state = {
            index: {"step": step.clone(), "exp_avg": exp_avg.clone(), "exp_avg_sq": exp_avg_sq.clone()}
            for index, (step, exp_avg, exp_avg_sq) in enumerate(zip(self.steps, self.exp_avgs, self.exp_avg_sqs))
        }
        group = {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": 0.0, "amsgrad": False,
                 "params": list(range(len(self.params)))}
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if self._fallback is not None:
            self._fallback.load_state_dict(dict(state_dict))
            return
        self.lr = float(state_dict["param_groups"][0]["lr"])
        states = state_dict["state"]
        for index, (step, exp_avg, exp_avg_sq) in enumerate(zip(self.steps, self.exp_avgs, self.exp_avg_sqs)):
            saved = states.get(index, states.get(str(index)))
            if saved is None:  # never stepped
                step.zero_(), exp_avg.zero_(), exp_avg_sq.zero_()
                continue
            step.copy_(torch.as_tensor(saved["step"]))
            exp_avg.copy_(saved["exp_avg"])
            exp_avg_sq.copy_(saved["exp_avg_sq"])


def _centred_rmsprop_loop(values: np.ndarray, grads: np.ndarray, square_avgs: np.ndarray, grad_avgs: np.ndarray,
                          alpha: np.float32, one_minus_alpha: np.float32, minus_lr: np.float32,
                          eps: np.float32, grad_factor: np.float32) -> None:
    """One parameter's step over its elements (flat arrays), its gradient multiplied by `grad_factor` first,
    in torch's order of operations (torch's kernels fuse some multiply-adds and round square roots their own
    way, so the two agree to about 1e-7)."""
    for i in range(values.shape[0]):
        g = grads[i] * grad_factor
        v = square_avgs[i] * alpha + one_minus_alpha * g * g
        m = grad_avgs[i] + one_minus_alpha * (g - grad_avgs[i])
        square_avgs[i] = v
        grad_avgs[i] = m
        values[i] = values[i] + minus_lr * g / (math.sqrt(v - m * m) + eps)


@functools.cache
def compiled_rmsprop() -> Callable | None:
    """The step loop compiled by numba (once per process), or None where numba cannot be imported."""
    try:
        import numba
    except ImportError:
        return None
    # error_model="numpy": no zero-division checks, so the loop vectorises
    return numba.njit(nogil=True, error_model="numpy")(_centred_rmsprop_loop)


def _dense(tensor: torch.Tensor) -> bool:
    return tensor.is_contiguous() or (tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last))


def _elements(tensor: torch.Tensor) -> np.ndarray:
    """A dense CPU tensor's elements in memory order, as a NumPy view."""
    return tensor.detach().as_strided((tensor.numel(),), (1,)).numpy()


class LeanRMSProp:
    """Centred RMSProp (no momentum, no weight decay) with `zero_grad`, `step`, `state_dict`,
    `load_state_dict`. Per step, for gradient g, with decay alpha:

        v <- alpha v + (1 - alpha) g^2          m <- alpha m + (1 - alpha) g
        theta <- theta - lr g / (sqrt(v - m^2) + eps)

    `compiled` chooses the implementation: True needs numba and CPU parameters, False is the multi-tensor
    calls, None (the default) compiles where it can.
    """

    def __init__(self, parameters: Iterable[torch.nn.Parameter], lr: float, alpha: float = 0.95,
                 eps: float = 0.01, compiled: bool | None = None) -> None:
        self.params = list(parameters)
        self.lr, self.alpha, self.eps = lr, alpha, eps
        self.square_avgs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.grad_avgs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self._denominators = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.steps = 0
        loop = compiled_rmsprop() if compiled is not False else None
        if loop is not None and not all(p.device.type == "cpu" and _dense(p) for p in self.params):
            loop = None
        if compiled and loop is None:
            raise ValueError("the compiled RMSProp step needs numba and dense parameters on the CPU")
        self._loop = loop
        self._pointers: list[int] = []
        """Where each parameter's values lived when `_views` were made."""
        self._views: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        """Per parameter, NumPy views of its values and of its averages."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, grad_scale: torch.Tensor | None = None) -> None:
        """One step from the parameters' `.grad`, in torch.optim.RMSprop's order of operations.

        `grad_scale` (a one-element tensor) divides every gradient first, as `LeanAdam.step`'s does (the
        gradients may be left divided)."""
        grads = [p.grad for p in self.params]
        if self._loop is not None and all(g.stride() == p.stride() for g, p in zip(grads, self.params)):
            # the scalars as torch's float32 kernels see them
            constants = (np.float32(self.alpha), np.float32(1 - self.alpha), np.float32(-self.lr),
                         np.float32(self.eps), np.float32(1.0 if grad_scale is None else 1.0 / grad_scale.item()))
            for (values, square, mean), g in zip(self._element_views(), grads):
                self._loop(values, _elements(g), square, mean, *constants)
            self.steps += 1
            return
        if grad_scale is not None:
            torch._foreach_div_(grads, grad_scale)
        torch._foreach_mul_(self.square_avgs, self.alpha)
        torch._foreach_addcmul_(self.square_avgs, grads, grads, value=1 - self.alpha)
        torch._foreach_lerp_(self.grad_avgs, grads, 1 - self.alpha)
        denominators = self._denominators  # kept between steps: a fresh large tensor costs page faults
        torch._foreach_copy_(denominators, self.square_avgs)
        torch._foreach_addcmul_(denominators, self.grad_avgs, self.grad_avgs, value=-1)
        torch._foreach_sqrt_(denominators)
        torch._foreach_add_(denominators, self.eps)
        torch._foreach_addcdiv_(self.params, grads, denominators, value=-self.lr)
        self.steps += 1

    def _element_views(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """NumPy views of each parameter's values and averages, made again if a parameter has moved."""
        pointers = [p.data_ptr() for p in self.params]
        if pointers != self._pointers:
            self._pointers = pointers
            self._views = [(_elements(p), _elements(square), _elements(mean))
                           for p, square, mean in zip(self.params, self.square_avgs, self.grad_avgs)]
        return self._views

    def state_dict(self) -> dict[str, Any]:
        """Laid out as `torch.optim.RMSprop(centered=True).state_dict()`, so either can load the other's."""
        state = {}
        if self.steps:
            state = {index: {"step": torch.tensor(float(self.steps)), "square_avg": square.clone(),
                             "grad_avg": mean.clone()}
                     for index, (square, mean) in enumerate(zip(self.square_avgs, self.grad_avgs))}
        group = {"lr": self.lr, "momentum": 0, "alpha": self.alpha, "eps": self.eps, "centered": True,
                 "weight_decay": 0, "capturable": False, "foreach": None, "maximize": False,
                 "differentiable": False, "params": list(range(len(self.params)))}
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.lr = float(state_dict["param_groups"][0]["lr"])
        states = state_dict["state"]
        self.steps = 0
        for index, (square, mean) in enumerate(zip(self.square_avgs, self.grad_avgs)):
            saved = states.get(index, states.get(str(index)))
            if saved is None:  # never stepped
                square.zero_(), mean.zero_()
                continue
            self.steps = int(torch.as_tensor(saved["step"]).item())
            square.copy_(saved["square_avg"])
            mean.copy_(saved["grad_avg"])


OPTIMIZERS = ("adam", "rmsprop")
"""The optimisers value-based agents offer (`make_optimizer`)."""


def make_optimizer(name: str, parameters: Iterable[torch.nn.Parameter], lr: float) -> Any:
    """`adam` (`LeanAdam`), or `rmsprop` (`LeanRMSProp`): the centred RMSProp of the Nature DQN and the
    MinAtar paper (squared-gradient decay 0.95, 0.01 added to the root), whose steps shrink for small
    gradients where Adam's do not."""
    if name == "rmsprop":
        return LeanRMSProp(parameters, lr, alpha=0.95, eps=0.01)
    return LeanAdam(parameters, lr)
