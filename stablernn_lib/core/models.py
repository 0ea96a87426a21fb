"""Recurrent models as maps ``state' = phi_w(state, x)``, ``h_0 = 0``: inputs ``(T, B, D)``, one
state tensor ``(B, S)`` (the LSTM's ``[c, h]``, ``S = 2H``)."""

from __future__ import annotations

import math
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from stablernn_lib.core.norms import activation_lipschitz, spectral_norm

Map = TypeVar("Map", bound="RecurrentMap")
Torch = TypeVar("Torch", bound=nn.RNNBase)
ACTIVATIONS = {
    "tanh": torch.tanh,
    "relu": torch.relu,
    "identity": lambda z: z,
    "sigmoid": torch.sigmoid,
}


def _check_activation(name: str) -> None:
    if name not in ACTIVATIONS:
        raise ValueError(
            f"unknown activation {name!r}: choose one of {sorted(ACTIVATIONS)} "
            "(each has a known Lipschitz constant)"
        )


class RecurrentMap(nn.Module):
    """Base class: a recurrent model as the map ``phi_w(state, x)``; subclasses set
    ``input_size``, ``hidden_size``, ``state_size`` and implement :meth:`step`."""

    input_size: int
    hidden_size: int
    state_size: int
    weight_hh: nn.Parameter
    weight_ih: nn.Parameter
    bias: nn.Parameter | None

    def step(self, state: Tensor, x: Tensor) -> Tensor:
        """One application of the map: ``(B, S), (B, D) -> (B, S)``."""
        raise NotImplementedError

    def output(self, states: Tensor) -> Tensor:
        """The hidden part ``h`` of states ``(..., S) -> (..., H)``."""
        return states

    def _init_weights(
        self,
        input_size: int,
        hidden_size: int,
        state_size: int,
        rows: int,
        bias: bool,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> None:
        """``weight_hh (rows, H)``, ``weight_ih (rows, D)`` uniform in ``+-1 / sqrt(H)``; a zero
        ``bias (rows,)`` or None."""
        if input_size < 1 or hidden_size < 1:
            raise ValueError("input_size and hidden_size must be positive integers")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.state_size = state_size
        factory = {"dtype": dtype, "device": device}
        bound = 1.0 / math.sqrt(hidden_size)
        self.weight_hh = nn.Parameter(torch.empty(rows, hidden_size, **factory))
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size, **factory))
        self.bias = nn.Parameter(torch.zeros(rows, **factory)) if bias else None
        for weight in (self.weight_hh, self.weight_ih):
            nn.init.uniform_(weight, -bound, bound)

    def zero_state(self, batch: int) -> Tensor:
        """The initial state ``h_0 = 0`` of shape ``(B, S)``."""
        weight = next(self.parameters())
        return weight.new_zeros(batch, self.state_size)

    @classmethod
    def _from_layer0(cls: type[Map], module: nn.RNNBase, **options: Any) -> Map:
        """The map with layer 0 of a fused ``torch.nn.RNN``/``LSTM`` (its two biases summed)."""
        weight = module.weight_hh_l0
        model = cls(
            module.input_size,
            module.hidden_size,
            bias=module.bias,
            dtype=weight.dtype,
            device=weight.device,
            **options,
        )
        with torch.no_grad():
            model.weight_hh.copy_(module.weight_hh_l0)
            model.weight_ih.copy_(module.weight_ih_l0)
            if module.bias:
                model.bias.copy_(module.bias_ih_l0 + module.bias_hh_l0)
        return model

    def _to_layer0(self, module_class: type[Torch], **options: Any) -> Torch:
        """A one-layer ``module_class`` with these weights (``bias_ih = b``, ``bias_hh = 0``)."""
        weight = self.weight_hh
        module = module_class(
            self.input_size,
            self.hidden_size,
            bias=self.bias is not None,
            dtype=weight.dtype,
            device=weight.device,
            **options,
        )
        with torch.no_grad():
            module.weight_hh_l0.copy_(self.weight_hh)
            module.weight_ih_l0.copy_(self.weight_ih)
            if self.bias is not None:
                module.bias_ih_l0.copy_(self.bias)
                module.bias_hh_l0.zero_()
        return module

    def check_inputs(self, inputs: Tensor) -> None:
        """Raise a clear error unless ``inputs`` is a ``(T, B, D)`` floating tensor."""
        if not isinstance(inputs, Tensor):
            raise TypeError(f"inputs must be a torch.Tensor, got {type(inputs).__name__}")
        if inputs.dim() != 3 or inputs.shape[-1] != self.input_size:
            raise ValueError(
                f"inputs must have shape (T, B, {self.input_size}) (time first), "
                f"got {tuple(inputs.shape)}; add a batch axis with inputs.unsqueeze(1)"
            )
        weight = next(self.parameters())
        if inputs.dtype != weight.dtype:
            raise TypeError(
                f"inputs have dtype {inputs.dtype} but the model has {weight.dtype}; "
                f"convert with inputs.to({weight.dtype}) or model.to({inputs.dtype})"
            )

    def run(self, inputs: Tensor, initial_state: Tensor | None = None) -> Tensor:
        """All states ``h_1, ..., h_T`` of the recurrence, shape ``(T, B, S)``."""
        self.check_inputs(inputs)
        state = self.zero_state(inputs.shape[1]) if initial_state is None else initial_state
        if state.shape != (inputs.shape[1], self.state_size):
            raise ValueError(
                f"initial_state must have shape (B, S) = ({inputs.shape[1]}, {self.state_size}), "
                f"got {tuple(state.shape)}"
            )
        states = []
        for x in inputs:
            state = self.step(state, x)
            states.append(state)
        return torch.stack(states)


