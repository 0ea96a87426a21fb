"""The paper's measurements on trained language models (Chapter 8), written to a config's
``analysis.json`` by ``python -m stablernn_lib lm-analysis --config smoke|cpu|full``."""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from torch import Tensor
from tqdm.auto import tqdm

from stablernn_lib.core.contraction import jacobian_norms
from stablernn_lib.core.io import atomic_write_json, provenance, same_config
from stablernn_lib.core.models import LSTMMap, RecurrentMap, VanillaRNN
from stablernn_lib.core.plot_helpers import finish_axis, plot_truncated_curves
from stablernn_lib.core.style import finish, model_color
from stablernn_lib.tasks.wikitext2.data import (
    Corpus,
    batch_starts,
    batchify,
    get_batch,
)
from stablernn_lib.tasks.wikitext2.model import (
    State,
    WordLanguageModel,
    detach_state,
    dropout_off,
    evaluate_loss,
    perplexity,
    truncated_loss,
    truncated_outputs,
)
from stablernn_lib.tasks.wikitext2.train import (
    CONFIGS,
    PUBLISHED_RESULTS,
    RUNS_DIR,
    LMConfig,
    build_model,
    load_trained_model,
    prepare_corpus,
    results_folder,
    run_name,
)
from stablernn_lib.tasks.wikitext2.variants import (
    MODEL_LABELS,
    MODEL_VARIANTS,
    VARIANTS_BY_NAME,
    variant_name,
)


def _repeat_state(state: State, copies: int) -> State:
    """Repeat a ``(L, B, H)`` state (or an LSTM pair) along the batch: ``(L, copies * B, H)``."""
    if state is None:
        return None
    if isinstance(state, Tensor):
        return state.repeat(1, copies, 1)
    return tuple(part.repeat(1, copies, 1) for part in state)


# The norms ``||grad_{x_t} p_j||`` of one window ``(W, B)``, as a tensor ``[t, j, b]``.
WindowNorms = Callable[[WordLanguageModel, Tensor, Tensor, State], Tensor]


def _profile_by_distance(
    model: WordLanguageModel,
    source: Tensor,
    max_distance: int,
    max_windows: int | None,
    window_norms: WindowNorms,
    progress: bool = False,
) -> dict[str, list[float]]:
    """``distance``, ``mean_norm``, ``count`` over windows of ``max_distance + 1`` rows of
    ``source (N, B)`` from the carried state, dropout off."""
    length_max = max_distance + 1
    sums = torch.zeros(length_max, dtype=torch.float64)
    counts = torch.zeros(length_max, dtype=torch.float64)
    state: State = None
    starts = list(batch_starts(source.shape[0], length_max))[:max_windows]
    with dropout_off(model):
        for start in tqdm(starts, disable=not progress):
            tokens, targets = get_batch(source, start, length_max)
            norms = window_norms(model, tokens, targets, state).double().cpu()
            for distance in range(tokens.shape[0]):  # the pairs t = j - distance
                pairs = torch.diagonal(norms, offset=distance, dim1=0, dim2=1)
                sums[distance] += pairs.sum()
                counts[distance] += pairs.numel()
            with torch.no_grad():
                _, state = model(tokens, state)
    return {
        "distance": list(range(length_max)),
        "mean_norm": (sums / counts.clamp(min=1)).tolist(),
        "count": counts.tolist(),
    }


def _norms_batched(
    model: WordLanguageModel, tokens: Tensor, targets: Tensor, state: State
) -> Tensor:
    length, batch = tokens.shape[:2]
    copies = tokens.repeat(1, length, *[1] * (tokens.dim() - 2))  # (L, L * B, ...)
    inputs = model.embed(copies).detach().requires_grad_(True)
    outputs, _ = model.recur(inputs, _repeat_state(state, length))
    rows = torch.arange(length, device=tokens.device)
    picked = outputs.view(length, length, batch, -1)[rows, rows]  # (j, B, H): row j of copy j
    loss = model.token_nll(picked, targets).sum()
    (grad,) = torch.autograd.grad(loss, inputs)
    return grad.view(length, length, batch, -1).norm(dim=-1)


