"""Atomic writes never leave a partial file and provenance names its sources."""

from __future__ import annotations

import json

import pytest
import torch

from stablernn_lib.core.io import (
    atomic_torch_save,
    atomic_write_json,
    describe_provenance,
    device_name,
    provenance,
    readable_device,
)


def test_a_thread_count_of_one_reads_in_the_singular() -> None:
    assert readable_device("cpu (x86_64, 1 threads)") == "cpu (x86_64, 1 thread)"
    assert readable_device("cpu (x86_64, 2 threads)") == "cpu (x86_64, 2 threads)"
    assert readable_device("NVIDIA H200") == "NVIDIA H200"
    assert ", 1 threads)" not in device_name("cpu")


def test_atomic_json_roundtrip(tmp_path):
    path = atomic_write_json(tmp_path / "sub" / "result.json", {"b": 2, "a": [1.5]})
    assert json.loads(path.read_text()) == {"a": [1.5], "b": 2}
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = atomic_write_json(tmp_path / "result.json", {"ok": True})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"ok": True}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_atomic_torch_save_roundtrip(tmp_path):
    path = atomic_torch_save({"w": torch.arange(3)}, tmp_path / "ckpt.pt")
    assert torch.equal(torch.load(path)["w"], torch.arange(3))


def test_provenance_has_the_fields_results_need():
    info = provenance()
    assert set(info) >= {"git_commit", "device", "torch", "python", "created_utc"}
    assert info["device"].startswith("cpu")


def test_describe_provenance_names_device_commit_and_versions():
    info = provenance()
    line = describe_provenance(info)
    assert line.startswith(f"computed on {info['device']} at git commit {info['git_commit'][:12]}")
    assert info["torch"] in line and info["python"] in line and "\n" not in line
