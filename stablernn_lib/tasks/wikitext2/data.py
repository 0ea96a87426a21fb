"""WikiText-2 for word-level language modeling: files, vocabulary, batches.

PyTorch's ``word_language_model`` corpus: a line of ``n`` words gives ``n + 1`` tokens
(then ``<eos>``).  The files come from ``data_dir`` or ``$STABLERNN_DATA``, else a download
cache (``data/cache`` or ``~/.cache/stablernn_lib``), each checked against its sha256.  The
stream is cut into ``B`` columns of an ``(N, B)`` tensor, read in windows of ``bptt`` rows.
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

SPLITS: tuple[str, ...] = ("train", "valid", "test")
EOS = "<eos>"
DATA_ENV_VAR = "STABLERNN_DATA"
FOLDER_NAME = "wikitext-2"
DOWNLOAD_URL = (
    "https://raw.githubusercontent.com/pytorch/examples/main/"
    "word_language_model/data/wikitext-2/{name}"
)
WIKITEXT2_SHA256: dict[str, str] = {
    "train.txt": "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
    "valid.txt": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
    "test.txt": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
}
# Sizes of the real corpus (tests check them): types including <eos>, tokens per split.
WIKITEXT2_VOCAB_SIZE = 33_278
WIKITEXT2_TOKENS: dict[str, int] = {"train": 2_088_628, "valid": 217_646, "test": 245_569}

_REPO_ROOT = Path(__file__).resolve().parents[3]


class CorpusError(ValueError):
    """A corpus file is missing or its bytes are not the expected ones."""


def default_cache_dir() -> Path:
    """``data/cache`` in a checkout of the course, else ``~/.cache/stablernn_lib``."""
    if (_REPO_ROOT / "pyproject.toml").exists():
        return _REPO_ROOT / "data" / "cache"
    return Path.home() / ".cache" / "stablernn_lib"


def sha256_of(path: str | Path) -> str:
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_file(path: str | Path, expected_sha256: str) -> Path:
    """Check that ``path`` exists and has the expected sha256, else raise CorpusError."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(
            f"data file {path} is missing (expected sha256 {expected_sha256}); fix: point "
            f"{DATA_ENV_VAR} or data_dir=... at a folder holding {path.name}, or leave both "
            "unset to download it"
        )
    actual = sha256_of(path)
    if actual != expected_sha256:
        raise CorpusError(
            f"data file {path} is truncated or altered: expected sha256 {expected_sha256}, "
            f"got {actual}; fix: delete it and let the loader download it again, or point "
            f"{DATA_ENV_VAR} (or data_dir=...) at an intact copy of {path.name}"
        )
    return path


def find_data_dir(data_dir: str | Path | None, folder_name: str, marker: str) -> Path | None:
    """The folder holding the file ``marker`` named by ``data_dir`` or ``$STABLERNN_DATA``:
    that folder or its subfolder ``folder_name``; None when neither is set."""
    source = "data_dir"
    if data_dir is None:
        data_dir = os.environ.get(DATA_ENV_VAR) or None
        source = f"${DATA_ENV_VAR}"
    if data_dir is None:
        return None
    root = Path(data_dir).expanduser()
    for candidate in (root, root / folder_name):
        if (candidate / marker).is_file():
            return candidate
    raise CorpusError(
        f"{source} = {str(root)!r} holds no {marker}, neither directly nor in "
        f"{folder_name}/; fix: point it at the {folder_name} folder (or its parent), "
        "or unset it to download the data"
    )


