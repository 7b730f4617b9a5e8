"""Any text read as a word-level LM corpus's reader reads its files (`config.dataset`), and its ids in a run's
vocabulary: what a trained model is given to score or to continue (`wt_jax.trained_lm`).

    words(lines, dataset)      → the tokens, each line followed by `<eos>` as the corpus's reader puts it
    lines(text)                → a string's lines, as a file opened in text mode reads them
    encode(words, vocab)       → Encoded: ids[N], how many words were outside the vocabulary, the first of them

Per corpus, by its reader in this package:
  ptb, wikitext2, wikitext2_half1/2   whitespace tokens and one `<eos>` after every line, empty lines too
      (`ptb.read_tokens`). Mikolov's PTB text is lower case with every number written N, so for `ptb` each
      token is also lower-cased and a number (digits with inner '.' or ',') becomes N; WikiText-2's vocabulary
      keeps case and numbers, so its tokens stay as written.
  bbc                                 `bbc.tokenize_line` (lower case, letter words, numbers → N, punctuation
      dropped), `<eos>` after each line that has a word
  imdb                                one review per line: `<br />` removed, then as bbc

A word outside the vocabulary becomes `<unk>` where the vocabulary has it (every real corpus's does); without
one the text is refused, naming the words.
"""
from __future__ import annotations

import dataclasses
import io
import re
from typing import Iterable, Sequence

import numpy as np

from wt_jax.data import bbc, imdb, ptb
from wt_jax.data.vocab import Vocab
from wt_jax.errors import InputError

UNK = "<unk>"
SHOWN_OOV = 10  # unknown words named, the first ones in the text
_NUMBER = re.compile(r"[0-9]+(?:[.,][0-9]+)*")
_WHITESPACE_CORPORA = ("ptb", "wikitext2", "wikitext2_half1", "wikitext2_half2")


def _ptb_token(token: str) -> str:
  return "N" if token == "N" or _NUMBER.fullmatch(token) else token.lower()


def _line_words(line: str, dataset: str) -> list[str]:
  """One line's tokens (no `<eos>`)."""
  if dataset == "ptb":
    return [_ptb_token(t) for t in line.split()]
  if dataset in _WHITESPACE_CORPORA:
    return line.split()
  if dataset == "bbc":
    return bbc.tokenize_line(line)
  return bbc.tokenize_line(imdb._BR.sub(" ", line))  # (imdb)


def lines(text: str) -> list[str]:
  """The lines of `text` as a file opened in text mode gives them (universal newlines, each with its end)."""
  return io.StringIO(text, newline=None).readlines()


def words(lines: Iterable[str], dataset: str) -> list[str]:
  """The tokens of `lines` (a text's lines, with or without their newlines) as `dataset`'s reader makes them,
  one `<eos>` after each line (bbc, imdb: after each line with a word)."""
  if dataset not in (*_WHITESPACE_CORPORA, "bbc", "imdb"):
    raise InputError(f"No tokenisation known for the dataset {dataset!r}; known: "
                     f"{', '.join((*_WHITESPACE_CORPORA, 'bbc', 'imdb'))}.")
  out: list[str] = []
  for line in lines:
    line_words = _line_words(line, dataset)
    if line_words or dataset in _WHITESPACE_CORPORA:
      out.extend(line_words)
      out.append(ptb.EOS)
  return out


@dataclasses.dataclass
class Encoded:
  """ids: int32[N]; oov: how many of the N tokens were outside the vocabulary (each now `<unk>`); oov_words: the
  first SHOWN_OOV distinct ones, in the order the text has them."""

  ids: np.ndarray
  oov: int
  oov_words: list[str]


def encode(tokens: Sequence[str], vocab: Vocab) -> Encoded:
  """`tokens` → ids in `vocab`, each unknown word counted and mapped to `<unk>` (refused without one)."""
  unknown = [t for t in tokens if t not in vocab]
  shown = list(dict.fromkeys(unknown))[:SHOWN_OOV]
  if unknown and UNK not in vocab:
    raise InputError(f"{len(unknown)} word(s) are not in the run's vocabulary, which has no {UNK} to map them to: "
                     f"{', '.join(repr(w) for w in shown)}.")
  ids = vocab.encode(tokens, unk=UNK if unknown else None)
  return Encoded(ids=ids, oov=len(unknown), oov_words=shown)