class VanillaRNN(RecurrentMap):
    """``h' = rho(W h + U x + b)`` with ``W: (H, H)``, ``U: (H, D)``, ``b: (H,)``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        activation: str = "tanh",
        bias: bool = False,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        _check_activation(activation)
        self.activation = activation
        self._init_weights(input_size, hidden_size, hidden_size, hidden_size, bias, dtype, device)

    def preactivation(self, state: Tensor, x: Tensor) -> Tensor:
        """``W h + U x + b``, shape ``(B, H)``."""
        z = state @ self.weight_hh.T + x @ self.weight_ih.T
        return z if self.bias is None else z + self.bias

    def step(self, state: Tensor, x: Tensor) -> Tensor:
        return ACTIVATIONS[self.activation](self.preactivation(state, x))

    @classmethod
    def from_torch(cls, module: nn.RNN) -> VanillaRNN:
        """Copy layer 0 of a ``torch.nn.RNN`` (biases are summed into one)."""
        if not isinstance(module, nn.RNN):
            raise TypeError(f"expected torch.nn.RNN, got {type(module).__name__}")
        activation = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[module.mode]
        return cls._from_layer0(module, activation=activation)

    def to_torch(self) -> nn.RNN:
        """A one-layer ``torch.nn.RNN`` with the same weights (tanh or ReLU only)."""
        if self.activation not in ("tanh", "relu"):
            raise ValueError(
                f"torch.nn.RNN supports tanh and relu, not {self.activation!r}; "
                "use activation='tanh' or 'relu' to convert"
            )
        return self._to_layer0(nn.RNN, nonlinearity=self.activation)


class LinearRNN(VanillaRNN):
    """``h' = W h + U x (+ b)``: the vanilla RNN with the identity activation."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = False,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(input_size, hidden_size, "identity", bias, dtype, device)

    @classmethod
    def from_torch(cls, module: nn.RNN) -> LinearRNN:
        raise TypeError("torch.nn.RNN has no identity activation; build a LinearRNN directly")


