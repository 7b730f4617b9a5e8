"""WikiText-2 (Merity et al. 2017), version 1, tokenised (`wiki.{train,valid,test}.tokens`).

Read like the common LM loaders: every line, empty ones included, is split on whitespace and followed by one
`<eos>`; rare words are already `<unk>`. Counts on the official files: 2,088,628 / 217,646 / 245,569 tokens,
vocabulary 33,278 (from the training split, `<eos>` and `<unk>` included).

Files live in `<data root>/wikitext2/`, plain or gzipped; when missing they are downloaded from the
canonical `wikitext-2-v1.zip` (members `wikitext-2/wiki.*.tokens`).
"""
from __future__ import annotations

import gzip
from pathlib import Path

from wt_jax.data import paths, ptb
from wt_jax.data.vocab import Vocab

URL = "https://wikitext.smerity.com/wikitext-2-v1.zip"
SPLITS = ptb.SPLITS


def split_file(folder: Path, split: str) -> Path | None:
  return paths.find_file(folder, [f"wiki.{split}.tokens.gz", f"wiki.{split}.tokens"])


def ensure(data_dir: str | None = None, download: bool = True, url: str = URL) -> Path:
  """The folder holding the three split files, downloading them first if allowed."""
  folder = paths.data_root(data_dir) / "wikitext2"
  if all(split_file(folder, s) for s in SPLITS):
    return folder
  if not download:
    raise paths.DataUnavailableError(
        f"WikiText-2 not found in {folder} (expected wiki.{{train,valid,test}}.tokens[.gz]). Set the "
        f"environment variable {paths.ENV_VAR} (or --config.data_dir) to the folder that holds wikitext2/.")
  paths.extract_zip(paths.download_file(url, folder / "wikitext-2-v1.zip"), url,
                    {f"wiki.{s}.tokens": folder / f"wiki.{s}.tokens" for s in SPLITS})
  return folder


def load(data_dir: str | None = None, download: bool = True, url: str = URL) -> ptb.Corpus:
  """The three splits as id streams, vocabulary from the training split (ids by decreasing frequency)."""
  folder = ensure(data_dir, download, url)
  streams = {s: ptb.read_tokens(split_file(folder, s)) for s in SPLITS}
  for s, toks in streams.items():
    if all(t == ptb.EOS for t in toks):
      raise ValueError(f"WikiText-2 {s} split at {split_file(folder, s)} contains no words.")
  vocab = Vocab.from_tokens(streams["train"])
  return ptb.Corpus(*(vocab.encode(streams[s], unk="<unk>" if "<unk>" in vocab else None) for s in SPLITS),
                    vocab=vocab)


def sentences(split: str = "train", data_dir: str | None = None, download: bool = True) -> list[list[str]]:
  """word2vec's sentences: the non-empty lines of a split (paragraphs and ` = Heading = ` lines)."""
  path = split_file(ensure(data_dir, download), split)
  opener = gzip.open if path.suffix == ".gz" else open
  with opener(path, "rt", encoding="utf-8") as f:
    out = [words for words in (line.split() for line in f) if words]
  if not out:
    raise ValueError(f"WikiText-2 {split} split at {path} contains no words.")
  return out
