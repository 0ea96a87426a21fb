"""Polyphonic music on JSB Chorales: the authors' model and training (millerjohnp/TCN).

``h_t = phi_w(h_{t-1}, v_t)`` (one tanh RNN or LSTM layer of H units, frames ``v_t`` in
{0,1}^88), ``logits_t = D h_t + d`` (88 Bernoulli outputs for ``v_{t+1}``); a step's loss is
the next frame's NLL summed over the keys (nats).  As their ``music_test.py``: SGD at 0.01, one
chorale a step, shuffled, gradient norm clipped to 1, lr / 10 after epoch 10 when the validation
loss exceeds the max of the three before.  Departures: the LSTM is recurrent (``"authors-bug"``:
theirs, ``T`` sequences of length 1), forget bias 10 once (theirs 20), a stable model projected
at initialization too; their input layer, never called by their forward, is an ablation.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.functional import binary_cross_entropy_with_logits
from torch.nn.utils.rnn import pad_sequence

from stablernn_lib.core.io import atomic_write_json
from stablernn_lib.core.results import results_path
from stablernn_lib.tasks import checkpoints, training
from stablernn_lib.tasks.jsb.data import NUM_KEYS, PianoRolls, load_jsb
from stablernn_lib.tasks.wikitext2.model import (
    SequenceModel,
    State,
    check_cell,
    project_spectral_balls_,
)
from stablernn_lib.theory.lstm_certificate import project_l1_ball, project_lstm_weights_

RUNS_DIR = training.DATA_ROOT / "runs" / "jsb"
RESULTS_DIR = results_path("jsb")  # the checkout's data/results/jsb, or the packaged copy
VARIANTS: tuple[str, ...] = ("unconstrained", "stable", "authors-bug")


@dataclass(frozen=True)
class MusicConfig:
    """Every knob of a JSB run (``CONFIGS`` gives the values and why): the schedule of
    :func:`should_decay`, ``train_sequences`` / ``eval_sequences`` (None: all), a step NLL
    above ``divergence_factor * 88 log 2`` stops the run, ``input_encoder`` an input layer
    88 -> 88, ``dropout`` on ``h_t`` before the decoder."""

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
    input_encoder: bool = True
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; use one of {OPTIMIZERS}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")
CONFIGS: dict[str, MusicConfig] = {
    # Seconds per model: the full run's code path at toy scale (lr 0.05: at 0.01 it barely moves).
    "smoke": MusicConfig(
        name="smoke", epochs=6, hidden_size=64, lr=0.05, train_sequences=40, input_encoder=False
    ),
    # The authors' scale, with the input layer their forward never calls (the ablation row).
    "full": MusicConfig(name="full", epochs=500),
    # A diagnostic: "full" trained by Adam at lr 1e-3 (upstream locuslab/TCN's default), 50 epochs.
    "adam": MusicConfig(name="adam", epochs=50, optimizer="adam", lr=1e-3),
    # The authors' architecture (no input layer) with their SGD schedule.
    "authors": MusicConfig(name="authors", epochs=500, input_encoder=False),
    # The authors' model with upstream TCN's music_test.py defaults.
    "adam-tcn": MusicConfig(
        name="adam-tcn",
        epochs=100,
        optimizer="adam",
        lr=1e-3,
        clip=0.2,
        dropout=0.25,
        input_encoder=False,
    ),
}
# The published configs: (folder under data/results/jsb, suffix of the file name).
PUBLISHED_RESULTS: dict[str, tuple[str, str]] = {
    "full": ("", ""),
    "adam": ("", "-adam"),
    "authors": ("authors", ""),
    "adam-tcn": ("adam-tcn", ""),
}


def result_file_name(model: str, variant: str, config: str) -> str:
    """A published config's result file under ``data/results/jsb``:
    ``<folder>/[seed<N>/]<model>-<variant><suffix>.json`` (``PUBLISHED_RESULTS``)."""
    base, seed = training.split_seed(config)
    if base not in PUBLISHED_RESULTS:
        raise ValueError(f"config {config!r} commits no results; {list(PUBLISHED_RESULTS)} do")
    folder, suffix = PUBLISHED_RESULTS[base]
    seed_folder = "" if seed is None else f"seed{seed}"
    return str(Path(folder, seed_folder, f"{model}-{variant}{suffix}.json"))


def get_config(config: str | MusicConfig) -> MusicConfig:
    """A named config (a key of ``CONFIGS``) or a given :class:`MusicConfig`."""
    return training.named_config(config, CONFIGS, MusicConfig)


def check_variant(model: str, variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; use one of {list(VARIANTS)}")
    if variant == "authors-bug" and model != "lstm":
        raise ValueError("the 'authors-bug' variant reproduces the authors' LSTM; use --model lstm")
    return variant


class MusicModel(SequenceModel):
    """One recurrent layer of H units on piano rolls ``(T, B, 88)``, decoder H -> 88 logits;
    ``stable`` for inputs ``||x_t||_inf <= input_bound``, ``input_encoder``: ``x_t = A v_t + a``.
    """

    def __init__(
        self,
        cell: str,
        hidden_size: int = 256,
        stable: bool = False,
        input_bound: float = 1.0,
        forget_bias: float = 10.0,
        authors_bug: bool = False,
        input_encoder: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.cell = check_cell(cell)
        if hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {hidden_size}")
        if authors_bug and self.cell != "lstm":
            raise ValueError("authors_bug reproduces the authors' LSTM; use cell='lstm'")
        if stable and not input_encoder and input_bound < 1.0:
            raise ValueError(
                f"input_bound {input_bound} < 1, but without an input layer the inputs are "
                "piano-roll frames with entries up to 1; use input_bound >= 1"
            )
        self.stable = stable
        self.input_bound = input_bound
        self.authors_bug = authors_bug
        self.encoder = nn.Linear(NUM_KEYS, NUM_KEYS) if input_encoder else None
        self.drop = nn.Dropout(dropout)
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
    def input_encoder(self) -> bool:
        return self.encoder is not None

    def embed(self, rolls: Tensor) -> Tensor:
        """``(T, B, 88)`` frames -> ``(T, B, 88)`` inputs ``x_t`` (frames without an encoder)."""
        return rolls if self.encoder is None else self.encoder(rolls)

    def recur(self, inputs: Tensor, state: State = None) -> tuple[Tensor, State]:
        """``(T, B, 88)`` inputs -> outputs ``(T, B, H)`` and the final state (None with
        ``authors_bug``: every ``x_t`` runs alone from the zero state)."""
        if not self.authors_bug:
            return self.rnn(inputs, state)
        steps, batch = inputs.shape[:2]
        outputs, _ = self.rnn(inputs.reshape(1, steps * batch, -1))
        return outputs.view(steps, batch, -1), None

    def decode(self, outputs: Tensor) -> Tensor:
        """``(..., H)`` outputs -> ``(..., 88)`` logits of the next frame (after dropout)."""
        return self.decoder(self.drop(outputs))

    def token_nll(self, outputs: Tensor, targets: Tensor) -> Tensor:
        """``-sum_j [v_j log p_j + (1 - v_j) log(1 - p_j)]``, ``p = sigmoid(logits)``:
        ``(..., H), (..., 88) -> (...)`` nats."""
        logits = self.decode(outputs)
        return binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(-1)


@torch.no_grad()
def project_input_layer_(layer: nn.Linear, bound: float) -> None:
    """Project every row ``[A_i, a_i]`` onto the l1 ball of radius ``bound``: then
    ``|(A v + a)_i| <= bound`` for every ``v`` in ``[0, 1]^n``."""
    joint = torch.cat([layer.weight, layer.bias[:, None]], dim=1)
    joint = project_l1_ball(joint, bound)
    layer.weight.copy_(joint[:, :-1])
    layer.bias.copy_(joint[:, -1])


@torch.no_grad()
def project_music_stable_(model: MusicModel) -> None:
    """Project a model onto its stable set, in place.  RNN: ``weight_hh_l0`` onto
    ``{||W||_2 <= 1}``.  LSTM: the input layer, if any, so that ``||x_t||_inf <= b``, then the
    LSTM onto Chapter 4's set for inputs bounded by b."""
    rnn = model.rnn
    if model.cell == "rnn":
        project_spectral_balls_([rnn.weight_hh_l0])
        return
    if model.encoder is not None:
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
        input_encoder=config.input_encoder,
        dropout=config.dropout,
    )
    if model.stable:
        project_music_stable_(model)
    return model


