"""text8 (Mahoney): the first 10⁸ bytes of an English Wikipedia dump, cleaned to lowercase a–z and single
spaces — one line, ~17M words. word2vec's standard small corpus (Press & Wolf Table 2).

    words = read_words(path)                     # the whole file as a word list
    sents = sentences(data_dir)                  # word2vec's sentences: consecutive 1,000-word pieces

The file is `<data root>/text8/text8` (see `wt_jax.data.paths`); when missing it is downloaded from the
canonical `text8.zip` and extracted. No network: a `DataUnavailableError` names the variable to set.
"""
from __future__ import annotations

from pathlib import Path

from wt_jax.data import paths
from wt_jax.errors import InputError

URL = "http://mattmahoney.net/dc/text8.zip"
SENTENCE_LENGTH = 1000  # word2vec.c's MAX_SENTENCE_LENGTH: it cuts a line-less corpus into 1,000-word pieces


def ensure(data_dir: str | None = None, download: bool = True, url: str = URL) -> Path:
  """The path of the text8 file (`<root>/text8/text8`), downloading and extracting it first if allowed."""
  folder = paths.data_root(data_dir) / "text8"
  path = folder / "text8"
  if path.is_file():
    return path
  if not download:
    raise paths.DataUnavailableError(
        f"text8 not found at {path}. Set the environment variable {paths.ENV_VAR} (or --config.data_dir) "
        f"to a folder holding text8/text8, or allow the download from {URL}.")
  paths.extract_zip(paths.download_file(url, folder / "text8.zip"), url, {"text8": path})
  return path


def read_words(path: str | Path) -> list[str]:
  """All whitespace-separated words of the file (text8 is one line)."""
  words = "".join(paths.read_lines(path)).split()
  if not words:
    raise InputError(f"{path} contains no words.")
  return words


def sentences(data_dir: str | None = None, download: bool = True, url: str = URL,
              length: int = SENTENCE_LENGTH) -> list[list[str]]:
  """text8 as word2vec reads it: consecutive pieces of `length` words (the last one shorter)."""
  words = read_words(ensure(data_dir, download, url))
  return [words[i:i + length] for i in range(0, len(words), length)]
