"""The JSB Chorales loader: real file (when STABLERNN_DATA has it), sha256, corrupt copies."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest
import torch
from jsb_support import write_synthetic_jsb

from stablernn_lib.tasks.jsb.data import (
    FILE_NAME,
    FOLDER_NAME,
    JSB_SHA256,
    JSB_SPLIT_SIZES,
    NUM_KEYS,
    ensure_jsb,
    load_jsb,
    read_piano_rolls,
)
from stablernn_lib.tasks.wikitext2.data import CorpusError, find_data_dir, sha256_of


def _real_folder() -> Path | None:
    root = os.environ.get("STABLERNN_DATA")
    if not root:
        return None
    for candidate in (Path(root), Path(root) / FOLDER_NAME):
        if (candidate / FILE_NAME).is_file():
            return candidate
    return None


needs_real = pytest.mark.skipif(
    _real_folder() is None,
    reason="STABLERNN_DATA does not point at a folder holding jsb-chorales/JSB_Chorales.mat "
    "(.ci/run sets it to ../shared/data)",
)


@needs_real
def test_real_file_has_the_published_splits():
    rolls = load_jsb()
    assert rolls.sizes() == JSB_SPLIT_SIZES
    for roll in rolls.train[:5] + rolls.test[:5]:
        assert roll.shape[1] == NUM_KEYS and roll.dtype == torch.float32
        assert set(roll.unique().tolist()) <= {0.0, 1.0}
    # four voices: never more than four keys at once
    assert max(int(r.sum(1).max()) for r in rolls.train) <= 4


@needs_real
def test_real_file_sha256_and_a_corrupted_copy_is_rejected(tmp_path):
    real = _real_folder() / FILE_NAME
    assert sha256_of(real) == JSB_SHA256
    copy = tmp_path / FOLDER_NAME / FILE_NAME
    copy.parent.mkdir()
    shutil.copyfile(real, copy)
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(bytes(data))
    with pytest.raises(CorpusError) as error:
        load_jsb(tmp_path)
    message = str(error.value)
    assert JSB_SHA256 in message and sha256_of(copy) in message and "fix" in message


@pytest.fixture
def synthetic(tmp_path) -> Path:
    return write_synthetic_jsb(tmp_path / FOLDER_NAME / FILE_NAME, sequences=(5, 3, 2))


def test_synthetic_file_reads_back(synthetic):
    rolls = read_piano_rolls(synthetic)
    sizes = rolls.sizes()
    assert [sizes[s][0] for s in ("train", "valid", "test")] == [5, 3, 2]
    assert all(int(r.sum(1).max()) == 3 for r in rolls.train)


def test_folder_or_parent_via_argument_and_variable(synthetic, monkeypatch):
    digest = sha256_of(synthetic)
    for folder in (synthetic.parent, synthetic.parent.parent):
        assert ensure_jsb(folder, expected_sha256=digest) == synthetic
    monkeypatch.setenv("STABLERNN_DATA", str(synthetic.parent.parent))
    assert find_data_dir(None, FOLDER_NAME, FILE_NAME) == synthetic.parent


def test_wrong_folder_and_wrong_sum_are_clear_errors(synthetic, tmp_path):
    with pytest.raises(CorpusError, match="holds no JSB_Chorales.mat"):
        ensure_jsb(tmp_path / "empty")
    with pytest.raises(CorpusError, match="truncated or altered") as error:
        ensure_jsb(synthetic.parent)  # the real sum, a synthetic file
    assert JSB_SHA256 in str(error.value) and sha256_of(synthetic) in str(error.value)


def test_download_is_verified_and_leaves_nothing_on_failure(synthetic, tmp_path, monkeypatch):
    monkeypatch.delenv("STABLERNN_DATA", raising=False)
    payload = synthetic.read_bytes()
    digest = sha256_of(synthetic)
    cache = tmp_path / "cache"
    path = ensure_jsb(
        cache_dir=cache, urlopen=lambda url: io.BytesIO(payload), expected_sha256=digest
    )
    assert path == cache / FOLDER_NAME / FILE_NAME and path.read_bytes() == payload

    other = tmp_path / "other-cache"
    with pytest.raises(CorpusError, match="nothing was kept"):
        ensure_jsb(
            cache_dir=other, urlopen=lambda url: io.BytesIO(payload[:-10]), expected_sha256=digest
        )
    assert not any(p.is_file() for p in other.rglob("*"))

    def offline(url):
        raise OSError("no network")

    with pytest.raises(CorpusError, match="could not download") as error:
        ensure_jsb(cache_dir=other, urlopen=offline)
    assert "STABLERNN_DATA" in str(error.value)


def test_malformed_file_is_a_clear_error(tmp_path):
    from scipy.io import savemat

    path = tmp_path / "bad.mat"
    savemat(path, {"traindata": torch.zeros(3, 4).numpy()})
    with pytest.raises(CorpusError, match="fix"):
        read_piano_rolls(path)