def pad_rolls(rolls: list[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """Inputs ``(T-1, N, 88)``, targets one step later, and a mask ``(T-1, N)`` of real steps
    (zeros pad the end of shorter chorales: a causal model's real outputs do not change)."""
    padded = pad_sequence(rolls)  # (T_max, N, 88)
    lengths = torch.tensor([roll.shape[0] for roll in rolls])
    mask = torch.arange(padded.shape[0] - 1)[:, None] < (lengths - 1)[None, :]
    return padded[:-1], padded[1:], mask


@torch.no_grad()
def evaluate_nll(model: MusicModel, rolls: list[Tensor]) -> float:
    """NLL per predicted step (nats): ``T - 1`` predictions of a chorale of ``T`` frames."""
    model.eval()
    inputs, targets, mask = pad_rolls(rolls)
    outputs, _ = model.recur(model.embed(inputs))
    nll = model.token_nll(outputs, targets)
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
    """After epoch ``decay_after``: ``val_loss`` above the max of the last ``decay_window``."""
    window = previous[-config.decay_window :]
    return epoch > config.decay_after and bool(window) and val_loss > max(window)


class MusicTask(training.Task):
    """JSB Chorales for the training loop: one chorale a step, the loss summed over it."""

    loss_name = "NLL per step"

    def __init__(self, cell: str, variant: str, config: MusicConfig, data: PianoRolls) -> None:
        self.name = music_run_name(cell, variant, config)
        self.config, self.data, self.stable = config, data, variant == "stable"
        self.identity = {"model": cell, "variant": variant}
        self.model = build_music_model(cell, variant, config)
        optimizer_class = torch.optim.Adam if config.optimizer == "adam" else torch.optim.SGD
        self.optimizer = optimizer_class(self.model.parameters(), lr=config.lr)
        self.shuffler = torch.Generator().manual_seed(config.seed)
        self.diverge_above = config.divergence_factor * NUM_KEYS * math.log(2.0)
        self.steps_per_epoch = len(data.train)

    def epoch_order(self) -> list[int]:
        return torch.randperm(len(self.data.train), generator=self.shuffler).tolist()

    def loss(self, index: int, carried: None) -> tuple[Tensor, float, int, None]:
        roll = self.data.train[index]
        outputs, _ = self.model.recur(self.model.embed(roll[:-1, None]))
        nll = self.model.token_nll(outputs, roll[1:, None])
        loss = nll.sum()  # the authors' objective: summed over the chorale's steps
        return loss, loss.item() / nll.numel(), nll.numel(), None

    def project(self) -> None:
        if self.stable:
            project_music_stable_(self.model)

    def validate(self) -> float:
        return evaluate_nll(self.model, self.data.valid)

    def should_decay(
        self, epoch: int, val_loss: float, improved: bool, previous: list[float]
    ) -> bool:
        return should_decay(epoch, val_loss, previous, self.config)

    def epoch_record(self, stats: training.EpochStats) -> tuple[dict[str, Any], str]:
        metrics = {
            "epoch": stats.epoch,
            "train_nll": stats.train_loss,
            "val_nll": stats.val_loss,
            "lr": stats.lr,
            "epoch_seconds": stats.seconds,
        }
        line = (
            f"{self.name} epoch {stats.epoch}/{self.config.epochs}: "
            f"train NLL {stats.train_loss:.3f}, val NLL {stats.val_loss:.3f}, "
            f"lr {stats.lr:g}, {stats.seconds:.1f} s"
        )
        return metrics, line

    def extra_state(self) -> dict[str, Any]:
        return {"stable": self.stable, "shuffler_state": self.shuffler.get_state()}

    def load_extra_state(self, saved: dict[str, Any]) -> None:
        self.shuffler.set_state(saved["shuffler_state"])


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
    """Train one JSB model in its run folder; the result written to ``result.json`` (and, for
    a completed published config, at :func:`result_file_name` under ``results_dir``)."""
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
    identity = {"model": cell, "variant": variant}
    finished = checkpoints.finished_or_fresh(out, name, identity, config, resume, progress)
    if finished is not None:  # a rerun of a finished run: nothing to do
        return finished
    task = MusicTask(cell, variant, config, data)
    status, state = training.train(
        task, out, resume=resume, progress=progress, on_step=on_step, stop_below_lr=stop_below_lr
    )
    result: dict[str, Any] = {
        "task": "jsb",
        "model": cell,
        "variant": variant,
        "stable": task.stable,
        "status": status,
        "config": asdict(config),
        "seed": config.seed,
        "data": data.source,
        "data_sizes": data.sizes(),
        "provenance": checkpoints.run_provenance(state, "cpu"),
        "torch_threads": torch.get_num_threads(),
        "wall_seconds": state["wall_seconds"],
        "steps": state["step"],
        "epochs": state["history"],
        "best_val_nll": state["best_val_loss"],
        "best_epoch": state["best_epoch"],
        "stopped_early": state.get("stopped_early"),
    }
    if status == "completed":
        checkpoints.save_best_model(task, state, out / "model.pt")
        result["test_nll"] = evaluate_nll(task.model, data.test)
        if config == training.published_config(config.name, CONFIGS, PUBLISHED_RESULTS):
            where = Path(results_dir) if results_dir is not None else RESULTS_DIR
            atomic_write_json(where / result_file_name(cell, variant, config.name), result)
    atomic_write_json(out / "result.json", result)
    return result


def load_music_model(run_dir: str | Path) -> MusicModel:
    """The best model saved by :func:`train_music_model` in ``run_dir`` (eval mode)."""
    saved = checkpoints.load_best_model(run_dir, "train-music")
    config = MusicConfig(**saved["config"])
    model = build_music_model(saved["model"], saved["variant"], config)
    model.load_state_dict(saved["state_dict"])
    return model.eval()


def _command(args: argparse.Namespace) -> int:
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    config = training.config_of_arguments(args, get_config)
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
    return training.print_summary(result, keys)


def register(subparsers: argparse._SubParsersAction) -> None:
    """``python -m stablernn_lib train-music --model rnn|lstm [--stable] --config smoke|full``."""
    parser = subparsers.add_parser(
        "train-music",
        help="train an RNN or LSTM on JSB Chorales (Chapter 9)",
        description="Train a polyphonic-music model on JSB Chorales like the authors (Chapter 9).",
    )
    training.add_run_arguments(parser, CONFIGS, "folder of JSB_Chorales.mat", "data/runs/jsb")
    parser.add_argument(
        "--variant",
        choices=VARIANTS,
        default=None,
        help="instead of --stable: 'authors-bug' reproduces the authors' non-recurrent LSTM",
    )
    parser.add_argument(
        "--stop-below-lr",
        type=float,
        default=None,
        help="end the run once the lr has decayed below this (default: run every epoch)",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.set_defaults(func=_command)
