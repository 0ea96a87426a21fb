"""Word-level language models (PyTorch's ``word_language_model``), unconstrained or stable::

    x_t = E[w_t]                    embedding, (T, B) tokens -> (T, B, E)
    h_t = phi_w(h_{t-1}, x_t)       nn.RNN(tanh) or nn.LSTM, L layers
    logits_t = D h_t + d            decoder, (T, B, H) -> (T, B, V)

with dropout on embeddings, between layers and on outputs; ``output="adaptive"``: the exact,
normalized ``nn.AdaptiveLogSoftmaxWithLoss`` (~10x cheaper on a CPU).  Stable: projected after
every step (:func:`project_stable_`).  Context ``k``: ``h^k_t`` from the zero state over the
last ``k`` inputs (:func:`truncated_outputs`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, get_args

import torch
from torch import Tensor, nn
from torch.nn.functional import cross_entropy

from stablernn_lib.core.contraction import (
    check_finite,
    project_spectral_ball,
    project_spectral_ball_by_eigh,
)
from stablernn_lib.core.iterative_projection import (
    project_spectral_ball_iterative,
    spectral_norms_float64,
)
from stablernn_lib.tasks.wikitext2.data import batch_starts, get_batch

Cell = Literal["rnn", "lstm"]
State = Tensor | tuple[Tensor, Tensor] | None
Output = Literal["softmax", "adaptive"]
# How a stable LSTM is kept stable: "course" (Chapter 4's certified set); "free-forget" (its
# forget gate uncapped), "free-forget-upper" (uncapped above layer 1) and "authors" (the
# authors' column rescaling): not certified contractive.
LSTMConstraintName = Literal["course", "free-forget", "free-forget-upper", "authors"]


def check_cell(cell: str) -> Cell:
    if cell not in get_args(Cell):
        raise ValueError(f"unknown cell {cell!r}; use 'rnn' (tanh) or 'lstm'")
    return cell  # type: ignore[return-value]


class SequenceModel(nn.Module):
    """``encoder``, a recurrent stack ``rnn`` and an output layer, for words and music:
    :meth:`embed`, ``recur``, ``decode``, ``token_nll``."""

    encoder: nn.Module
    rnn: nn.RNNBase

    @property
    def num_layers(self) -> int:
        return self.rnn.num_layers

    @property
    def hidden_size(self) -> int:
        return self.rnn.hidden_size

    def embed(self, inputs: Tensor) -> Tensor:
        """``(T, B)`` token ids or ``(T, B, 88)`` frames -> ``(T, B, E)`` input vectors ``x_t``."""
        return self.encoder(inputs)

    def forward(self, inputs: Tensor, state: State = None) -> tuple[Tensor, State]:
        """``(T, B, ...)`` inputs -> ``(T, B, V)`` logits (of the next token or frame), state."""
        outputs, state = self.recur(self.embed(inputs), state)
        return self.decode(outputs), state


class WordLanguageModel(SequenceModel):
    """Embedding ``(V, E)`` -> ``L`` layers of ``H`` units (``cell``: "rnn" or "lstm") ->
    decoder (``output``: "softmax", or "adaptive" with ``cutoffs``, ``div_value``).
    ``stable``: projected after every step, the first ``projected_layers`` (None: all),
    a stable LSTM's embeddings clamped to ``[-input_bound, input_bound]``."""

    def __init__(
        self,
        cell: str,
        vocab_size: int,
        embedding_size: int,
        hidden_size: int,
        num_layers: int = 2,
        dropout: float = 0.2,
        stable: bool = False,
        input_bound: float = 1.0,
        output: str = "softmax",
        cutoffs: Sequence[int] = (2_000, 10_000),
        div_value: float = 4.0,
        projected_layers: int | None = None,
        lstm_constraint: str = "course",
    ) -> None:
        super().__init__()
        self.cell = check_cell(cell)
        if min(vocab_size, embedding_size, hidden_size, num_layers) < 1:
            raise ValueError("vocab, embedding and hidden sizes and num_layers must be >= 1")
        if projected_layers is not None and not 1 <= projected_layers <= num_layers:
            raise ValueError(
                f"projected_layers must be between 1 and num_layers = {num_layers}, got "
                f"{projected_layers}; use None to project every layer"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if lstm_constraint not in get_args(LSTMConstraintName):
            raise ValueError(
                f"unknown lstm_constraint {lstm_constraint!r}; use one of "
                f"{get_args(LSTMConstraintName)}"
            )
        if output not in get_args(Output):
            raise ValueError(f"unknown output {output!r}; use 'softmax' or 'adaptive'")
        if output == "adaptive" and not 0 < min(cutoffs) <= max(cutoffs) < vocab_size - 1:
            raise ValueError(
                f"adaptive softmax cutoffs {tuple(cutoffs)} must lie strictly between 0 and the "
                f"vocabulary size {vocab_size} - 1; use smaller cutoffs or output='softmax'"
            )
        self.output = output
        self.stable = stable
        self.input_bound = input_bound
        self.projected_layers = num_layers if projected_layers is None else projected_layers
        self.lstm_constraint = lstm_constraint
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab_size, embedding_size)
        between = dropout if num_layers > 1 else 0.0
        if self.cell == "rnn":
            self.rnn: nn.RNNBase = nn.RNN(
                embedding_size, hidden_size, num_layers, nonlinearity="tanh", dropout=between
            )
        else:
            self.rnn = nn.LSTM(embedding_size, hidden_size, num_layers, dropout=between)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        if output == "softmax":
            self.decoder: nn.Module = nn.Linear(hidden_size, vocab_size)
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
            nn.init.zeros_(self.decoder.bias)
        else:  # PyTorch's default initialization of its linear maps
            self.decoder = nn.AdaptiveLogSoftmaxWithLoss(
                hidden_size, vocab_size, sorted(cutoffs), div_value=div_value
            )

    def recur(self, inputs: Tensor, state: State = None) -> tuple[Tensor, State]:
        """``(T, B, E)`` inputs -> top-layer outputs ``(T, B, H)`` and the final state."""
        return self.rnn(self.drop(inputs), state)

    def decode(self, outputs: Tensor) -> Tensor:
        """``(..., H)`` outputs -> ``(..., V)`` logits (adaptive: log-probabilities)."""
        outputs = self.drop(outputs)
        if self.output == "softmax":
            return self.decoder(outputs)
        flat = self.decoder.log_prob(outputs.reshape(-1, outputs.shape[-1]))
        return flat.view(*outputs.shape[:-1], -1)

    def token_nll(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """``-log p(target | h)`` in nats: outputs ``(..., H)``, targets ``(...)`` -> ``(...)``."""
        flat = self.drop(outputs).reshape(-1, outputs.shape[-1])
        if self.output == "softmax":
            nll = cross_entropy(self.decoder(flat), targets.reshape(-1), reduction="none")
        else:
            nll = -self.decoder(flat, targets.reshape(-1)).output
        return nll.view(targets.shape)


@contextmanager
def dropout_off(model: WordLanguageModel) -> Iterator[WordLanguageModel]:
    """Train mode with every dropout at 0 (eval's function; cuDNN's backward refuses eval mode)."""
    drop = getattr(model, "drop", None)  # a model without a dropout module has none
    saved = (model.training, drop.p if drop is not None else 0.0, model.rnn.dropout)
    if drop is not None:
        drop.p = 0.0
    model.rnn.dropout = 0.0
    model.train()
    try:
        yield model
    finally:
        if drop is not None:
            drop.p = saved[1]
        model.rnn.dropout = saved[2]
        model.train(saved[0])


def detach_state(state: State) -> State:
    """Cut the graph between BPTT windows (the state's values are kept)."""
    if state is None:
        return None
    if isinstance(state, Tensor):
        return state.detach()
    return tuple(part.detach() for part in state)


# Relative slack added to the computed bound: it covers the float64 rounding of the
# squarings (orders of magnitude smaller), so a skipped projection is always exact.
_BOUND_SLACK = 1e-6


def spectral_norm_upper_bounds(matrices: Tensor, squarings: int = 6) -> Tensor:
    """Upper bounds on ``||W||_2`` of matrices ``(..., m, n) -> (...)``, matrix products only:

        ||W||_2  <=  ||G^q||_F^(1 / 2q)  <=  n^(1 / 4q) ||W||_2,   G = W^T W,  q = 2^squarings,

    ``G^q`` by repeated squaring in float64, rescaled (logs of the scales kept)."""
    gram = matrices.detach().double()
    gram = gram.mT @ gram
    log_scale = torch.zeros(gram.shape[:-2], dtype=gram.dtype, device=gram.device)
    for _ in range(squarings):
        norm = torch.linalg.matrix_norm(gram).clamp(min=torch.finfo(gram.dtype).tiny)
        gram = gram / norm[..., None, None]
        gram = gram @ gram
        log_scale = 2 * (log_scale + norm.log())
    log_norm = log_scale + torch.linalg.matrix_norm(gram).log()  # log ||G^q||_F
    return (log_norm / 2 ** (squarings + 1)).exp() * (1 + _BOUND_SLACK)


# The largest matrix side whose spectral projection goes to the host CPU when the weights
# live on a CUDA device (see :func:`spectral_solver`).
SMALL_MATRIX = 1024


def spectral_solver(matrices: Tensor) -> tuple[torch.device, str]:
    """Where and how :func:`project_spectral_balls_` projects ``matrices (L, m, n)``:
    ``(cpu, "eigh")`` for CUDA matrices of at most ``SMALL_MATRIX`` rows and columns (a GPU
    solver is slow on small matrices and synchronizes on every call; the host's eigensolver
    on ``W^T W`` beats its SVD), else ``(their device, "svd")``."""
    if matrices.is_cuda and max(matrices.shape[-2:]) <= SMALL_MATRIX:
        return torch.device("cpu"), "eigh"
    return matrices.device, "svd"


@torch.no_grad()
def project_spectral_balls_(
    weights: Sequence[Tensor], radius: float = 1.0, check_first: bool = False
) -> None:
    """Project every matrix in place onto ``{||W||_2 <= radius}``, as one stack ``(L, m, n)``
    where and how :func:`spectral_solver` says (small CUDA weights: one transfer each way).
    ``check_first``: skip a matrix whose :func:`spectral_norm_upper_bounds` is ``<= radius``
    (exact; it never skips during training, where each step leaves the norm just above)."""
    stacked = torch.stack([w.detach() for w in weights])
    if not stacked.is_floating_point():
        raise TypeError(f"expected floating weights, got {stacked.dtype}")
    solver, method = spectral_solver(stacked)
    bounds = spectral_norm_upper_bounds(stacked) if check_first else None
    if solver != stacked.device:  # one transfer each way, one synchronization
        stacked = stacked.to(solver, non_blocking=True)
        bounds = bounds.to(solver, non_blocking=True) if bounds is not None else None
        torch.cuda.current_stream(weights[0].device).synchronize()
    selected = list(range(len(weights)))
    if bounds is not None:
        selected = [n for n, inside in enumerate((bounds <= radius).tolist()) if not inside]
        if not selected:
            return
    chosen = stacked if len(selected) == len(weights) else stacked[selected]
    if method == "eigh":
        check_finite(chosen)
        projected = project_spectral_ball_by_eigh(chosen, radius, chosen.dtype)
    else:
        projected = project_spectral_ball(chosen, radius)
    if projected.device != weights[0].device:
        projected = projected.pin_memory().to(weights[0].device, non_blocking=True)
    for n, matrix in zip(selected, projected, strict=True):
        weights[n].copy_(matrix)


@contextmanager
def full_precision_matmuls() -> Iterator[None]:
    """Float32 matrix products in full float32 (TF32 off) inside, the setting restored after:
    the projections need it when a fast step turned TF32 on for the decoder."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


@torch.no_grad()
def project_spectral_balls_iteratively_(
    weights: Sequence[Tensor], radius: float = 1.0, check_first: bool = True
) -> None:
    """:func:`project_spectral_balls_` by matrix products on the device (no host sync, CUDA
    graph safe); ``check_first``: a matrix with bound ``<= radius`` is kept bit for bit."""
    stacked = torch.stack([w.detach() for w in weights])
    with full_precision_matmuls():
        projected = project_spectral_ball_iterative(stacked, radius)
        if check_first:
            inside = spectral_norm_upper_bounds(stacked) <= radius
            projected = torch.where(inside[:, None, None], stacked, projected)
    for weight, matrix in zip(weights, projected, strict=True):
        weight.copy_(matrix)


# A projected recurrent matrix passes the end-of-epoch certificate when its float64 spectral
# norm is at most 1 + this: the float32 rounding of an exact projection (its singular values
# at the radius come out within a few 1e-7 of it), far below what training moves.
CERTIFICATE_SLACK = 1e-5


def recurrent_weights(model: WordLanguageModel) -> list[Tensor]:
    """The recurrent matrices ``weight_hh_l{n}`` of the projected layers."""
    return [getattr(model.rnn, f"weight_hh_l{n}") for n in range(model.projected_layers)]


@torch.no_grad()
def certify_stable_rnn_(model: WordLanguageModel) -> dict[str, Any]:
    """``||W||_2`` of every projected layer in float64; a layer above ``1 + CERTIFICATE_SLACK``
    is projected exactly.  Returns ``norms``, ``reprojected_layers``, ``norms_after``."""
    weights = recurrent_weights(model)
    before = spectral_norms_float64(torch.stack(weights)).tolist()
    failed = [n for n, norm in enumerate(before) if norm > 1.0 + CERTIFICATE_SLACK]
    for n in failed:
        exact = project_spectral_ball(weights[n].detach().double(), 1.0)
        weights[n].copy_(exact.to(weights[n].dtype))
    after = spectral_norms_float64(torch.stack(weights)).tolist()
    return {"norms": before, "reprojected_layers": failed, "norms_after": after}


@torch.no_grad()
def project_stable_(model: WordLanguageModel, iterative: bool = False) -> None:
    """Project the first ``model.projected_layers`` layers onto the stable set, in place.

    RNN: each ``weight_hh_l{n}`` onto ``{||W||_2 <= 1}`` (``iterative``: by matrix products,
    certified each epoch by :func:`certify_stable_rnn_`).  LSTM: the embedding clamped to
    ``[-b, b]``, then each layer through
    :func:`~stablernn_lib.theory.lstm_certificate.project_lstm_weights_` (input bound ``b``,
    then 1), in the set that ``model.lstm_constraint`` names (``LSTMConstraintName``).
    """
    rnn = model.rnn
    layers = range(model.projected_layers)
    if model.cell == "rnn":
        if iterative:
            project_spectral_balls_iteratively_(recurrent_weights(model))
        else:
            project_spectral_balls_(recurrent_weights(model))
        return
    if model.lstm_constraint == "authors":
        rescale_authors_lstm_(model)
        return
    from stablernn_lib.theory.lstm_certificate import free_forget_constraint, project_lstm_weights_

    model.encoder.weight.clamp_(-model.input_bound, model.input_bound)
    # built only when some layer lifts the cap ("authors" returned above)
    uncapped = free_forget_constraint() if model.lstm_constraint != "course" else None
    for layer in layers:
        lifted = model.lstm_constraint == "free-forget" or (
            model.lstm_constraint == "free-forget-upper" and layer > 0
        )
        project_lstm_weights_(
            getattr(rnn, f"weight_hh_l{layer}"),
            getattr(rnn, f"weight_ih_l{layer}"),
            input_bound=model.input_bound if layer == 0 else 1.0,
            constraint=uncapped if lifted else None,
            biases=[getattr(rnn, f"bias_ih_l{layer}"), getattr(rnn, f"bias_hh_l{layer}")],
        )


@torch.no_grad()
def rescale_authors_lstm_(model: WordLanguageModel) -> None:
    """:func:`~stablernn_lib.theory.lstm_certificate.authors_lstm_rescaling_` on the first
    ``model.projected_layers`` layers, in place (not certified contractive)."""
    if model.cell != "lstm":
        raise ValueError(f"the authors' rescaling is for LSTMs, got a {model.cell!r} model")
    from stablernn_lib.theory.lstm_certificate import authors_lstm_rescaling_

    for layer in range(model.projected_layers):
        authors_lstm_rescaling_(
            getattr(model.rnn, f"weight_hh_l{layer}"),
            getattr(model.rnn, f"weight_ih_l{layer}"),
            model.encoder.weight if layer == 0 else None,
        )


@torch.no_grad()
def evaluate_loss(model: WordLanguageModel, source: Tensor, bptt: int = 35) -> float:
    """Mean loss per token on a batchified source ``(N, B)``, the state carried across windows."""
    model.eval()
    total, count, state = 0.0, 0, None
    for start in batch_starts(source.shape[0], bptt):
        tokens, targets = get_batch(source, start, bptt)
        outputs, state = model.recur(model.embed(tokens), state)
        nll = model.token_nll(outputs, targets)
        total += float(nll.sum())
        count += nll.numel()
    return total / count


def truncated_outputs(
    model: WordLanguageModel,
    source: Tensor,
    start: int,
    length: int,
    k: int,
    max_window_tokens: int = 1 << 18,
) -> Tensor:
    """``h^k_t`` of rows ``start .. start+length-1``, shape ``(length, B, H)``: the layers from
    the zero state over ``source[max(0, t-k+1) : t+1]``, the windows run as one batch (in
    chunks of at most ``max_window_tokens`` tokens)."""
    if k < 1:
        raise ValueError(f"the context k must be >= 1, got {k}")
    if start < 0 or length < 1 or start + length > source.shape[0]:
        raise ValueError(
            f"rows {start}..{start + length - 1} are outside a source of {source.shape[0]} rows"
        )
    batch = source.shape[1]
    pieces = []
    prefix_end = min(start + length, k - 1)
    if start < prefix_end:
        outputs, _ = model.recur(model.embed(source[:prefix_end]))
        pieces.append(outputs[start:])
    first = max(start, k - 1)
    last = start + length  # exclusive
    if first < last:
        windows = source[first - k + 1 : last].unfold(0, k, 1)  # (P, B, ..., k)
        windows = windows.movedim(-1, 0).reshape(k, -1, *source.shape[2:])  # (k, P * B, ...)
        per_chunk = max(1, max_window_tokens // k)
        tops = []
        for column in range(0, windows.shape[1], per_chunk):
            outputs, _ = model.recur(model.embed(windows[:, column : column + per_chunk]))
            tops.append(outputs[-1])
        pieces.append(torch.cat(tops).view(last - first, batch, -1))
    return torch.cat(pieces)


@torch.no_grad()
def truncated_loss(
    model: WordLanguageModel,
    source: Tensor,
    k: int,
    rows_per_block: int = 512,
    max_window_tokens: int = 1 << 18,
) -> float:
    """Mean loss per token of the context-``k`` model (:func:`evaluate_loss` for ``k >= N - 1``)."""
    model.eval()
    total, count = 0.0, 0
    for start in batch_starts(source.shape[0], rows_per_block):
        _, targets = get_batch(source, start, rows_per_block)
        outputs = truncated_outputs(model, source, start, targets.shape[0], k, max_window_tokens)
        nll = model.token_nll(outputs, targets)
        total += float(nll.sum())
        count += nll.numel()
    return total / count


def perplexity(loss: float) -> float:
    """``exp(loss)``, or inf when the loss is too large (or not a number)."""
    return math.exp(loss) if loss < 700 else math.inf