class LSTMMap(RecurrentMap):
    """The LSTM as a map on the state ``s = [c, h]`` of size ``2H``.

    With gates stacked as in PyTorch, ``(i, f, z, o)`` along the first axis of
    ``weight_hh: (4H, H)`` and ``weight_ih: (4H, D)``::

        i, f, o = sigmoid(W_* h + U_* x + b_*),  z = tanh(W_z h + U_z x + b_z)
        c' = i * z + f * c,                      h' = o * tanh(c')
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self._init_weights(
            input_size, hidden_size, 2 * hidden_size, 4 * hidden_size, bias, dtype, device
        )

    def split_state(self, state: Tensor) -> tuple[Tensor, Tensor]:
        """``(..., 2H) -> (c, h)``, each ``(..., H)``."""
        return state[..., : self.hidden_size], state[..., self.hidden_size :]

    def output(self, states: Tensor) -> Tensor:
        return states[..., self.hidden_size :]

    def gates(self, state: Tensor, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The gates ``(i, f, z, o)`` at state ``(B, 2H)`` and input ``(B, D)``."""
        _, h = self.split_state(state)
        pre = h @ self.weight_hh.T + x @ self.weight_ih.T
        if self.bias is not None:
            pre = pre + self.bias
        i, f, z, o = pre.chunk(4, dim=-1)
        return torch.sigmoid(i), torch.sigmoid(f), torch.tanh(z), torch.sigmoid(o)

    def step(self, state: Tensor, x: Tensor) -> Tensor:
        c, _ = self.split_state(state)
        i, f, z, o = self.gates(state, x)
        c_next = i * z + f * c
        return torch.cat([c_next, o * torch.tanh(c_next)], dim=-1)

    @classmethod
    def from_torch(cls, module: nn.LSTM) -> LSTMMap:
        """Copy layer 0 of a ``torch.nn.LSTM`` (biases are summed into one)."""
        if not isinstance(module, nn.LSTM):
            raise TypeError(f"expected torch.nn.LSTM, got {type(module).__name__}")
        if module.proj_size:
            raise ValueError("LSTMs with proj_size > 0 are not supported; use proj_size=0")
        return cls._from_layer0(module)

    def to_torch(self) -> nn.LSTM:
        """A one-layer ``torch.nn.LSTM`` with the same weights."""
        return self._to_layer0(nn.LSTM)


def random_vanilla_rnn(
    input_size: int,
    hidden_size: int,
    lam: float,
    activation: str = "tanh",
    bias: bool = False,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> VanillaRNN:
    """A vanilla RNN with i.i.d. ``N(0, 1/H)`` weights, ``W`` rescaled to ``L_rho ||W||_2 = lam``
    (``lam >= 1``: not certified stable, for counterexamples)."""
    if lam <= 0:
        raise ValueError(f"lam must be positive, got {lam}")
    model_cls = LinearRNN if activation == "identity" else VanillaRNN
    kwargs = {} if activation == "identity" else {"activation": activation}
    model = model_cls(input_size, hidden_size, bias=bias, dtype=dtype, **kwargs)
    scale = 1.0 / math.sqrt(hidden_size)
    with torch.no_grad():
        W = torch.randn(hidden_size, hidden_size, generator=generator, dtype=dtype) * scale
        W *= lam / (activation_lipschitz(activation) * spectral_norm(W))
        model.weight_hh.copy_(W)
        model.weight_ih.copy_(
            torch.randn(hidden_size, input_size, generator=generator, dtype=dtype) * scale
        )
        if model.bias is not None:
            model.bias.copy_(torch.randn(hidden_size, generator=generator, dtype=dtype) * scale)
    return model


def random_lstm(
    input_size: int,
    hidden_size: int,
    scale: float = 1.0,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> LSTMMap:
    """An LSTM with i.i.d. ``N(0, scale^2 / H)`` weights and biases (no stability constraint)."""
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    model = LSTMMap(input_size, hidden_size, dtype=dtype)
    std = scale / math.sqrt(hidden_size)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator, dtype=dtype) * std)
    return model
