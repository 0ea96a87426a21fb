"""WikiText-2 loader: files, hashes, download, vocabulary, batching."""

from __future__ import annotations

import hashlib
import io
import shutil
from pathlib import Path

import pytest
import torch

from stablernn_lib.tasks.wikitext2 import data
from stablernn_lib.tasks.wikitext2.data import (
    FOLDER_NAME,
    WIKITEXT2_SHA256,
    WIKITEXT2_TOKENS,
    WIKITEXT2_VOCAB_SIZE,
    Corpus,
    CorpusError,
    batch_starts,
    batchify,
    download_verified,
    ensure_wikitext2,
    find_data_dir,
    get_batch,
    load_wikitext2,
)

SYNTHETIC = {
    "train.txt": " the cat sat on the mat \n the dog sat on the log \n\n a cat ran \n",
    "valid.txt": " the dog ran \n",
    "test.txt": " a cat sat on a log \n",
}


def write_corpus(folder: Path, files: dict[str, str] = SYNTHETIC) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    sums = {}
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf8")
        sums[name] = hashlib.sha256(text.encode()).hexdigest()
    return sums


def test_synthetic_corpus_counts_and_eos(tmp_path: Path) -> None:
    sums = write_corpus(tmp_path / "wikitext-2")
    corpus = Corpus.from_folder(tmp_path / "wikitext-2", sums)
    words = corpus.dictionary.index_to_word
    # train: 6 + 6 + 0 + 3 words, one <eos> per line (4 lines)
    assert corpus.train.numel() == 15 + 4
    assert [words[i] for i in corpus.train[:7]] == [
        "the",
        "cat",
        "sat",
        "on",
        "the",
        "mat",
        "<eos>",
    ]
    assert [words[i] for i in corpus.train[14:16]] == ["<eos>", "a"]  # the empty line
    assert len(corpus.dictionary) == 10  # 9 words + <eos>; valid/test add none
    assert corpus.valid.tolist()[-1] == corpus.dictionary.word_to_index["<eos>"]


def test_altered_file_error_names_file_hashes_and_fix(tmp_path: Path) -> None:
    sums = write_corpus(tmp_path)
    (tmp_path / "valid.txt").write_text(" the dog ran away \n", encoding="utf8")
    with pytest.raises(CorpusError) as error:
        Corpus.from_folder(tmp_path, sums)
    message = str(error.value)
    assert "valid.txt" in message and sums["valid.txt"] in message
    assert data.sha256_of(tmp_path / "valid.txt") in message
    assert "fix" in message


def test_missing_file_error(tmp_path: Path) -> None:
    sums = write_corpus(tmp_path)
    (tmp_path / "test.txt").unlink()
    with pytest.raises(CorpusError, match=r"test\.txt is missing.*fix"):
        Corpus.from_folder(tmp_path, sums)


def find_corpus_dir(data_dir: str | Path | None = None) -> Path | None:
    """The WikiText-2 folder that ``data_dir`` or ``$STABLERNN_DATA`` names, else None."""
    return find_data_dir(data_dir, FOLDER_NAME, "train.txt")


def test_find_corpus_dir_accepts_folder_parent_and_env(tmp_path: Path, monkeypatch) -> None:
    write_corpus(tmp_path / "wikitext-2")
    assert find_corpus_dir(tmp_path) == tmp_path / "wikitext-2"
    assert find_corpus_dir(tmp_path / "wikitext-2") == tmp_path / "wikitext-2"
    monkeypatch.setenv("STABLERNN_DATA", str(tmp_path))
    assert find_corpus_dir() == tmp_path / "wikitext-2"
    monkeypatch.delenv("STABLERNN_DATA")
    assert find_corpus_dir() is None
    with pytest.raises(CorpusError, match="holds no train.txt"):
        find_corpus_dir(tmp_path / "elsewhere")


def test_download_keeps_only_verified_bytes(tmp_path: Path) -> None:
    source = tmp_path / "remote.txt"
    source.write_bytes(b"hello world\n")
    good = hashlib.sha256(b"hello world\n").hexdigest()
    target = tmp_path / "cache" / "train.txt"
    download_verified(source.as_uri(), target, good)  # a file:// URL, no network
    assert target.read_bytes() == b"hello world\n"
    assert not list(target.parent.glob("*.part"))

    other = tmp_path / "cache" / "valid.txt"
    with pytest.raises(CorpusError, match="expected"):
        download_verified(source.as_uri(), other, "0" * 64)
    assert list(other.parent.iterdir()) == [target]  # nothing left behind


