"""Your own text as a language-model corpus: `--config.dataset=text --config.data_dir=DIR`.

DIR holds `train.txt`, `valid.txt` and `test.txt` (each may be gzipped: `train.txt.gz`), UTF-8. Every line is read
as PTB's reader reads it: its tokens, then one `<eos>` (empty lines too). The tokens (`config.tokenizer`):

  word           whitespace tokens, lower-cased with `config.lowercase`, numbers (digits with inner '.' or ',')
                 written `N` with `config.numbers_as_n` (`wt_jax.data.text.Tokenizer`). The vocabulary comes from
                 the training text alone: words by decreasing count, ties by first occurrence (the same text gives
                 the same ids on every machine), those seen at least `config.min_count` times, at most
                 `config.vocab_size` of them with `<eos>` and `<unk>` always among them; every other word is `<unk>`.
  sentencepiece  a sentencepiece model (`config.subword_model`: bpe | unigram) of `config.vocab_size` pieces learned
                 on the training text (`<unk>` id 0, `<eos>` id 1); each line its pieces, then `<eos>`.

The text is read once, as a stream, and its ids are cached as flat int32 files (`<cache>/text/<key>/<split>.ids`, the
cache `$WT_JAX_CACHE`, else `~/.cache/wt_jax`), keyed by the files' bytes and the tokeniser's settings; a later
start (a resume) maps them (`numpy.memmap`) without reading the text again. Peak memory while preparing: the
vocabulary and a chunk of ids, never the text's strings at once (the training text is encoded in first-seen ids, then
renumbered on disk; sentencepiece keeps the sentences it learns from). `Corpus.info` says, per split, its tokens,
words (whitespace tokens plus one `<eos>` a line: what a per-word perplexity divides by), UTF-8 bytes and
out-of-vocabulary rate.
"""
from __future__ import annotations

import array
import dataclasses
import gzip
import hashlib
import io
import json
import math
import os
import shutil
import zlib
from pathlib import Path

import numpy as np

from wt_jax.data import ptb
from wt_jax.data import text as text_lib
from wt_jax.data.vocab import Vocab
from wt_jax.errors import InputError

SPLITS = ptb.SPLITS
TOKENIZERS = ("word", "sentencepiece")
SUBWORD_MODELS = ("bpe", "unigram")
CACHE_ENV = "WT_JAX_CACHE"
FORMAT = 1  # the cache's layout; a new one makes new keys
CHUNK = 1 << 20  # ids written per flush
TOKENIZER_FILE = "tokenizer.model"  # a run folder's (and the cache's) sentencepiece model
SPM_SENTENCES = 2_000_000  # sentencepiece learns from at most this many training lines (sampled evenly)


@dataclasses.dataclass
class Corpus(ptb.Corpus):
  """A text folder's id streams (`ptb.Corpus`: train/valid/test int32[N], read-only maps) with what a run reports
  and keeps: `info` (per split: tokens, words, bytes, oov, oov_rate; the tokeniser), `model` (sentencepiece's model,
  serialised, or None)."""

  info: dict = dataclasses.field(default_factory=dict)
  model: bytes | None = None


def split_file(folder: Path, split: str) -> Path | None:
  for name in (f"{split}.txt.gz", f"{split}.txt"):
    if (folder / name).is_file():
      return folder / name
  return None


def settings(config) -> dict:
  """The tokeniser's settings that the ids depend on (the cache key; run.json holds them in the config)."""
  out = {"tokenizer": config.tokenizer, "lowercase": bool(config.lowercase),
         "numbers_as_n": bool(config.numbers_as_n), "vocab_size": int(config.vocab_size)}
  if config.tokenizer == "word":
    return {**out, "min_count": int(config.min_count)}
  return {**out, "subword_model": config.subword_model}


