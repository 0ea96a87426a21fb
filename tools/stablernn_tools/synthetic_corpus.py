"""A small WikiText-like corpus for tests and the device check's dry run."""

from __future__ import annotations

from pathlib import Path

import torch

from stablernn_lib.tasks.wikitext2.data import SPLITS


def write_synthetic_corpus(
    folder: str | Path,
    vocab_size: int = 50,
    lines: tuple[int, int, int] = (400, 60, 60),
    seed: int = 0,
) -> Path:
    """Write a small WikiText-like corpus (``train/valid/test.txt``) to ``folder``: lines of
    5 to 20 words ``w0 .. w{V-1}`` from a sparse Markov chain, quick to learn (for tests)."""
    if vocab_size < 4:
        raise ValueError(f"vocab_size must be >= 4, got {vocab_size}")
    generator = torch.Generator().manual_seed(seed)
    successors = torch.randint(vocab_size, (vocab_size, 3), generator=generator)
    choice_weights = torch.tensor([0.7, 0.2, 0.1])
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for split, count in zip(SPLITS, lines, strict=True):
        text_lines = []
        for _ in range(count):
            length = int(torch.randint(5, 21, (1,), generator=generator))
            word = int(torch.randint(vocab_size, (1,), generator=generator))
            words = []
            for _ in range(length):
                words.append(f"w{word}")
                pick = int(torch.multinomial(choice_weights, 1, generator=generator))
                word = int(successors[word, pick])
            text_lines.append(" " + " ".join(words) + " \n")
        (folder / f"{split}.txt").write_text("".join(text_lines), encoding="utf8")
    return folder