def test_interrupted_download_leaves_nothing(tmp_path: Path) -> None:
    class Broken(io.BytesIO):
        def read(self, size: int = -1) -> bytes:
            if self.tell() > 0:
                raise ConnectionResetError("connection lost")
            return super().read(4)

    def urlopen(url: str) -> Broken:
        return Broken(b"partial bytes")

    target = tmp_path / "cache" / "train.txt"
    with pytest.raises(ConnectionResetError):
        download_verified("https://example.invalid/train.txt", target, "0" * 64, urlopen)
    assert list(target.parent.iterdir()) == []


def test_ensure_downloads_into_cache_with_monkeypatched_urlopen(
    tmp_path: Path, monkeypatch
) -> None:
    remote = tmp_path / "remote"
    sums = write_corpus(remote)
    monkeypatch.setattr(data, "WIKITEXT2_SHA256", sums)
    monkeypatch.delenv("STABLERNN_DATA", raising=False)
    requested = []

    def urlopen(url: str):
        requested.append(url)
        return open(remote / url.rsplit("/", 1)[1], "rb")

    folder = ensure_wikitext2(cache_dir=tmp_path / "cache", urlopen=urlopen)
    assert folder == tmp_path / "cache" / "wikitext-2"
    assert sorted(p.name for p in folder.iterdir()) == ["test.txt", "train.txt", "valid.txt"]
    assert requested[0].startswith("https://raw.githubusercontent.com/pytorch/examples/")
    # cached: a second call downloads nothing
    ensure_wikitext2(cache_dir=tmp_path / "cache", urlopen=urlopen)
    assert len(requested) == 3


def test_failed_download_is_reported_with_fix(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("STABLERNN_DATA", raising=False)

    def urlopen(url: str):
        raise OSError("no network")

    with pytest.raises(CorpusError, match="STABLERNN_DATA"):
        ensure_wikitext2(cache_dir=tmp_path, urlopen=urlopen)
    assert not any(tmp_path.rglob("*.txt*"))


def test_restricted_vocabulary_maps_rare_words_to_unk(tmp_path: Path) -> None:
    write_corpus(tmp_path, {**SYNTHETIC, "train.txt": " a a a b b c <unk> \n"})
    corpus = Corpus.from_folder(tmp_path)
    small = corpus.restricted(3)
    assert small.dictionary.index_to_word == ["a", "b", "<unk>"]
    words = [small.dictionary.index_to_word[i] for i in small.train]
    assert words == ["a", "a", "a", "b", "b", "<unk>", "<unk>", "<unk>"]  # c, <unk>, <eos>


def test_batchify_makes_contiguous_streams() -> None:
    tokens = torch.arange(23)
    source = batchify(tokens, 4)
    assert source.shape == (5, 4)
    assert source[:, 1].tolist() == [5, 6, 7, 8, 9]  # column b is a contiguous slice
    inputs, targets = get_batch(source, 3, 35)
    assert inputs.tolist() == source[3:4].tolist() and targets.tolist() == source[4:5].tolist()
    with pytest.raises(ValueError, match="batch size"):
        batchify(torch.arange(3), 4)


@pytest.mark.parametrize("rows, bptt", [(5, 35), (36, 35), (37, 35), (71, 35), (100, 7)])
def test_batch_starts_cover_every_target_once(rows: int, bptt: int) -> None:
    source = torch.arange(rows)[:, None]
    targets = [get_batch(source, start, bptt)[1] for start in batch_starts(rows, bptt)]
    assert torch.cat(targets).flatten().tolist() == list(range(1, rows))


def test_real_corpus_counts_hashes_and_corruption(real_data_dir: Path, tmp_path: Path) -> None:
    corpus = load_wikitext2(real_data_dir)
    assert len(corpus.dictionary) == WIKITEXT2_VOCAB_SIZE == 33_278
    assert corpus.train.numel() == WIKITEXT2_TOKENS["train"] == 2_088_628
    assert corpus.valid.numel() == WIKITEXT2_TOKENS["valid"]
    assert corpus.test.numel() == WIKITEXT2_TOKENS["test"]
    folder = find_corpus_dir(real_data_dir)
    sums_file = (folder / "SHA256SUMS").read_text().split()
    assert dict(zip(sums_file[1::2], sums_file[0::2], strict=True)) == WIKITEXT2_SHA256
    # a corrupted copy (one byte changed) is rejected, naming the file
    copy = tmp_path / "wikitext-2"
    copy.mkdir()
    for name in WIKITEXT2_SHA256:  # the bytes, not the mode: shared corpora may be read-only
        shutil.copyfile(folder / name, copy / name)
    raw = bytearray((copy / "test.txt").read_bytes())
    raw[100] ^= 1
    (copy / "test.txt").write_bytes(bytes(raw))
    with pytest.raises(CorpusError, match=r"test\.txt is truncated or altered"):
        load_wikitext2(tmp_path)