def check(config) -> dict[str, Path]:
  """The three files of `config.data_dir`, after checking the tokeniser's settings: one line each for an unknown
  tokeniser or subword model, a vocabulary below 2, no folder, a missing split or an empty one."""
  if config.tokenizer not in TOKENIZERS:
    raise InputError(f"Unknown tokenizer {config.tokenizer!r}; known: {', '.join(TOKENIZERS)}.")
  if config.subword_model not in SUBWORD_MODELS:
    raise InputError(f"Unknown subword_model {config.subword_model!r}; known: {', '.join(SUBWORD_MODELS)}.")
  if isinstance(config.vocab_size, bool) or not isinstance(config.vocab_size, int) or config.vocab_size < 2:
    raise InputError(f"vocab_size must be an integer ≥ 2 (a vocabulary of one word predicts nothing); not "
                     f"{config.vocab_size!r}.")
  if config.min_count < 0:
    raise InputError(f"min_count must be ≥ 0, not {config.min_count!r}.")
  if not config.data_dir:
    raise InputError("dataset=text reads a folder of train.txt, valid.txt and test.txt: give it with "
                     "--config.data_dir=DIR.")
  folder = Path(config.data_dir).expanduser()
  if not folder.is_dir():
    raise InputError(f"No folder at {folder} (--config.data_dir): dataset=text reads train.txt, valid.txt and "
                     "test.txt from it.")
  found = {s: split_file(folder, s) for s in SPLITS}
  missing = [s for s, p in found.items() if p is None]
  if missing:
    raise InputError(f"{folder} has no {', '.join(f'{s}.txt' for s in missing)} (plain or .gz): dataset=text needs "
                     "train.txt, valid.txt and test.txt.")
  for s, p in found.items():
    if p.stat().st_size == 0:
      raise InputError(f"{p} is empty: the {s} split needs text.")
  return found


def read_lines(path: Path):
  """The lines of a UTF-8 text file (gzipped if it ends in .gz), one at a time; a file that is not UTF-8 (or a
  damaged gzip) is an `InputError` naming it and the line."""
  opener = gzip.open if path.suffix == ".gz" else open
  number = 0
  try:
    with opener(path, "rt", encoding="utf-8") as f:
      for number, line in enumerate(f, 1):
        yield line
  except UnicodeDecodeError as e:
    raise InputError(f"{path} is not UTF-8 text (near line {number + 1}: {e.reason}); convert it to UTF-8 "
                     "first.") from None
  except (EOFError, gzip.BadGzipFile, zlib.error) as e:
    raise InputError(f"{path} cannot be read as gzip ({e}): is it damaged or incomplete?") from None


def cache_root() -> Path:
  return Path(os.environ.get(CACHE_ENV) or "~/.cache/wt_jax").expanduser() / "text"


def cache_key(files: dict[str, Path], config) -> str:
  """sha256 of the cache's format, the tokeniser's settings and each split's bytes (as stored)."""
  h = hashlib.sha256(json.dumps({"format": FORMAT, **settings(config)}, sort_keys=True).encode())
  for s in SPLITS:
    h.update(f"\n{s}\n".encode())
    with open(files[s], "rb") as f:
      for block in iter(lambda: f.read(1 << 22), b""):
        h.update(block)
  return h.hexdigest()[:32]


class _Ids(dict):
  """word → id in order of first sight (a new word gets the next id)."""

  def __missing__(self, word):
    self[word] = i = len(self)
    return i


class _Known(dict):
  """word → id in a fixed vocabulary; an unknown word is counted and gets `unk`."""

  def __init__(self, index: dict, unk: int):
    super().__init__(index)
    self.unk, self.oov = unk, 0

  def __missing__(self, word):
    self.oov += 1
    return self.unk


def _encode_words(path: Path, tok: text_lib.Tokenizer, index: dict, out: Path) -> dict:
  """Stream `path`'s tokens through `index` (a `_Ids` or `_Known`) into the int32 file `out`: its counts."""
  buf, tokens, lines, size, get = array.array("i"), 0, 0, 0, index.__getitem__
  with open(out, "wb") as f:
    for line in read_lines(path):
      words = tok.line_words(line)
      words.append(ptb.EOS)
      buf.extend(map(get, words))
      lines, size = lines + 1, size + len(line.encode("utf-8"))
      if len(buf) >= CHUNK:
        tokens += len(buf)
        buf.tofile(f)
        del buf[:]
    tokens += len(buf)
    buf.tofile(f)
  return {"tokens": tokens, "words": tokens, "lines": lines, "bytes": size}


