"""Any text read as a run's corpus reader reads its files, and its ids in the run's vocabulary: what a trained model
is given to score or to continue (`wt_jax.trained_lm`), and how its tokens read back as text.

    Tokenizer(dataset, lowercase, numbers_as_n, model)   → .words(lines), .line_words(line), .render(tokens)
    tokenizer_of(config, model)                          → the Tokenizer of a run's config (+ its subword model)
    lines(text)                → a string's lines, as a file opened in text mode reads them
    encode(words, vocab)       → Encoded: ids[N], how many words were outside the vocabulary, the first of them

Per corpus, by its reader in this package:
  ptb, wikitext2, wikitext2_half1/2   whitespace tokens and one `<eos>` after every line, empty lines too
      (`ptb.read_tokens`). Mikolov's PTB text is lower case with every number written N, so for `ptb` each
      token is also lower-cased and a number (digits with inner '.' or ',') becomes N; WikiText-2's vocabulary
      keeps case and numbers, so its tokens stay as written.
  text                                a folder of your own text (`wt_jax.data.text_corpus`): as ptb's reader reads
      it, lower-cased with `lowercase` and numbers written N with `numbers_as_n`; with a sentencepiece `model`, each
      line's pieces (the line normalised the same way), then `<eos>`
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
# a whole token of digits with inner '.' or ',' (PTB writes it N)
_NUMBER_TOKEN = re.compile(r"(?<!\S)[0-9]+(?:[.,][0-9]+)*(?!\S)")
_WHITESPACE_CORPORA = ("ptb", "wikitext2", "wikitext2_half1", "wikitext2_half2", "text")
DATASETS = (*_WHITESPACE_CORPORA, "bbc", "imdb")
PIECE_SPACE = "\u2581"  # sentencepiece's mark of a space before a piece


def _numbers_as_n(line: str) -> str:
  return _NUMBER_TOKEN.sub("N", line)


def _ptb_token(token: str) -> str:
  return "N" if token == "N" or _NUMBER_TOKEN.fullmatch(token) else token.lower()


@dataclasses.dataclass(frozen=True)
class Tokenizer:
  """How a run's corpus turns a line into tokens (module docstring); `model`: a sentencepiece model (serialised)."""

  dataset: str
  lowercase: bool = False
  numbers_as_n: bool = False
  model: bytes | None = None

  def __post_init__(self):
    if self.dataset not in DATASETS:
      raise InputError(f"No tokenisation known for the dataset {self.dataset!r}; known: {', '.join(DATASETS)}.")
    if self.model is not None:
      import sentencepiece  # (a dependency; as wt_jax.data.subwords, imported where it is used)
      object.__setattr__(self, "pieces", sentencepiece.SentencePieceProcessor(model_proto=self.model))

  def normalise(self, line: str) -> str:
    """`line` lower-cased (`lowercase`) and its numbers written N (`numbers_as_n`), as a `text` corpus's switches say."""
    line = line.lower() if self.lowercase else line
    return _numbers_as_n(line) if self.numbers_as_n else line

  def line_words(self, line: str) -> list[str]:
    """One line's tokens (no `<eos>`)."""
    if self.dataset == "text":
      line = self.normalise(line)
      return self.pieces.encode(line, out_type=str) if self.model is not None else line.split()
    if self.dataset == "ptb":
      return [_ptb_token(t) for t in line.split()]
    if self.dataset in _WHITESPACE_CORPORA:
      return line.split()
    if self.dataset == "bbc":
      return bbc.tokenize_line(line)
    return bbc.tokenize_line(imdb._BR.sub(" ", line))  # (imdb)

  def words(self, lines: Iterable[str]) -> list[str]:
    """The tokens of `lines` (a text's lines, with or without their newlines) as the corpus's reader makes them, one
    `<eos>` after each line (bbc, imdb: after each line with a word)."""
    out: list[str] = []
    for line in lines:
      line_words = self.line_words(line)
      if line_words or self.dataset not in ("bbc", "imdb"):
        out.extend(line_words)
        out.append(ptb.EOS)
    return out

  def render(self, tokens: Sequence[str]) -> str:
    """Tokens as text: each `<eos>` a line end; words joined by spaces, or a line's pieces joined (▁ a space)."""
    lines, line = [], []
    for w in [*tokens, ptb.EOS]:
      if w != ptb.EOS:
        line.append(w)
        continue
      lines.append("".join(line).replace(PIECE_SPACE, " ").strip() if self.model is not None else " ".join(line))
      line = []
    return "\n".join(lines)


def tokenizer_of(config, model: bytes | None = None) -> Tokenizer:
  """The tokeniser of a run's `config` (its dataset, and for `text` its switches), with its subword `model`."""
  if config.dataset != "text":
    return Tokenizer(config.dataset)
  if config.get("tokenizer", "word") == "sentencepiece" and model is None:
    raise InputError("This run tokenises with sentencepiece, but no subword model was given (its folder's "
                     "tokenizer.model).")
  return Tokenizer("text", config.get("lowercase", False), config.get("numbers_as_n", False), model)


def lines(text: str) -> list[str]:
  """The lines of `text` as a file opened in text mode gives them (universal newlines, each with its end)."""
  return io.StringIO(text, newline=None).readlines()


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