def _norms_per_pair(
    model: WordLanguageModel, tokens: Tensor, targets: Tensor, state: State
) -> Tensor:
    length = tokens.shape[0]
    norms = torch.zeros(length, length, tokens.shape[1], device=tokens.device)
    for j in range(length):
        for t in range(j + 1):
            inputs = model.embed(tokens).detach().requires_grad_(True)
            outputs, _ = model.recur(inputs, state)
            loss = model.token_nll(outputs[j], targets[j]).sum()
            (grad,) = torch.autograd.grad(loss, inputs)
            norms[t, j] = grad[t].norm(dim=-1)
    return norms


def gradient_by_distance(
    model: WordLanguageModel,
    source: Tensor,
    max_distance: int,
    max_windows: int | None = None,
    progress: bool = False,
) -> dict[str, list[float]]:
    """Mean ``||grad_{x_t} p_{t+i}||_2``, ``i = 0..max_distance``, ``x_t`` the embedding at row
    ``t`` of ``source (N, B)``, ``p_s`` the loss at row ``s``: the window copied along the batch,
    copy ``j`` keeping its loss at row ``j``, one backward pass gives every pair."""
    return _profile_by_distance(model, source, max_distance, max_windows, _norms_batched, progress)


def gradient_by_distance_naive(
    model: WordLanguageModel, source: Tensor, max_distance: int, max_windows: int | None = None
) -> dict[str, list[float]]:
    """The average of :func:`gradient_by_distance`, one forward/backward pass per pair."""
    return _profile_by_distance(model, source, max_distance, max_windows, _norms_per_pair)


def truncated_eval_curve(
    model: WordLanguageModel, source: Tensor, ks: list[int], bptt: int = 35, progress: bool = False
) -> dict[str, Any]:
    """Held-out ``loss`` and ``ppl`` of the model with context ``k`` for each ``k``, and of the
    recurrent model (any model with ``embed``/``recur``/``token_nll``)."""
    losses = [truncated_loss(model, source, k) for k in tqdm(ks, disable=not progress)]
    full = evaluate_loss(model, source, bptt)
    return {
        "k": list(ks),
        "loss": losses,
        "ppl": [perplexity(loss) for loss in losses],
        "recurrent_loss": full,
        "recurrent_ppl": perplexity(full),
    }


def layer_map(model: WordLanguageModel, layer: int) -> RecurrentMap:
    """Layer ``layer`` of the model's recurrent stack as a state map of the core library."""
    rnn = model.rnn
    weights = {name: getattr(rnn, f"{name}_l{layer}") for name in ("weight_hh", "weight_ih")}
    bias = getattr(rnn, f"bias_ih_l{layer}") + getattr(rnn, f"bias_hh_l{layer}")
    input_size, hidden = weights["weight_ih"].shape[1], rnn.hidden_size
    factory = {"dtype": bias.dtype, "device": bias.device}
    if model.cell == "rnn":
        step_map: RecurrentMap = VanillaRNN(input_size, hidden, "tanh", bias=True, **factory)
    else:
        step_map = LSTMMap(input_size, hidden, bias=True, **factory)
    with torch.no_grad():
        step_map.weight_hh.copy_(weights["weight_hh"])
        step_map.weight_ih.copy_(weights["weight_ih"])
        step_map.bias.copy_(bias)
    return step_map


