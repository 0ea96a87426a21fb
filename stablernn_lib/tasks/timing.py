"""Shared pieces of the step-time benchmarks: configs and devices, a clock, token streams
shaped like words, and one constrained SGD step as a closure."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from stablernn_lib.tasks.wikitext2.data import WIKITEXT2_VOCAB_SIZE
from stablernn_lib.tasks.wikitext2.model import WordLanguageModel, detach_state
from stablernn_lib.tasks.wikitext2.train import CONFIGS, LMConfig


def timer(device: torch.device) -> Callable[[], float]:
    """A clock that waits for the device (CUDA work is asynchronous)."""

    def now() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    return now


def benchmark_setup(
    config: str, device: str | torch.device | None
) -> tuple[LMConfig, torch.device, Callable[[], float], int]:
    """The named LM config, the device (default: CUDA if present), its clock, the vocabulary."""
    lm = CONFIGS[config]
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return lm, device, timer(device), lm.vocab_size or WIKITEXT2_VOCAB_SIZE


def zipf_tokens(vocab: int, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    """Token ids with ``p(id r) ~ 1 / (r + 1)``, like word frequencies by rank."""
    zipf = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    return torch.multinomial(zipf, shape[0] * shape[1], True, generator=generator).view(shape)


def constrained_step(
    model: WordLanguageModel,
    tokens: torch.Tensor,
    clip: float,
    lr: float,
    constrain: Callable[[WordLanguageModel], None] | None,
    read_loss: bool = False,
) -> Callable[[], None]:
    """One SGD step followed by ``constrain(model)`` (None: none), as a closure.

    ``read_loss``: read the loss on the host every step, as the training loop's divergence
    check does (on a GPU a synchronization).
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    carried: list[Any] = [None]

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        outputs, state = model.recur(model.embed(tokens[:-1]), detach_state(carried[0]))
        loss = model.token_nll(outputs, tokens[1:]).mean()
        if read_loss:
            loss.item()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if constrain is not None:
            constrain(model)
        carried[0] = state

    return step