def _chunks(path: Path):
  """The int32 ids of `path` in chunks, read (not mapped: the pages of a map would stay resident)."""
  with open(path, "rb") as f:
    while (chunk := np.fromfile(f, np.int32, 8 * CHUNK)).size:
      yield chunk


def word_vocab(counts: np.ndarray, words: list[str], config) -> list[str]:
  """The kept words (module docstring) from `counts[i]` of `words[i]` (listed in order of first sight), in id order:
  by decreasing count, ties by first sight; `<eos>` and `<unk>` always (one never seen goes last)."""
  order = np.argsort(-counts, kind="stable").tolist()
  specials = (ptb.EOS, text_lib.UNK)
  plain = [i for i in order if counts[i] >= config.min_count and words[i] not in specials]
  plain = plain[:config.vocab_size - len(specials)]
  if len(plain) < 2:
    raise InputError(f"The vocabulary of {config.data_dir}'s training text would hold {len(plain)} word(s) besides "
                     f"<eos> and <unk> (vocab_size={config.vocab_size}, min_count={config.min_count}); a language "
                     "model needs at least 2.")
  chosen = set(plain) | {i for i, w in enumerate(words) if w in specials}
  return [words[i] for i in order if i in chosen] + [w for w in specials if w not in words]


def _prepare_words(files: dict[str, Path], config, tmp: Path) -> tuple[list[str], dict]:
  tok = text_lib.Tokenizer("text", config.lowercase, config.numbers_as_n)
  seen = _Ids()
  info = {"train": _encode_words(files["train"], tok, seen, tmp / "train.first")}
  if info["train"]["tokens"] == info["train"]["lines"]:
    raise InputError(f"{files['train']} has no word: the training text needs some.")
  first = list(seen)
  counts = np.zeros(len(first), np.int64)
  for chunk in _chunks(tmp / "train.first"):
    counts += np.bincount(chunk, minlength=len(first))
  words = word_vocab(counts, first, config)
  index = {w: i for i, w in enumerate(words)}
  lut = np.asarray([index.get(w, index[text_lib.UNK]) for w in first], np.int32)
  with open(tmp / "train.ids", "wb") as f:
    for chunk in _chunks(tmp / "train.first"):
      lut[chunk].tofile(f)
  (tmp / "train.first").unlink()
  info["train"]["oov"] = int(sum(c for w, c in zip(first, counts.tolist()) if w not in index))
  for s in ("valid", "test"):
    known = _Known(index, index[text_lib.UNK])
    info[s] = _encode_words(files[s], tok, known, tmp / f"{s}.ids")
    info[s]["oov"] = known.oov
  return words, info


def _spm():
  import sentencepiece  # (a dependency; imported where it is used, as wt_jax.data.subwords does)
  return sentencepiece


def learn_pieces(path: Path, config) -> bytes:
  """A sentencepiece model of `config.vocab_size` pieces (`<unk>` 0, `<eos>` 1, no bos/pad) learned on the lines of
  `path` as the word tokeniser's switches normalise them (fewer pieces when the text has fewer)."""
  tok = text_lib.Tokenizer("text", config.lowercase, config.numbers_as_n)
  sentences = (s for s in (tok.normalise(line).strip() for line in read_lines(path)) if s)
  model = io.BytesIO()
  try:
    _spm().SentencePieceTrainer.train(
        sentence_iterator=sentences, model_writer=model, model_type=config.subword_model,
        vocab_size=config.vocab_size, hard_vocab_limit=False, character_coverage=1.0, unk_id=0, eos_id=1, bos_id=-1,
        pad_id=-1, unk_piece=text_lib.UNK, eos_piece=ptb.EOS, input_sentence_size=SPM_SENTENCES,
        shuffle_input_sentence=True, seed_sentencepiece_size=1_000_000, num_threads=os.cpu_count() or 1,
        minloglevel=2)
  except RuntimeError as e:  # (sentencepiece's refusals: a vocabulary too large for the text, …)
    raise InputError(f"sentencepiece could not learn {config.vocab_size} pieces from {path}: "
                     f"{str(e).strip().splitlines()[-1]}") from None
  return model.getvalue()