def state_jacobian_norms(
    model: WordLanguageModel,
    source: Tensor,
    positions: int,
    burn_in: int = 50,
    chunk: int = 64,
) -> list[list[float]]:
    """Per layer, ``||d phi / d h||_2`` at ``positions`` points ``(h_{t-1}, x_t)`` the held-out
    rows of ``source (N, B)`` visit after ``burn_in`` rows (LSTM state ``(c, h)``)."""
    model.eval()
    rows = min(source.shape[0], burn_in + math.ceil(positions / source.shape[1]))
    if rows <= burn_in:
        raise ValueError(
            f"source has {source.shape[0]} rows, not more than burn_in = {burn_in}; "
            "use more held-out data or a smaller burn_in"
        )
    with torch.no_grad():
        inputs = model.embed(source[:rows])
    per_layer = []
    for layer in range(model.num_layers):
        step_map = layer_map(model, layer)
        with torch.no_grad():
            states = step_map.run(inputs)  # (rows, B, S)
        previous = torch.cat([step_map.zero_state(inputs.shape[1])[None], states[:-1]])
        points_h = previous[burn_in:].flatten(0, 1)[:positions]
        points_x = inputs[burn_in:].flatten(0, 1)[:positions]
        norms = [
            jacobian_norms(step_map, points_h[i : i + chunk], points_x[i : i + chunk])
            for i in range(0, points_h.shape[0], chunk)
        ]
        per_layer.append(torch.cat(norms).cpu().tolist())
        inputs = step_map.output(states)
    return per_layer


def recurrent_weights(model: WordLanguageModel) -> Tensor:
    """All ``weight_hh_l{n}`` of the stack, flattened into one vector."""
    rnn = model.rnn
    return torch.cat(
        [getattr(rnn, f"weight_hh_l{n}").detach().flatten() for n in range(rnn.num_layers)]
    )


def weights_close_experiment(
    cell: str,
    config: LMConfig,
    corpus: Corpus,
    ks: list[int],
    steps: int,
    record_every: int,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> dict[str, Any]:
    """Train a recurrent model and context-``k`` models in lockstep (same initialization,
    batches, constant lr, clipping; dropout off); every ``record_every`` steps
    ``||W_rec - W_k||_F / ||W_rec||_F`` over all ``W_hh``."""
    config = replace(config, dropout=0.0)
    device = torch.device(device)
    source = batchify(corpus.train, config.batch_size).to(device)
    reference = build_model(cell, False, config, corpus.vocab_size).to(device)
    models = {"recurrent": reference} | {f"k={k}": copy.deepcopy(reference) for k in ks}
    for model in models.values():
        model.rnn.flatten_parameters()  # copies need one contiguous weight buffer for cuDNN
    optimizers = {
        name: torch.optim.SGD(model.parameters(), lr=config.lr) for name, model in models.items()
    }
    starts = batch_starts(source.shape[0], config.bptt)
    record: dict[str, Any] = {"step": [], "relative_distance": {f"k={k}": [] for k in ks}}
    state: State = None
    for step in tqdm(range(1, steps + 1), disable=not progress):
        start = starts[(step - 1) % len(starts)]
        if start == 0:
            state = None
        tokens, targets = get_batch(source, start, config.bptt)
        for name, model in models.items():
            model.train()
            if name == "recurrent":
                outputs, state = model.recur(model.embed(tokens), detach_state(state))
            else:
                k = int(name.removeprefix("k="))
                outputs = truncated_outputs(model, source, start, tokens.shape[0], k)
            loss = model.token_nll(outputs, targets).mean()
            optimizers[name].zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip)
            optimizers[name].step()
        if step % record_every == 0 or step == steps:
            w_rec = recurrent_weights(reference)
            record["step"].append(step)
            for k in ks:
                gap = (recurrent_weights(models[f"k={k}"]) - w_rec).norm() / w_rec.norm()
                record["relative_distance"][f"k={k}"].append(float(gap))
    return {"cell": cell, "ks": list(ks), "steps": steps, **record}


