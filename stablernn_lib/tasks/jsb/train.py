"""Polyphonic music on JSB Chorales: the authors' model and training, with a correct LSTM.

The model follows the authors' code (millerjohnp/TCN, ``TCN/poly_music``)::

    x_t = A v_t + a                 input layer, piano roll v_t in {0,1}^88 -> R^88
    h_t = phi_w(h_{t-1}, x_t)       one nn.RNN(tanh) or nn.LSTM layer of H = 256 units
    logits_t = D h_t + d            decoder, 88 independent Bernoulli outputs

and predicts ``v_{t+1}`` from ``h_t``.  The loss of a time step is the negative
log-likelihood of the next frame, summed over the 88 keys (:meth:`MusicModel.token_nll`);
results are in nats per time step.

Training, as in their ``music_test.py``: plain SGD at lr 0.01 on one chorale a step,
in a shuffled order, the loss summed over the chorale's time steps, the gradient's
norm clipped to 1; up to 500 epochs; after epoch 10 the learning rate is divided by
10 whenever the validation loss exceeds the largest of the three previous ones;
the model with the best validation loss is kept and evaluated on the test set.

Where the course departs from that code, on purpose:

* The LSTM is recurrent.  Their ``nn.LSTM`` is built without ``batch_first`` and fed
  ``(1, T, 88)``, so it reads ``T`` sequences of length 1 and has no recurrence; their
  forget-gate fill of 10 goes into both bias vectors (an effective bias of 20).  Here
  the forget bias is 10, once.  The bug can be reproduced on purpose: the variant
  ``"authors-bug"`` (:class:`MusicModel` with ``authors_bug=True``).
* Their bias fill also hits the RNN (a quarter of its units get bias 20 and saturate);
  the course's RNN keeps PyTorch's initialization.
* Stable variants are projected at initialization and after every step (theirs after
  every step only): the RNN's ``W`` onto ``{||W||_2 <= 1}`` by SVD clipping, as theirs;
  the LSTM onto the constraint Chapter 4 proves contractive
  (:func:`~stablernn_lib.theory.lstm_stability.project_lstm_weights_`), not their column-sum
  rescaling, which is not a projection.  That constraint needs bounded inputs: the input
  layer's rows ``[A_i, a_i]`` are projected onto the l1 ball of radius ``b``, so
  ``|x_{t,i}| <= b`` for every frame ``v_t`` in ``[0, 1]^88`` (Chapter 8 clamps the
  embedding for the same reason).
* Losses use ``binary_cross_entropy_with_logits`` (their ``log(sigmoid)`` can give -inf).

Runs resume after an interruption (a checkpoint after every epoch and on Ctrl-C), a
rerun of a finished run is skipped, and a ``full`` run writes its result to
``data/results/jsb/<model>-<variant>.json`` (the ``adam`` diagnostic to
``<model>-<variant>-adam.json``).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.functional import binary_cross_entropy_with_logits
from torch.nn.utils.rnn import pad_sequence

from stablernn_lib.core.io import atomic_torch_save, atomic_write_json, provenance, same_config
from stablernn_lib.core.results import results_path
from stablernn_lib.tasks.jsb.data import NUM_KEYS, PianoRolls, load_jsb
from stablernn_lib.tasks.wikitext2.model import State, check_cell, project_spectral_balls_
from stablernn_lib.tasks.wikitext2.train import (
    _DATA_ROOT,
    TrainingDivergedError,
    _kept,
    _StopRequest,
)
from stablernn_lib.theory.lstm_stability import project_l1_ball, project_lstm_weights_

RUNS_DIR = _DATA_ROOT / "runs" / "jsb"
RESULTS_DIR = results_path("jsb")  # the checkout's data/results/jsb, or the packaged copy
VARIANTS: tuple[str, ...] = ("unconstrained", "stable", "authors-bug")


@dataclass(frozen=True)
class MusicConfig:
    """Every knob of a JSB run (see ``CONFIGS`` for the values and why).

    ``hidden_size`` H; ``optimizer`` (``"sgd"``, the authors', or ``"adam"``) at ``lr``,
    gradient norm clipped to ``clip``; ``epochs``;
    after epoch ``decay_after`` the lr is divided by ``lr_decay`` when the validation
    loss exceeds the max of the previous ``decay_window`` ones; ``forget_bias`` is the
    LSTM's initial forget-gate bias; a stable LSTM's inputs are bounded by
    ``input_bound``; ``seed`` fixes the initialization and the order of the chorales;
    ``train_sequences`` / ``eval_sequences`` keep only the first that many chorales
    (None: all); a step whose NLL per time step exceeds ``divergence_factor * 88 log 2``
    stops the run.
    """

    name: str
    epochs: int
    hidden_size: int = 256
    lr: float = 0.01
    clip: float = 1.0
    lr_decay: float = 10.0
    decay_after: int = 10
    decay_window: int = 3
    forget_bias: float = 10.0
    input_bound: float = 1.0
    seed: int = 1111
    train_sequences: int | None = None
    eval_sequences: int | None = None
    divergence_factor: float = 3.0
    optimizer: str = "sgd"

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; use one of {OPTIMIZERS}")


OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")
CONFIGS: dict[str, MusicConfig] = {
    # Seconds per model, live in the book: the code path of the full run at toy scale:
    # 64 units, 6 epochs on the first 40 training chorales (the whole validation and test
    # splits), lr 0.05 (at 0.01 so few steps barely move the clipped SGD). Its NLLs say
    # that training works, nothing more.
    "smoke": MusicConfig(name="smoke", epochs=6, hidden_size=64, lr=0.05, train_sequences=40),
    # The authors' scale (music_test.py defaults): 256 units, 500 epochs, SGD lr 0.01,
    # clip 1, lr / 10 on a validation rise after epoch 10, seed 1111, all the data.
    # Measured here: 3-7 s an epoch on one core of the busy 2-core machine, 0.5 to 1 h a model.
    "full": MusicConfig(name="full", epochs=500),
    # A diagnostic, not the authors' setup: the full models trained by Adam at lr 1e-3 (the
    # default of the upstream locuslab/TCN music_test.py that the authors forked), with
    # everything else as in "full" and 50 epochs. It asks whether the gap between our SGD
    # runs and the paper's numbers is the optimizer's; Chapter 9 labels its rows as such.
    "adam": MusicConfig(name="adam", epochs=50, optimizer="adam", lr=1e-3),
}
PUBLISHED_CONFIGS: tuple[str, ...] = ("full", "adam")


def result_file_name(model: str, variant: str, config: str) -> str:
    """``<model>-<variant>.json`` for the authors' scale, ``<model>-<variant>-<config>.json``
    for the other published configs (in ``data/results/jsb``)."""
    suffix = "" if config == "full" else f"-{config}"
    return f"{model}-{variant}{suffix}.json"


def finished_music_result(
    path: Path, model: str, variant: str, config: MusicConfig
) -> dict[str, Any] | None:
    """The completed result at ``path`` of this very run, else None."""
    if not path.is_file():
        return None
    with open(path, encoding="utf8") as handle:
        result = json.load(handle)
    same_run = (result.get("model"), result.get("variant")) == (model, variant)
    completed = result.get("status") == "completed"
    return result if completed and same_run and same_config(result["config"], config) else None


def get_config(config: str | MusicConfig) -> MusicConfig:
    """A named config (a key of ``CONFIGS``) or a given :class:`MusicConfig`."""
    if isinstance(config, MusicConfig):
        return config
    if config not in CONFIGS:
        raise ValueError(f"unknown config {config!r}; use one of {sorted(CONFIGS)}")
    return CONFIGS[config]


def check_variant(model: str, variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; use one of {list(VARIANTS)}")
    if variant == "authors-bug" and model != "lstm":
        raise ValueError("the 'authors-bug' variant reproduces the authors' LSTM; use --model lstm")
    return variant


class MusicModel(nn.Module):
    """Input layer 88 -> 88, one recurrent layer of H units, decoder H -> 88 logits.

    Args:
        cell: ``"rnn"`` (tanh) or ``"lstm"``.
        hidden_size: ``H`` (the authors: 256).
        stable: whether training projects the weights (:func:`project_music_stable_`).
        input_bound: ``b``; a stable LSTM's inputs satisfy ``||x_t||_inf <= b``.
        forget_bias: the LSTM's initial forget-gate bias.
        authors_bug: reproduce the authors' LSTM: every time step is its own length-1
            sequence (no recurrence), and the forget bias is put in both bias vectors.

    Shapes follow ``nn.RNN``'s default layout: piano rolls ``(T, B, 88)``.
    """

    def __init__(
        self,
        cell: str,
        hidden_size: int = 256,
        stable: bool = False,
        input_bound: float = 1.0,
        forget_bias: float = 10.0,
        authors_bug: bool = False,
    ) -> None:
        super().__init__()
        self.cell = check_cell(cell)
        if hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {hidden_size}")
        if authors_bug and self.cell != "lstm":
            raise ValueError("authors_bug reproduces the authors' LSTM; use cell='lstm'")
        self.stable = stable
        self.input_bound = input_bound
        self.authors_bug = authors_bug
        self.encoder = nn.Linear(NUM_KEYS, NUM_KEYS)
        if self.cell == "rnn":
            self.rnn: nn.RNNBase = nn.RNN(NUM_KEYS, hidden_size, nonlinearity="tanh")
        else:
            self.rnn = nn.LSTM(NUM_KEYS, hidden_size)
            with torch.no_grad():  # gate order i, f, g, o: the forget gate is rows H..2H
                forget = slice(hidden_size, 2 * hidden_size)
                self.rnn.bias_ih_l0[forget] = forget_bias
                self.rnn.bias_hh_l0[forget] = forget_bias if authors_bug else 0.0
        self.decoder = nn.Linear(hidden_size, NUM_KEYS)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    @property
    def num_layers(self) -> int:
        return self.rnn.num_layers

    @property
    def hidden_size(self) -> int:
        return self.rnn.hidden_size

    def embed(self, rolls: Tensor) -> Tensor:
        """``(T, B, 88)`` piano-roll frames -> ``(T, B, 88)`` input vectors ``x_t``."""
        return self.encoder(rolls)

    def recur(self, inputs: Tensor, state: State = None) -> tuple[Tensor, State]:
        """``(T, B, 88)`` inputs -> outputs ``(T, B, H)`` and the final state.

        With ``authors_bug`` every ``x_t`` is run alone from the zero state (the final
        state returned is then None).
        """
        if not self.authors_bug:
            return self.rnn(inputs, state)
        steps, batch = inputs.shape[:2]
        outputs, _ = self.rnn(inputs.reshape(1, steps * batch, -1))
        return outputs.view(steps, batch, -1), None

    def decode(self, outputs: Tensor) -> Tensor:
        """``(..., H)`` outputs -> ``(..., 88)`` logits of the next frame's keys."""
        return self.decoder(outputs)

    def token_nll(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """NLL of the next frame in nats, summed over the keys: ``(..., H), (..., 88) -> (...)``.

        ``-sum_j [v_j log p_j + (1 - v_j) log(1 - p_j)]`` with ``p = sigmoid(logits)``.
        """
        logits = self.decode(outputs)
        return binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(-1)

    def forward(self, rolls: Tensor, state: State = None) -> tuple[Tensor, State]:
        """``(T, B, 88)`` frames -> ``(T, B, 88)`` logits of the next frames, final state."""
        outputs, state = self.recur(self.embed(rolls), state)
        return self.decode(outputs), state


@torch.no_grad()
def project_input_layer_(layer: nn.Linear, bound: float) -> None:
    """Project every row ``[A_i, a_i]`` of a linear layer onto the l1 ball of radius ``bound``.

    Then ``|(A v + a)_i| <= ||A_i||_1 ||v||_inf + |a_i| <= bound`` for every ``v`` in
    ``[0, 1]^n`` (piano-roll frames included).
    """
    joint = torch.cat([layer.weight, layer.bias[:, None]], dim=1)
    joint = project_l1_ball(joint, bound)
    layer.weight.copy_(joint[:, :-1])
    layer.bias.copy_(joint[:, -1])


@torch.no_grad()
def project_music_stable_(model: MusicModel) -> None:
    """Project a model onto its stable set, in place (at initialization and after every step).

    RNN: ``W = weight_hh_l0`` onto ``{||W||_2 <= 1}`` (SVD clipping; tanh is 1-Lipschitz,
    so the state map is a contraction in ``||.||_2`` with ``lambda <= 1`` for every input).
    LSTM: the input layer so that ``||x_t||_inf <= b`` (:func:`project_input_layer_`), then
    the LSTM layer onto the constraint of Chapter 4 for inputs bounded by ``b``.
    """
    rnn = model.rnn
    if model.cell == "rnn":
        project_spectral_balls_([rnn.weight_hh_l0])
        return
    project_input_layer_(model.encoder, model.input_bound)
    project_lstm_weights_(
        rnn.weight_hh_l0,
        rnn.weight_ih_l0,
        input_bound=model.input_bound,
        biases=[rnn.bias_ih_l0, rnn.bias_hh_l0],
    )


def build_music_model(cell: str, variant: str, config: MusicConfig) -> MusicModel:
    """The model of a config, initialized from ``config.seed`` (projected when stable)."""
    check_variant(cell, variant)
    torch.manual_seed(config.seed)
    model = MusicModel(
        cell,
        config.hidden_size,
        stable=variant == "stable",
        input_bound=config.input_bound,
        forget_bias=config.forget_bias,
        authors_bug=variant == "authors-bug",
    )
    if model.stable:
        project_music_stable_(model)
    return model


def pad_rolls(rolls: list[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """Inputs ``(T-1, N, 88)``, targets one step later, and a mask ``(T-1, N)`` of real steps.

    Shorter chorales are padded with zeros at the end; a recurrent model is causal, so
    the padding changes none of the outputs at real steps.
    """
    padded = pad_sequence(rolls)  # (T_max, N, 88)
    lengths = torch.tensor([roll.shape[0] for roll in rolls])
    mask = torch.arange(padded.shape[0] - 1)[:, None] < (lengths - 1)[None, :]
    return padded[:-1], padded[1:], mask


@torch.no_grad()
def step_nlls(model: MusicModel, rolls: list[Tensor]) -> tuple[Tensor, Tensor]:
    """Per-step NLL ``(T-1, N)`` of every chorale (all at once) and the mask of real steps."""
    model.eval()
    inputs, targets, mask = pad_rolls(rolls)
    outputs, _ = model.recur(model.embed(inputs))
    return model.token_nll(outputs, targets), mask


def evaluate_nll(model: MusicModel, rolls: list[Tensor]) -> float:
    """NLL per time step (nats, summed over the 88 keys), over every predicted step.

    A chorale of ``T`` frames contributes the ``T - 1`` predictions of frames ``2..T``
    from the frames before, as in the authors' evaluation.
    """
    nll, mask = step_nlls(model, rolls)
    return float(nll[mask].sum() / mask.sum())


def prepare_rolls(
    config: MusicConfig, rolls: PianoRolls | None, data_dir: str | Path | None
) -> PianoRolls:
    """The piano rolls a config trains on (all, or its smoke slice)."""
    rolls = rolls if rolls is not None else load_jsb(data_dir)
    return PianoRolls(
        rolls.train[: config.train_sequences],
        rolls.valid[: config.eval_sequences],
        rolls.test[: config.eval_sequences],
        rolls.source,
    )


def music_run_name(model: str, variant: str, config: MusicConfig) -> str:
    return f"{model}-{variant}-{config.name}"


def should_decay(epoch: int, val_loss: float, previous: list[float], config: MusicConfig) -> bool:
    """The authors' rule: after epoch ``decay_after``, decay when ``val_loss`` exceeds the
    max of the previous ``decay_window`` validation losses."""
    window = previous[-config.decay_window :]
    return epoch > config.decay_after and bool(window) and val_loss > max(window)


def train_music_model(
    model: str,
    variant: str = "unconstrained",
    config: str | MusicConfig = "smoke",
    *,
    rolls: PianoRolls | None = None,
    data_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    results_dir: str | Path | None = None,
    resume: bool = False,
    progress: bool = True,
    on_step: Any = None,
    stop_below_lr: float | None = None,
) -> dict[str, Any]:
    """Train one JSB model (``"rnn"`` or ``"lstm"``; a variant of ``VARIANTS``).

    ``rolls`` (else ``data_dir`` / ``$STABLERNN_DATA`` / download) gives the data.
    ``on_step(step, model)`` is called after every optimizer step (and projection).
    Returns the result written to ``result.json`` in the run folder (``status``
    ``"completed"`` or ``"interrupted"``); a completed run of a published config also writes
    it to ``results_dir`` (default ``data/results/jsb``), named by :func:`result_file_name`.

    ``stop_below_lr``: end the run (as completed, recorded in ``stopped_early``) at the
    start of an epoch (after the first) whose learning rate is below it.  Every step
    moves the weights by at most ``lr * clip`` (a projection onto a convex set holding
    the previous iterate moves them no further), so the ``E`` epochs left could move
    them by at most ``E * steps_per_epoch * lr * clip``: the price of stopping is bounded.
    """
    cell = check_cell(model)
    variant = check_variant(cell, variant)
    config = get_config(config)
    if stop_below_lr is not None and config.optimizer != "sgd":
        raise ValueError(
            "stop_below_lr bounds what the skipped epochs of clipped SGD could change; it "
            f"does not apply to the {config.optimizer!r} optimizer: drop --stop-below-lr"
        )
    data = prepare_rolls(config, rolls, data_dir)
    name = music_run_name(cell, variant, config)
    out = Path(out_dir) if out_dir is not None else RUNS_DIR / name
    checkpoint_path = out / "checkpoint.pt"
    if checkpoint_path.exists() and not resume:
        raise ValueError(
            f"{checkpoint_path} already exists; pass resume=True (--resume) to continue "
            "that run, or choose another out_dir / delete the folder to start over"
        )
    stable = variant == "stable"
    if resume:
        finished = finished_music_result(out / "result.json", cell, variant, config)
        if finished is not None:
            if progress:
                print(f"{name}: already completed, skipped ({out})")
            return finished

    net = build_music_model(cell, variant, config)
    optimizer_class = torch.optim.Adam if config.optimizer == "adam" else torch.optim.SGD
    optimizer = optimizer_class(net.parameters(), lr=config.lr)
    shuffler = torch.Generator().manual_seed(config.seed)
    state: dict[str, Any] = {
        "epoch": 0,
        "order": None,
        "next_index": 0,
        "epoch_nll_sum": 0.0,
        "epoch_steps": 0,
        "epoch_seconds": 0.0,
        "step": 0,
        "best_val_loss": math.inf,
        "best_epoch": 0,
        "best_model_state": None,
        "val_losses": [],
        "history": [],
        "wall_seconds": 0.0,
    }
    if resume and checkpoint_path.exists():
        saved = torch.load(checkpoint_path, map_location="cpu", weights_only=False)
        same_run = (saved["model"], saved["variant"]) == (cell, variant)
        if not (same_run and same_config(saved["config"], config)):
            raise ValueError(
                f"{checkpoint_path} was written by another run ({saved['model']}, "
                f"{saved['variant']}, config {saved['config']['name']}); resume it with the "
                "same arguments, or choose another out_dir"
            )
        net.load_state_dict(saved["model_state"])
        optimizer.load_state_dict(saved["optimizer_state"])
        shuffler.set_state(saved["shuffler_state"])
        state = saved["progress"]
    out.mkdir(parents=True, exist_ok=True)

    def save_checkpoint() -> None:
        atomic_torch_save(
            {
                "config": asdict(config),
                "model": cell,
                "variant": variant,
                "stable": stable,
                "model_state": net.state_dict(),
                "optimizer_state": optimizer.state_dict(),
                "shuffler_state": shuffler.get_state(),
                "progress": state,
            },
            checkpoint_path,
        )

    diverge_above = config.divergence_factor * NUM_KEYS * math.log(2.0)
    session_start = time.perf_counter()
    wall_before = state["wall_seconds"]
    status = "completed"
    with _StopRequest() as stop:
        while state["epoch"] < config.epochs and status == "completed":
            epoch = state["epoch"] + 1
            lr = optimizer.param_groups[0]["lr"]
            if stop_below_lr is not None and lr < stop_below_lr and state["epoch"] > 0:
                left = config.epochs - state["epoch"]
                state["stopped_early"] = {
                    "after_epoch": state["epoch"],
                    "lr": lr,
                    "stop_below_lr": stop_below_lr,
                    "max_weight_change": left * len(data.train) * lr * config.clip,
                }
                if progress:
                    print(f"{name}: lr {lr:g} < {stop_below_lr:g}, stopped", flush=True)
                break
            net.train()
            if state["order"] is None:
                state["order"] = torch.randperm(len(data.train), generator=shuffler).tolist()
            epoch_clock = time.perf_counter() - state["epoch_seconds"]
            for position in range(state["next_index"], len(state["order"])):
                roll = data.train[state["order"][position]]
                inputs, targets = roll[:-1, None], roll[1:, None]
                optimizer.zero_grad(set_to_none=True)
                outputs, _ = net.recur(net.embed(inputs))
                nll = net.token_nll(outputs, targets)
                loss = nll.sum()  # the authors' objective: summed over the chorale's steps
                per_step = loss.item() / nll.numel()
                if not math.isfinite(per_step) or per_step > diverge_above:
                    raise TrainingDivergedError(
                        f"training diverged at epoch {epoch}, chorale {position}: NLL per step "
                        f"{per_step:.4g} (limit {diverge_above:.3g}). {_kept(checkpoint_path)} "
                        "Fix: lower lr or clip in the config and start a new run."
                    )
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), config.clip)
                optimizer.step()
                if stable:
                    project_music_stable_(net)
                state["step"] += 1
                state["epoch_nll_sum"] += loss.item()
                state["epoch_steps"] += nll.numel()
                if on_step is not None:
                    on_step(state["step"], net)
                if stop.requested:
                    state.update(
                        next_index=position + 1,
                        epoch_seconds=time.perf_counter() - epoch_clock,
                        wall_seconds=wall_before + time.perf_counter() - session_start,
                    )
                    save_checkpoint()
                    status = "interrupted"
                    break
            if status != "completed":
                break
            epoch_seconds = time.perf_counter() - epoch_clock
            val_loss = evaluate_nll(net, data.valid)
            if not math.isfinite(val_loss):
                raise TrainingDivergedError(
                    f"validation NLL is {val_loss} after epoch {epoch}. "
                    f"{_kept(checkpoint_path)} Fix: lower lr or clip in the config."
                )
            lr = optimizer.param_groups[0]["lr"]
            metrics = {
                "epoch": epoch,
                "train_nll": state["epoch_nll_sum"] / state["epoch_steps"],
                "val_nll": val_loss,
                "lr": lr,
                "epoch_seconds": epoch_seconds,
            }
            if val_loss < state["best_val_loss"]:
                state["best_val_loss"], state["best_epoch"] = val_loss, epoch
                state["best_model_state"] = copy.deepcopy(net.state_dict())
            if should_decay(epoch, val_loss, state["val_losses"], config):
                for group in optimizer.param_groups:
                    group["lr"] = lr / config.lr_decay
            state["val_losses"].append(val_loss)
            state["history"].append(metrics)
            state.update(
                epoch=epoch,
                order=None,
                next_index=0,
                epoch_nll_sum=0.0,
                epoch_steps=0,
                epoch_seconds=0.0,
                wall_seconds=wall_before + time.perf_counter() - session_start,
            )
            save_checkpoint()
            if progress:
                print(
                    f"{name} epoch {epoch}/{config.epochs}: train NLL {metrics['train_nll']:.3f}, "
                    f"val NLL {val_loss:.3f}, lr {lr:g}, {epoch_seconds:.1f} s",
                    flush=True,
                )

    result: dict[str, Any] = {
        "task": "jsb",
        "model": cell,
        "variant": variant,
        "stable": stable,
        "status": status,
        "config": asdict(config),
        "seed": config.seed,
        "data": data.source,
        "data_sizes": data.sizes(),
        "provenance": provenance("cpu"),
        "torch_threads": torch.get_num_threads(),
        "wall_seconds": state["wall_seconds"],
        "steps": state["step"],
        "epochs": state["history"],
        "best_val_nll": state["best_val_loss"],
        "best_epoch": state["best_epoch"],
        "stopped_early": state.get("stopped_early"),
    }
    if status == "completed":
        net.load_state_dict(state["best_model_state"])
        result["test_nll"] = evaluate_nll(net, data.test)
        atomic_torch_save(
            {
                "config": asdict(config),
                "model": cell,
                "variant": variant,
                "state_dict": state["best_model_state"],
            },
            out / "model.pt",
        )
        if config.name in PUBLISHED_CONFIGS and config == CONFIGS[config.name]:
            where = Path(results_dir) if results_dir is not None else RESULTS_DIR
            atomic_write_json(where / result_file_name(cell, variant, config.name), result)
    atomic_write_json(out / "result.json", result)
    return result


def load_music_model(run_dir: str | Path) -> MusicModel:
    """The best model saved by :func:`train_music_model` in ``run_dir`` (eval mode)."""
    path = Path(run_dir) / "model.pt"
    if not path.is_file():
        raise ValueError(
            f"{path} does not exist; train the model first "
            "(python -m stablernn_lib train-music ...) and let it finish"
        )
    saved = torch.load(path, map_location="cpu", weights_only=False)
    config = MusicConfig(**saved["config"])
    model = build_music_model(saved["model"], saved["variant"], config)
    model.load_state_dict(saved["state_dict"])
    return model.eval()


def _command(args: argparse.Namespace) -> int:
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    config = get_config(args.config)
    if args.epochs is not None:
        config = replace(config, epochs=args.epochs, name=f"{config.name}-{args.epochs}ep")
    variant = args.variant or ("stable" if args.stable else "unconstrained")
    result = train_music_model(
        args.model,
        variant,
        config,
        data_dir=args.data,
        out_dir=args.out,
        resume=args.resume,
        stop_below_lr=args.stop_below_lr,
    )
    keys = ("model", "variant", "status", "best_val_nll", "best_epoch", "wall_seconds", "test_nll")
    print(json.dumps({k: result[k] for k in keys if k in result}, indent=2))
    return 0 if result["status"] == "completed" else 130


def register(subparsers: argparse._SubParsersAction) -> None:
    """``python -m stablernn_lib train-music --model rnn|lstm [--stable] --config smoke|full``."""
    parser = subparsers.add_parser(
        "train-music",
        help="train an RNN or LSTM on JSB Chorales (Chapter 9)",
        description="Train a polyphonic-music model on JSB Chorales like the authors (Chapter 9).",
    )
    parser.add_argument("--model", choices=["rnn", "lstm"], required=True)
    parser.add_argument("--stable", action="store_true", help="project after every step")
    parser.add_argument(
        "--variant",
        choices=VARIANTS,
        default=None,
        help="instead of --stable: 'authors-bug' reproduces the authors' non-recurrent LSTM",
    )
    parser.add_argument("--config", choices=sorted(CONFIGS), default="smoke")
    parser.add_argument("--epochs", type=int, default=None, help="override the config's epochs")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    parser.add_argument(
        "--stop-below-lr",
        type=float,
        default=None,
        help="end the run once the lr has decayed below this (default: run every epoch)",
    )
    parser.add_argument(
        "--data", default=None, help="folder of JSB_Chorales.mat (default $STABLERNN_DATA)"
    )
    parser.add_argument("--out", default=None, help="run folder (default data/runs/jsb/...)")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.set_defaults(func=_command)
