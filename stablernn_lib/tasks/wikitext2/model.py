"""Word-level language models with RNN (tanh) or LSTM cells, unconstrained or stable.

The model is the one of PyTorch's ``word_language_model`` example, on which the
authors built their experiments::

    x_t = E[w_t]                    embedding, (T, B) tokens -> (T, B, E)
    h_t = phi_w(h_{t-1}, x_t)       nn.RNN(tanh) or nn.LSTM, L layers (fused cuDNN kernels)
    logits_t = D h_t + d            decoder, (T, B, H) -> (T, B, V)

with dropout on the embeddings, between layers and on the outputs.  With
``output="adaptive"`` the decoder is PyTorch's ``nn.AdaptiveLogSoftmaxWithLoss``
(Grave et al., 2017): a head softmax over the most frequent words and a few
cluster tokens, and smaller tail softmaxes for the rarer words.  It still gives
exact, normalized log-probabilities over the whole vocabulary, so losses and
perplexities mean the same as with the plain softmax; it is ~10x cheaper on a CPU.
Every loss goes through :meth:`WordLanguageModel.token_nll`, which computes only
the target's log-probability (cheap for the adaptive softmax).

The *stable* variant is the same model projected after every optimizer step
(:func:`project_stable_`): each RNN layer's ``W`` onto ``{||W||_2 <= 1}``; each
LSTM layer's weights onto the constraint of Chapter 4, with the embedding
clamped so that the inputs are bounded.

A model of *context k* (the truncated model) predicts token ``t + 1`` from
``h^k_t``: the same layers run from the zero state over the last ``k`` inputs
only (:func:`truncated_outputs`).
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
# How a stable LSTM is kept stable (Chapter 8's ablation):
# "course": the course's certified set (every part projected, Chapter 4's certificate);
# "free-forget": the same set with the forget gate uncapped (forget bias and U_f rows get the
#     generous bounds of the other gates): NOT certified contractive;
# "free-forget-upper": the course's set on the first layer, the uncapped set on the layers
#     above: the first layer certified, the model NOT;
# "authors": the authors' column rescaling (``authors_lstm_rescaling_``): NOT certified.
LSTMConstraintName = Literal["course", "free-forget", "free-forget-upper", "authors"]


def check_cell(cell: str) -> Cell:
    if cell not in get_args(Cell):
        raise ValueError(f"unknown cell {cell!r}; use 'rnn' (tanh) or 'lstm'")
    return cell  # type: ignore[return-value]


class SequenceModel(nn.Module):
    """An input layer ``encoder``, a recurrent stack ``rnn`` (``nn.RNN`` or ``nn.LSTM``) and
    an output layer: the interface that the training loop and the analyses use
    (:meth:`embed`, ``recur``, ``decode``, ``token_nll``), for words and for music alike."""

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
    """Embedding -> L recurrent layers -> linear decoder over the vocabulary.

    Args:
        cell: ``"rnn"`` (``nn.RNN`` with tanh) or ``"lstm"`` (``nn.LSTM``).
        vocab_size: ``V``; embedding_size: ``E``; hidden_size: ``H``; num_layers: ``L``.
        dropout: probability used on embeddings, between layers and on outputs.
        stable: whether training projects the weights after every step.
        input_bound: for a stable LSTM, embeddings are clamped to ``[-b, b]``.
        projected_layers: a stable model projects its first that many layers (None: all;
            1 is what the authors' code did, which certifies only the first layer).
        output: ``"softmax"`` (a linear decoder to ``V`` logits) or ``"adaptive"``
            (``nn.AdaptiveLogSoftmaxWithLoss`` with ``cutoffs`` and ``div_value``).
        lstm_constraint: how a stable LSTM is kept stable (see ``LSTMConstraintName``).
    """

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
        """``(..., H)`` outputs -> ``(..., V)`` logits (adaptive: the log-probabilities).

        Either way ``log_softmax`` of the result is the model's log-probabilities, so
        ``cross_entropy`` of it is the exact loss.  For losses prefer :meth:`token_nll`.
        """
        outputs = self.drop(outputs)
        if self.output == "softmax":
            return self.decoder(outputs)
        flat = self.decoder.log_prob(outputs.reshape(-1, outputs.shape[-1]))
        return flat.view(*outputs.shape[:-1], -1)

    def token_nll(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """``-log p(target | h)`` in nats: outputs ``(..., H)``, targets ``(...)`` -> ``(...)``.

        The adaptive softmax computes only the head and the target's cluster (exact and
        normalized all the same); the plain softmax the whole ``V`` logits.
        """
        flat = self.drop(outputs).reshape(-1, outputs.shape[-1])
        if self.output == "softmax":
            nll = cross_entropy(self.decoder(flat), targets.reshape(-1), reduction="none")
        else:
            nll = -self.decoder(flat, targets.reshape(-1)).output
        return nll.view(targets.shape)


@contextmanager
def dropout_off(model: WordLanguageModel) -> Iterator[WordLanguageModel]:
    """Train mode with every dropout set to 0, restored on exit.

    The model then computes the same function as in eval mode, and gradients
    can flow through the fused cuDNN kernels (whose backward pass refuses to
    run in eval mode).
    """
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
    """Guaranteed upper bounds on ``||W||_2`` of matrices ``(..., m, n) -> (...)``.

    With ``G = W^T W`` (``||G||_2 = ||W||_2^2``) and ``q = 2^squarings``,
    ``||G||_2^q = ||G^q||_2 <= ||G^q||_F <= sqrt(n) ||G||_2^q``, so

        ||W||_2  <=  ||G^q||_F^(1 / 2q)  <=  n^(1 / 4q) ||W||_2,

    a bound within a factor ``650^(1/256) ~ 1.026`` for ``n = 650`` and the default 6
    squarings.  ``G^q`` is formed by repeated squaring in float64, rescaled to unit
    Frobenius norm before every squaring (the scales are kept as logarithms).  Matrix
    products only: the result stays on the device, with no host synchronization.
    """
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
    """Where and how :func:`project_spectral_balls_` projects ``matrices (L, m, n)``.

    ``(cpu, "eigh")`` for CUDA matrices with at most ``SMALL_MATRIX`` rows and columns,
    else ``(their device, "svd")``.  Why: a GPU solver is slow on small matrices and
    synchronizes the host on every call (measured on an H100, issue 24: one 200 x 200 SVD
    took 5.6 ms on the GPU, more than half of an unconstrained RNN training step, and with
    several processes sharing the GPU these calls queue up: 7x the unconstrained step).
    On the CPU the whole stack of layers costs one transfer each way and one
    synchronization, and LAPACK's symmetric eigensolver on ``W^T W`` in float32 is cheaper
    than the float32 SVD (two 200 x 200 matrices on this course's busy 2-core CPU, one
    thread: 29 ms against 40 ms, ``solver_seconds`` of ``benchmark-cpu-cpu-ratios.json``).
    CPU weights keep the SVD in their dtype, the projection every CPU run of the course was
    trained with.  ``python -m stablernn_tools benchmark ratios`` times every solver on the
    machine at hand; 1024 is a guess above every model of the course (at most 650 units),
    not a measured crossover.
    """
    if matrices.is_cuda and max(matrices.shape[-2:]) <= SMALL_MATRIX:
        return torch.device("cpu"), "eigh"
    return matrices.device, "svd"


@torch.no_grad()
def project_spectral_balls_(
    weights: Sequence[Tensor], radius: float = 1.0, check_first: bool = False
) -> None:
    """Project every matrix in place onto ``{||W||_2 <= radius}`` (``weights``: same shape).

    All matrices are projected as one stack ``(L, m, n)``, where and how
    :func:`spectral_solver` says:

    * weights on the CPU: the SVD in the weights' dtype
      (:func:`~stablernn_lib.core.contraction.project_spectral_ball`), as every CPU run of the
      course was trained;
    * CUDA weights of a small size: copied to the host in one transfer (the one host
      synchronization of the call), projected there through the eigendecomposition of
      ``W^T W`` in the weights' dtype
      (:func:`~stablernn_lib.core.contraction.project_spectral_ball_by_eigh`, the same projection
      up to rounding), copied back without waiting;
    * larger CUDA weights: the SVD on the GPU.

    With ``check_first`` the projection is skipped for a matrix whose guaranteed upper
    bound (:func:`spectral_norm_upper_bounds`) is already ``<= radius``: that matrix is
    its own projection, so the skip is exact.  The bound costs a few matrix products.
    Off by default: during training every SGD step pushes the clipped singular values
    just above the radius, so the check never skips there (measured on an H100, issue 24);
    it pays off for weights that are usually inside (e.g. after loading a model).
    """
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
    """:func:`project_spectral_balls_` on the weights' device by matrix products only
    (:func:`~stablernn_lib.core.iterative_projection.project_spectral_ball_iterative`), with
    no host synchronization, so that a CUDA graph can capture it.

    ``check_first``: a matrix whose certified upper bound (:func:`spectral_norm_upper_bounds`)
    is ``<= radius`` is kept bit for bit (``torch.where``: both are computed, nothing waits).
    """
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
    """The end-of-epoch certificate of a stable RNN: ``||W||_2`` of every projected layer by
    an SVD in float64; a layer above ``1 + CERTIFICATE_SLACK`` is projected exactly (SVD in
    float64) and checked again.  Returns the norms before, which layers were re-projected
    and the norms after (a host synchronization: once an epoch)."""
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
    """Project the model onto its stable set, in place (after every optimizer step).

    RNN: every layer's ``weight_hh_l{n}`` onto ``{||W||_2 <= 1}`` (SVD clipping,
    as the authors did; radius 1 with tanh gives ``lambda <= 1``), all layers at once
    (:func:`project_spectral_balls_`, on a GPU through the host CPU).
    LSTM: the embedding is clamped to ``[-b, b]`` (so ``||x_t||_inf <= b``); the
    inputs of layers above are LSTM outputs, already in ``(-1, 1)``; then every
    layer's weights and biases go through
    :func:`stablernn_lib.theory.lstm_certificate.project_lstm_weights_` with that input bound
    (its default set, :func:`~stablernn_lib.theory.lstm_certificate.course_lstm_constraint`: the
    authors' constants read as row sums, forget bias <= 0, which Chapter 4 certifies
    contractive, plus generous bounds on the input rows and the biases that make the set
    compact, as Chapter 7's theorem for the LSTM needs).  "Every layer" means the first
    ``model.projected_layers`` (all of them unless the model was built otherwise).
    ``model.lstm_constraint`` replaces the course's set by the same set with the forget gate
    uncapped (``"free-forget"``; ``"free-forget-upper"``: on the layers above the first only)
    or by the authors' column rescaling (``"authors"``, :func:`rescale_authors_lstm_`); none
    of them certifies the model contractive (Chapter 8's ablation).  ``iterative``: a stable
    RNN is projected on its device by matrix products
    (:func:`project_spectral_balls_iteratively_`; no host synchronization, within the stated
    tolerance of the exact projection, certified once an epoch by
    :func:`certify_stable_rnn_`); the LSTM's projections are exact and synchronization-free
    either way.
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
    """The authors' LSTM rule on the first ``model.projected_layers`` layers, in place.

    :func:`~stablernn_lib.theory.lstm_certificate.authors_lstm_rescaling_` on each layer (every
    recurrent block to fixed column sums, ``U_f`` too) and the embedding clamped to
    ``[-1, 1]``: what the authors' code applies after every step.  Not certified
    contractive (Chapter 4); no host synchronization.
    """
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
    """Mean loss per token of the full recurrent model on a batchified source ``(N, B)``.

    The state starts at zero and is carried across windows, as in the authors'
    evaluation; perplexity is ``exp`` of the result.
    """
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
    """Top-layer outputs of the context-``k`` model at rows ``start .. start+length-1``.

    Row ``t`` of column ``b`` gets ``h^k_t``: the layers run from the zero state over
    ``source[max(0, t-k+1) : t+1, b]``.  Rows ``t < k - 1`` see the whole prefix
    (one run from row 0); the others are ``k``-token windows, all run at once as
    one batch of ``k`` steps (in chunks of at most ``max_window_tokens`` tokens).
    Returns ``(length, B, H)``; gradients flow when grad mode is on.
    """
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
    """Mean loss per token of the trained model evaluated as a context-``k`` model.

    Same targets as :func:`evaluate_loss`; with ``k >= N - 1`` the two agree.
    """
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