def _encode_pieces(path: Path, tok: text_lib.Tokenizer, out: Path) -> dict:
  """Stream `path`'s lines as sentencepiece ids, `<eos>` after each, into the int32 file `out`: its counts (`oov`:
  pieces that are `<unk>`, characters the model does not cover)."""
  eos, lines = tok.pieces.piece_to_id(ptb.EOS), read_lines(path)
  n = {"tokens": 0, "words": 0, "lines": 0, "bytes": 0, "oov": 0}
  with open(out, "wb") as f:
    while batch := [line for _, line in zip(range(10_000), lines)]:
      ids = np.fromiter((i for piece_ids in tok.pieces.encode([tok.normalise(x) for x in batch])
                         for i in (*piece_ids, eos)), np.int32)
      ids.tofile(f)
      n["tokens"], n["oov"] = n["tokens"] + len(ids), n["oov"] + int(np.sum(ids == 0))
      n["lines"] += len(batch)
      n["words"] += sum(len(x.split()) + 1 for x in batch)
      n["bytes"] += sum(len(x.encode("utf-8")) for x in batch)
  return n


def _prepare_pieces(files: dict[str, Path], config, tmp: Path) -> tuple[list[str], dict, bytes]:
  model = learn_pieces(files["train"], config)
  (tmp / TOKENIZER_FILE).write_bytes(model)
  tok = text_lib.Tokenizer("text", config.lowercase, config.numbers_as_n, model)
  info = {s: _encode_pieces(files[s], tok, tmp / f"{s}.ids") for s in SPLITS}
  if info["train"]["words"] == info["train"]["lines"]:
    raise InputError(f"{files['train']} has no word: the training text needs some.")
  return [tok.pieces.id_to_piece(i) for i in range(tok.pieces.get_piece_size())], info, model


def prepare(files: dict[str, Path], config, folder: Path) -> None:
  """Tokenise the three files into `folder` (written whole or not at all: built beside it, then renamed)."""
  tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  try:
    if config.tokenizer == "word":
      words, info = _prepare_words(files, config, tmp)
    else:
      words, info, _ = _prepare_pieces(files, config, tmp)
    (tmp / "vocab.txt").write_text("".join(f"{w}\n" for w in words), encoding="utf-8")
    for s in SPLITS:
      info[s]["oov_rate"] = info[s]["oov"] / max(info[s]["tokens"], 1)
    (tmp / "meta.json").write_text(json.dumps({"settings": settings(config), "splits": info}, indent=1))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def load(config) -> Corpus:
  """The text folder `config.data_dir` as id streams (module docstring), prepared once and then read from the
  cache. `config.vocab_size` is the vocabulary's cap; `Corpus.vocab` the vocabulary itself."""
  files = check(config)
  folder = cache_root() / cache_key(files, config)
  if not (folder / "meta.json").is_file():
    prepare(files, config, folder)
  meta = json.loads((folder / "meta.json").read_text())
  words = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
  streams = [np.memmap(folder / f"{s}.ids", np.int32, "r") if meta["splits"][s]["tokens"] else np.zeros(0, np.int32)
             for s in SPLITS]
  model = (folder / TOKENIZER_FILE).read_bytes() if config.tokenizer == "sentencepiece" else None
  info = {"tokenizer": settings(config), **{s: meta["splits"][s] for s in SPLITS}}
  return Corpus(*streams, vocab=Vocab(words), info=info, model=model)


def measures(info: dict | None, test_ppl: float, eval_max_tokens: int) -> dict:
  """A text folder's corpus (`wt_jax.data.text_corpus`): its splits' counts and out-of-vocabulary rates, and the test
  text's NLL in units that compare across tokenisers: per word, exp(Σ NLL / (W − 1)) over its W words (whitespace
  tokens and one `<eos>` a line; the batch-1 protocol scores N − 1 of its N tokens), and bits per UTF-8 byte,
  Σ NLL / ln 2 / bytes. {} for the other corpora; no per-word numbers for a test cut to `eval_max_tokens`."""
  if not info:
    return {}
  out = {"corpus": info}
  test = info["test"]
  if not eval_max_tokens and test["words"] > 1 and math.isfinite(test_ppl):
    nll = math.log(test_ppl) * (test["tokens"] - 1)
    out |= {"test_ppl_per_word": math.exp(nll / (test["words"] - 1)),
            "test_bits_per_byte": nll / math.log(2) / test["bytes"]}
  return out