def download_verified(
    url: str,
    destination: str | Path,
    expected_sha256: str,
    urlopen: Callable = urllib.request.urlopen,
) -> Path:
    """Download ``url`` to ``destination`` through ``<name>.part``, renamed into place only
    once its sha256 matches and deleted on any failure."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".part")
    digest = hashlib.sha256()
    try:
        with urlopen(url) as response, open(partial, "wb") as handle:
            for block in iter(lambda: response.read(1 << 20), b""):
                digest.update(block)
                handle.write(block)
        actual = digest.hexdigest()
        if actual != expected_sha256:
            raise CorpusError(
                f"download of {url} gave {destination.name} with sha256 {actual}, expected "
                f"{expected_sha256}; nothing was kept. Fix: retry later, or download the "
                f"files yourself and set {DATA_ENV_VAR} to their folder"
            )
        os.replace(partial, destination)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return destination


def ensure_files(
    data_dir: str | Path | None,
    folder_name: str,
    sha256: Mapping[str, str],
    url_template: str,
    cache_dir: str | Path | None,
    urlopen: Callable,
) -> Path:
    """The folder of the verified files ``sha256`` (name -> sum): the one that ``data_dir``
    or ``$STABLERNN_DATA`` names, else ``folder_name`` in the cache, where a missing file is
    downloaded from ``url_template.format(name=name)``."""
    folder = find_data_dir(data_dir, folder_name, next(iter(sha256)))
    if folder is None:
        folder = Path(cache_dir if cache_dir is not None else default_cache_dir()) / folder_name
        for name, expected in sha256.items():
            url = url_template.format(name=name)
            if not (folder / name).is_file():
                try:
                    download_verified(url, folder / name, expected, urlopen)
                except OSError as error:
                    raise CorpusError(
                        f"could not download {name} from {url} ({error}); fix: connect to the "
                        f"internet, or set {DATA_ENV_VAR} to a folder holding {', '.join(sha256)}"
                    ) from error
    for name, expected in sha256.items():
        verify_file(folder / name, expected)
    return folder


def ensure_wikitext2(
    data_dir: str | Path | None = None,
    *,
    cache_dir: str | Path | None = None,
    url_template: str = DOWNLOAD_URL,
    urlopen: Callable = urllib.request.urlopen,
) -> Path:
    """The folder of verified WikiText-2 files (downloading into the cache if needed)."""
    return ensure_files(data_dir, FOLDER_NAME, WIKITEXT2_SHA256, url_template, cache_dir, urlopen)


class Dictionary:
    """Word <-> index, in order of first appearance."""

    def __init__(self) -> None:
        self.word_to_index: dict[str, int] = {}
        self.index_to_word: list[str] = []

    def add(self, word: str) -> int:
        if word not in self.word_to_index:
            self.word_to_index[word] = len(self.index_to_word)
            self.index_to_word.append(word)
        return self.word_to_index[word]

    def __len__(self) -> int:
        return len(self.index_to_word)


@dataclass
class Corpus:
    """The three splits as 1-D token tensors over one shared dictionary."""

    dictionary: Dictionary
    train: Tensor
    valid: Tensor
    test: Tensor
    source: str

    @classmethod
    def from_folder(
        cls, folder: str | Path, expected_sha256: Mapping[str, str] | None = None
    ) -> Corpus:
        """Read ``train/valid/test.txt`` from ``folder`` (verified when sums are given)."""
        folder = Path(folder)
        dictionary = Dictionary()
        splits = {}
        for split in SPLITS:
            path = folder / f"{split}.txt"
            if expected_sha256 is not None:
                verify_file(path, expected_sha256[path.name])
            elif not path.is_file():
                raise CorpusError(
                    f"corpus file {path} is missing; fix: put train.txt, valid.txt and "
                    f"test.txt in {folder}"
                )
            splits[split] = tokenize(path, dictionary)
        return cls(dictionary, splits["train"], splits["valid"], splits["test"], str(folder))

    @property
    def vocab_size(self) -> int:
        return len(self.dictionary)

    def restricted(self, vocab_size: int, train_tokens: int | None = None) -> Corpus:
        """A copy keeping the ``vocab_size - 1`` most frequent words of the first
        ``train_tokens`` training tokens; every other word becomes ``<unk>`` (ids by frequency)."""
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2 (a word and <unk>), got {vocab_size}")
        counts = torch.bincount(self.train[:train_tokens], minlength=self.vocab_size)
        unk = self.dictionary.word_to_index.get("<unk>")
        if unk is not None:
            counts[unk] = -1  # <unk> gets its own slot at the end
        kept = torch.argsort(counts, descending=True, stable=True)[: vocab_size - 1]
        dictionary = Dictionary()
        for index in kept.tolist():
            dictionary.add(self.dictionary.index_to_word[index])
        new_unk = dictionary.add("<unk>")
        mapping = torch.full((self.vocab_size,), new_unk, dtype=torch.long)
        mapping[kept] = torch.arange(kept.numel())
        return Corpus(
            dictionary,
            mapping[self.train],
            mapping[self.valid],
            mapping[self.test],
            f"{self.source} (vocabulary cut to {len(dictionary)} types)",
        )


def tokenize(path: str | Path, dictionary: Dictionary) -> Tensor:
    """Token ids of a text file: each line's words then ``<eos>``; extends ``dictionary``."""
    ids: list[int] = []
    with open(path, encoding="utf8") as handle:
        for line in handle:
            ids.extend(dictionary.add(word) for word in line.split())
            ids.append(dictionary.add(EOS))
    return torch.tensor(ids, dtype=torch.long)


def load_wikitext2(data_dir: str | Path | None = None, **ensure_kwargs) -> Corpus:
    """The verified WikiText-2 corpus (see the module docstring for where it comes from)."""
    folder = ensure_wikitext2(data_dir, **ensure_kwargs)
    return Corpus.from_folder(folder, WIKITEXT2_SHA256)


def batchify(tokens: Tensor, batch_size: int) -> Tensor:
    """A token stream ``(N,)`` as ``B`` contiguous streams ``(N // B, B)``: column ``b`` is
    ``tokens[b * n : (b + 1) * n]``, ``n = N // B`` (the last ``N mod B`` dropped)."""
    if tokens.dim() != 1:
        raise ValueError(f"tokens must be 1-D, got shape {tuple(tokens.shape)}; flatten it first")
    if batch_size < 1 or tokens.numel() < batch_size:
        raise ValueError(
            f"cannot cut {tokens.numel()} tokens into {batch_size} streams; "
            "use a batch size between 1 and the number of tokens"
        )
    rows = tokens.numel() // batch_size
    return tokens[: rows * batch_size].view(batch_size, rows).t().contiguous()


def get_batch(source: Tensor, start: int, bptt: int) -> tuple[Tensor, Tensor]:
    """Inputs ``source[start : start + L]`` and targets one row later, both ``(L, B)``,
    ``L = min(bptt, len(source) - 1 - start)``."""
    length = min(bptt, source.shape[0] - 1 - start)
    if length < 1:
        raise ValueError(f"start {start} leaves no target in a source of {source.shape[0]} rows")
    return source[start : start + length], source[start + 1 : start + 1 + length]


def batch_starts(rows: int, bptt: int) -> range:
    """The first row of each BPTT window of a ``rows``-row source: one a training step, every
    ``bptt`` rows (the last shorter; the last row is only ever a target)."""
    return range(0, rows - 1, bptt)