@dataclass(frozen=True)
class AnalysisConfig:
    """Sizes of the measurements (``smoke``: CPU seconds; ``full``: GPU, whole held-out set)."""

    name: str
    test_tokens: int | None
    max_distance: int
    gradient_windows: int | None
    truncation_ks: tuple[int, ...]
    jacobian_positions: int
    weights_ks: tuple[int, ...]
    weights_steps: int
    weights_record_every: int


ANALYSIS_CONFIGS: dict[str, AnalysisConfig] = {
    "smoke": AnalysisConfig(
        name="smoke",
        test_tokens=2_000,
        max_distance=15,
        gradient_windows=8,
        truncation_ks=(1, 2, 5, 10, 20),
        jacobian_positions=200,
        weights_ks=(2, 8),
        weights_steps=20,
        weights_record_every=4,
    ),
    # The `cpu` models on the first 50,000 test tokens; about 40 min at one CPU thread.
    "cpu": AnalysisConfig(
        name="cpu",
        test_tokens=50_000,
        max_distance=50,
        gradient_windows=40,
        truncation_ks=(1, 2, 3, 5, 8, 13, 20, 35, 60, 100),
        jacobian_positions=1_000,
        weights_ks=(2, 5, 10),
        weights_steps=150,
        weights_record_every=10,
    ),
    # The whole test set; weights close for one epoch of the full config (2,983 steps).
    "full": AnalysisConfig(
        name="full",
        test_tokens=None,
        max_distance=50,
        gradient_windows=None,
        truncation_ks=(1, 2, 3, 5, 10, 15, 20, 35, 50, 100, 200),
        jacobian_positions=1000,
        weights_ks=(5, 10, 20, 35),
        weights_steps=2983,
        weights_record_every=100,
    ),
}


# Every other cpu-scale config: the measurements of `cpu`, so that the curves compare.
for _name in CONFIGS:
    if _name.startswith("cpu-"):
        ANALYSIS_CONFIGS[_name] = replace(ANALYSIS_CONFIGS["cpu"], name=_name)


def resumed(path: Path, fresh: dict[str, Any], config_key: str, config: Any) -> dict[str, Any]:
    """The result at ``path`` if of the same configs (``fresh``'s provenance), else ``fresh``."""
    fresh = json.loads(json.dumps(fresh))
    if path.is_file():
        previous = json.loads(path.read_text(encoding="utf8"))
        saved = previous.get(config_key)
        if previous.get("config") == fresh["config"] and saved and same_config(saved, config):
            return previous | {"provenance": fresh["provenance"]}
    return fresh


ANALYSIS_PARTS = ("figure2", "truncated", "jacobians", "certificates", "weights_close")


