"""The no-memory baseline of JSB: keys independent, each on at its training frequency."""

from __future__ import annotations

import math

import pytest
import torch

from stablernn_lib.tasks.jsb.baseline import DEFAULT_FLOOR, independent_keys_nll, key_frequencies
from stablernn_lib.tasks.jsb.data import NUM_KEYS, load_jsb


def _roll(frames: list[list[int]]) -> torch.Tensor:
    """A ``(T, 88)`` piano roll with the listed keys on in each frame."""
    roll = torch.zeros(len(frames), NUM_KEYS)
    for t, keys in enumerate(frames):
        roll[t, keys] = 1.0
    return roll


def test_baseline_equals_a_hand_count_on_a_tiny_piano_roll():
    # predicted training frames (each chorale's first frame is never predicted):
    # key 0 on in 2 of 4, key 1 in 1 of 4, key 2 in 4 of 4 (clipped to 1 - floor), others 0
    train = [_roll([[5], [0, 2], [1, 2]]), _roll([[0], [0, 2], [2]])]
    test = [_roll([[9], [0, 1, 2], [2, 3]])]
    floor = 1e-3
    q = {0: 0.5, 1: 0.25, 2: 1 - floor}
    torch.testing.assert_close(
        key_frequencies(train, floor)[:3], torch.tensor([0.5, 0.25, 1 - floor], dtype=torch.float64)
    )
    assert float(key_frequencies(train, floor)[3:].max()) == floor
    # test frame 1: keys 0, 1, 2 on; frame 2: keys 2 and 3 on (3 was never heard in training)
    total = 0.0
    for on in ({0, 1, 2}, {2, 3}):
        for key in range(NUM_KEYS):
            p = q.get(key, floor)
            total -= math.log(p) if key in on else math.log(1 - p)
    expected = total / 2
    assert independent_keys_nll(train, test, floor) == pytest.approx(expected, rel=1e-12)


def test_the_floor_keeps_an_unheard_key_finite_and_is_checked():
    train = [_roll([[], [0]])]
    test = [_roll([[], [1]])]
    assert math.isfinite(independent_keys_nll(train, test))
    with pytest.raises(ValueError, match="floor"):
        key_frequencies(train, floor=0.0)
    with pytest.raises(ValueError, match="no chorales"):
        independent_keys_nll([], test)


def test_baseline_on_jsb_is_the_measured_11_09(real_data_dir):
    if not (real_data_dir / "jsb-chorales").is_dir():
        pytest.skip("needs JSB_Chorales.mat under STABLERNN_DATA/jsb-chorales")
    rolls = load_jsb(real_data_dir)
    nll = independent_keys_nll(rolls.train, rolls.test)
    assert nll == pytest.approx(11.09, abs=0.005)
    # the floor matters only for the one test note never heard in training
    assert independent_keys_nll(rolls.train, rolls.test, floor=1e-4) == pytest.approx(nll, abs=0.01)
    assert DEFAULT_FLOOR < 1e-4
