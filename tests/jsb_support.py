"""A small ``.mat`` file with JSB Chorales' layout for the tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stablernn_lib.tasks.jsb.data import MAT_KEYS, NUM_KEYS


def write_synthetic_jsb(
    path: str | Path,
    sequences: tuple[int, int, int] = (24, 6, 6),
    length: tuple[int, int] = (12, 30),
    seed: int = 0,
) -> Path:
    """Write a small ``.mat`` file with JSB's layout (for tests): three-note chords moving up
    two keys a step (wrapping around 88), each held one or two steps at random."""
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