def run_analysis(
    config: str = "smoke",
    *,
    corpus: Corpus | None = None,
    data_dir: str | Path | None = None,
    runs_dir: str | Path | None = None,
    results_path: str | Path | None = None,
    parts: tuple[str, ...] = ANALYSIS_PARTS,
    variants: tuple[tuple[str, bool], ...] | None = None,
    device: str | torch.device | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Every measurement on the test split of the ``variants`` of the LM config of the same
    name, written with its ``seconds`` to ``results_path`` (``analysis.json`` of the results
    folder, else ``analysis-<config>.json`` of the runs) after each; a rerun adds what is missing.
    """
    analysis = ANALYSIS_CONFIGS[config]
    lm_config = CONFIGS[config]
    variants = MODEL_VARIANTS if variants is None else variants
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    runs = Path(runs_dir) if runs_dir is not None else RUNS_DIR
    if results_path is None:
        if config in PUBLISHED_RESULTS:
            results_path = results_folder(config) / "analysis.json"
        else:
            results_path = runs / f"analysis-{config}.json"
    results_path = Path(results_path)
    data = prepare_corpus(lm_config, corpus, data_dir)
    test = batchify(data.test[: analysis.test_tokens], lm_config.eval_batch_size).to(device)
    fresh = {"config": asdict(analysis), "lm_config": asdict(lm_config)}
    result = resumed(
        results_path, fresh | {"provenance": provenance(device)}, "lm_config", lm_config
    )
    seconds: dict[str, float] = result.setdefault("seconds", {})

    def measure(entry: dict[str, Any], key: str, label: str, compute: Any, *args: Any) -> None:
        if key in entry:
            return
        if progress:
            print(f"{label}: {key}")
        clock = time.perf_counter()
        entry[key] = compute(*args)
        seconds[f"{label}/{key}"] = time.perf_counter() - clock
        atomic_write_json(results_path, result)

    for cell in ("rnn", "lstm"):
        for stable in (False, True):
            if (cell, stable) not in variants:
                continue
            variant = variant_name(cell, stable)
            model = load_trained_model(runs / run_name(cell, stable, lm_config), device)
            entry: dict[str, Any] = result.setdefault(variant, {})
            if "truncated" in parts:
                measure(
                    entry, "truncated_eval", variant, truncated_eval_curve,
                    model, test, list(analysis.truncation_ks), lm_config.bptt, progress,
                )  # fmt: skip
            if "figure2" in parts:
                measure(
                    entry, "figure2", variant, gradient_by_distance,
                    model, test, analysis.max_distance, analysis.gradient_windows, progress,
                )  # fmt: skip
            if "jacobians" in parts:
                measure(
                    entry, "jacobian_norms", variant, state_jacobian_norms,
                    model, test, analysis.jacobian_positions, 30,
                )  # fmt: skip
            if "certificates" in parts and cell == "rnn":
                measure(entry, "diagonal_certificates", variant, _certificates, model)
        if "weights_close" in parts and cell in {model_cell for model_cell, _ in variants}:
            measure(
                result, f"weights_close-{cell}", "weights_close", weights_close_experiment,
                cell, lm_config, data, list(analysis.weights_ks), analysis.weights_steps,
                analysis.weights_record_every, device, progress,
            )  # fmt: skip
    atomic_write_json(results_path, result)
    return result


def _certificates(model: WordLanguageModel) -> list[dict[str, Any]]:
    """Per RNN layer: ``||W||_2`` and the best diagonal scaling ``||D W D^-1||_2`` (Chapter 4)."""
    from stablernn_lib.theory.diagonal_scaling import certificate_rows

    return [
        {key: value for key, value in row.items() if key != "model"}
        for row in certificate_rows({"model": model})
    ]


def _plain_name(name: str) -> str:
    """A variant's name for a reader: ``"lstm-stable"`` -> ``"LSTM, stable"``."""
    cell, _, kind = name.partition("-")
    return f"{MODEL_LABELS[cell]}, {kind}" if cell in MODEL_LABELS and kind else name


def plot_figure2(analysis: dict[str, Any], title: str = "") -> Figure:
    """``||grad_{x_t} p_{t+i}||`` against ``i`` for the unconstrained RNN and LSTM (log scale)."""
    figure, axis = plt.subplots(figsize=(6, 3.6))
    for cell in ("rnn", "lstm"):
        for stable in (False, True):
            profile = analysis.get(variant_name(cell, stable), {}).get("figure2")
            if profile:
                axis.semilogy(
                    profile["distance"],
                    profile["mean_norm"],
                    "s--" if stable else "o-",
                    ms=3,
                    color=model_color(variant_name(cell, stable)),
                    label=MODEL_LABELS[cell] + (", stable" if stable else ""),
                )
    ylabel = r"mean $\|\nabla_{x_t} p_{t+i}\|$"
    return finish_axis(figure, axis, "distance i between input and loss", ylabel, title, None)


def plot_truncated_eval(analysis: dict[str, Any], title: str = "") -> Figure:
    """Perplexity of the context-``k`` model against ``k``; dashed: the recurrent model."""
    return plot_truncated_curves(
        analysis, "ppl", _plain_name, "context k", "test perplexity", title, 6
    )


def plot_jacobian_norms(analysis: dict[str, Any], title: str = "") -> Figure:
    """Histograms of the per-step state-Jacobian norms, per model and layer."""
    names = [n for n, e in analysis.items() if isinstance(e, dict) and "jacobian_norms" in e]
    columns = min(2, len(names))  # two panels a row: each wide enough to read at column width
    rows = math.ceil(len(names) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(8, 2.6 * rows), squeeze=False)
    for axis in axes.flat[len(names) :]:
        axis.set_visible(False)
    for axis, name in zip(axes.flat, names, strict=False):
        for layer, norms in enumerate(analysis[name]["jacobian_norms"]):
            axis.hist(  # the model's colour; layer 1 filled, layer 2 outlined
                norms, bins=30, color=model_color(name), lw=1.5, label=f"layer {layer + 1}",
                histtype="stepfilled" if layer == 0 else "step", alpha=0.5 if layer == 0 else 1,
            )  # fmt: skip
        axis.axvline(1.0, color="k", lw=0.8)
        cell = name.partition("-")[0]
        axis.set_title(_plain_name(name))
        state = (
            r"(c_t, h_t) / \partial (c_{t-1}, h_{t-1})"
            if cell == "lstm"
            else r"h_t / \partial h_{t-1}"
        )
        axis.set_xlabel(rf"$\|\partial {state}\|_2$")
    if any(len(analysis[n]["jacobian_norms"]) > 1 for n in names):  # a legend only for stacks
        axes[0][0].legend()
    figure.suptitle(title)
    figure.tight_layout()
    return finish(figure)


def plot_weights_close(analysis: dict[str, Any], title: str = "") -> Figure:
    """Relative distance of recurrent weights, recurrent vs context-``k`` training, RNN and LSTM."""
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for axis, cell in zip(axes, ("rnn", "lstm"), strict=True):
        record = analysis.get(f"weights_close-{cell}")
        if record:
            distances = record["relative_distance"]  # keys "k=2", "k=5", ...: sorted by k
            for name in sorted(distances, key=lambda key: int(key.partition("=")[2])):
                axis.semilogy(record["step"], distances[name], "o-", ms=3, label=name)
            axis.legend()
        axis.set_title(MODEL_LABELS[cell])
        axis.set_xlabel("SGD step")
    axes[0].set_ylabel(r"$\|W_{rec} - W_k\|_F / \|W_{rec}\|_F$")
    figure.suptitle(title)
    figure.tight_layout()
    return finish(figure)


def _command(args: argparse.Namespace) -> int:
    result = run_analysis(
        args.config,
        data_dir=args.data,
        runs_dir=args.runs,
        results_path=args.out,
        parts=tuple(args.parts),
        variants=tuple(VARIANTS_BY_NAME[name] for name in args.variants or VARIANTS_BY_NAME),
        device=args.device,
    )
    print(f"analysis written ({', '.join(k for k in result if '-' in k)})")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """``python -m stablernn_lib lm-analysis --config smoke|cpu|full``."""
    parser = subparsers.add_parser(
        "lm-analysis",
        help="Figure 2, truncated evaluation, Jacobians, weights close (WikiText-2)",
        description="Measurements of Chapter 8 on the models trained by `train`.",
    )
    parser.add_argument("--config", choices=sorted(ANALYSIS_CONFIGS), default="smoke")
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=list(ANALYSIS_PARTS),
        default=list(ANALYSIS_PARTS),
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS_BY_NAME),
        default=None,
        help="the trained models to measure (default: all four)",
    )
    parser.add_argument("--data", default=None, help="WikiText-2 folder (default $STABLERNN_DATA)")
    parser.add_argument(
        "--runs", default=None, help="folder of trained runs (default data/runs/wikitext2)"
    )
    parser.add_argument(
        "--out", default=None, help="result JSON (default data/results/wikitext2/analysis.json)"
    )
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    parser.set_defaults(func=_command)
