"""Penn Treebank, Mikolov et al. (2011) split, read as the Zaremba / TensorFlow reference reads it.

Each line is split on whitespace and ends with one `<eos>`; the vocabulary is built from the training
split (10,000 types: 9,999 words including `<unk>`, plus `<eos>`). Files are `ptb.{train,valid,test}.txt`,
optionally gzipped, in `<data root>/ptb/` (see `wt_jax.data.paths`). Counts on the standard files:
929,589 / 73,760 / 82,430 tokens.

If the files are missing they are downloaded from Mikolov's canonical archive (`simple-examples.tgz`,
members `simple-examples/data/ptb.*.txt`).
"""
from __future__ import annotations

import dataclasses
import os
import tarfile
from pathlib import Path

import numpy as np

from wt_jax.data import paths
from wt_jax.data.vocab import Vocab
from wt_jax.errors import InputError

URL = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"
SPLITS = ("train", "valid", "test")
EOS = "<eos>"


@dataclasses.dataclass
class Corpus:
  """Token-id streams of a word-level LM corpus. train/valid/test: int32[N]."""

  train: np.ndarray
  valid: np.ndarray
  test: np.ndarray
  vocab: Vocab

  @property
  def vocab_size(self) -> int:
    return len(self.vocab.words)


def read_tokens(path: str | os.PathLike) -> list[str]:
  """Whitespace tokens of a text file (.txt or .txt.gz), one `<eos>` after every line."""
  tokens: list[str] = []
  for line in paths.read_lines(path):
    tokens.extend(line.split())
    tokens.append(EOS)
  return tokens


def split_file(folder: Path, split: str) -> Path | None:
  return paths.find_file(folder, [f"ptb.{split}.txt.gz", f"ptb.{split}.txt"])


def fetch(folder: Path, url: str = URL) -> None:
  """Download the canonical archive and extract the three PTB text files into `folder`."""
  folder.mkdir(parents=True, exist_ok=True)
  archive = paths.download_file(url, folder / "simple-examples.tgz")
  with tarfile.open(archive) as tar:
    for member in tar.getmembers():
      name = os.path.basename(member.name)
      if name in {f"ptb.{s}.txt" for s in SPLITS} and member.isfile():
        with tar.extractfile(member) as src, open(folder / name, "wb") as dst:
          dst.write(src.read())
  archive.unlink()
  missing = [s for s in SPLITS if split_file(folder, s) is None]
  if missing:
    raise paths.DataUnavailableError(f"{url} did not contain ptb.{{{','.join(missing)}}}.txt")


def ensure(data_dir: str | None = None, download: bool = True, url: str = URL) -> Path:
  """The folder holding the three PTB files (`<root>/ptb`), downloading them first if allowed."""
  folder = paths.data_root(data_dir) / "ptb"
  if any(split_file(folder, s) is None for s in SPLITS):
    if not download:
      raise paths.DataUnavailableError(
          f"PTB not found in {folder} (expected ptb.{{train,valid,test}}.txt[.gz]). Set the environment "
          f"variable {paths.ENV_VAR} (or --config.data_dir) to the folder that holds ptb/.")
    fetch(folder, url)
  return folder


def sentences(split: str = "train", data_dir: str | None = None, download: bool = True) -> list[list[str]]:
  """The lines of a split as word lists (no `<eos>`): word2vec's sentences."""
  path = split_file(ensure(data_dir, download), split)
  out = [s for s in (line.split() for line in paths.read_lines(path)) if s]
  if not out:
    raise InputError(f"PTB {split} split at {path} contains no words.")
  return out


def load(data_dir: str | None = None, download: bool = True, url: str = URL) -> Corpus:
  """Read PTB from `<root>/ptb` (root resolved by `paths.data_root(data_dir)`), downloading if allowed."""
  folder = ensure(data_dir, download, url)
  streams = {}
  for s in SPLITS:
    streams[s] = read_tokens(split_file(folder, s))
    if len(streams[s]) == 0 or all(t == EOS for t in streams[s]):
      raise InputError(f"PTB {s} split at {split_file(folder, s)} contains no words.")
  vocab = Vocab.from_tokens(streams["train"])
  unk = "<unk>" if "<unk>" in vocab.index else None
  encoded = []
  for s in SPLITS:
    try:
      encoded.append(vocab.encode(streams[s], unk=unk))
    except KeyError as e:  # (PTB's valid and test words are all in its training text, <unk> included)
      raise InputError(f"PTB {s} split at {split_file(folder, s)}: {e.args[0]} The vocabulary is the training "
                       f"split's, which has no <unk> to map it to; is the training file whole?") from None
  return Corpus(*encoded, vocab=vocab)
