"""Joint BPE subwords for translation (Sennrich et al. 2016, as Press & Wolf 2017 use them in their
Neural Machine Translation experiments).

One sentencepiece BPE model is learned on the union of the source and the target training text. Each side
then gets its own vocabulary: the special symbols plus the pieces that occur in that side's segmented
training text (`none` / `decoder` tying), or both sides share the joint vocabulary (their union, required by
`three_way` tying, where one matrix embeds source and target). Press & Wolf's Table 1 counts how many pieces
occur only in the source, only in the target, and in both (`overlap`).

Ids: 0 = <pad>, 1 = <unk>, 2 = <s> (decoder start), 3 = </s> (end); the same on both sides.
Vocabulary ids are assigned in sentencepiece's order (roughly by merge order), restricted to the side.
"""
from __future__ import annotations

import dataclasses
import io
import json

from etils import epath
from typing import Sequence

import numpy as np

from wt_jax.errors import InputError

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")


def _spm():
  import sentencepiece
  return sentencepiece


def train_bpe(texts: Sequence[str], vocab_size: int, character_coverage: float = 1.0) -> bytes:
  """A sentencepiece BPE model (serialised) learned on `texts`; at most `vocab_size` pieces, specials
  included (fewer when the text has fewer distinct merges, as in tests)."""
  texts = [t for t in texts if t.strip()]
  if not texts:
    raise InputError("No text to learn subwords from.")
  model = io.BytesIO()
  _spm().SentencePieceTrainer.train(
      sentence_iterator=iter(texts), model_writer=model, model_type="bpe", vocab_size=vocab_size,
      character_coverage=character_coverage, pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
      pad_piece=SPECIALS[0], unk_piece=SPECIALS[1], bos_piece=SPECIALS[2], eos_piece=SPECIALS[3],
      hard_vocab_limit=False, num_threads=1, minloglevel=2)
  return model.getvalue()


@dataclasses.dataclass
class SideVocab:
  """The pieces one side uses: `to_global[i]` is the sentencepiece id of side id i; `to_side` the inverse
  (pieces the side never saw map to <unk>)."""

  to_global: np.ndarray  # [V_side] int
  to_side: np.ndarray    # [V_spm] int

  @classmethod
  def from_global_ids(cls, ids: Sequence[int], spm_size: int) -> "SideVocab":
    used = sorted(set(int(i) for i in ids) - set(range(len(SPECIALS))))
    to_global = np.asarray(list(range(len(SPECIALS))) + used, np.int32)
    to_side = np.full(spm_size, UNK, np.int32)
    to_side[to_global] = np.arange(len(to_global), dtype=np.int32)
    return cls(to_global, to_side)

  def __len__(self) -> int:
    return len(self.to_global)


class Subwords:
  """A joint BPE model with a source and a target vocabulary (the same object when `joint`)."""

  def __init__(self, model: bytes, source: SideVocab, target: SideVocab, joint: bool):
    self.model = model
    self.sp = _spm().SentencePieceProcessor(model_proto=model)
    self.source, self.target, self.joint = source, target, joint

  @classmethod
  def learn(cls, src_texts: Sequence[str], tgt_texts: Sequence[str], vocab_size: int,
            joint: bool) -> "Subwords":
    """Learn BPE on src_texts + tgt_texts; side vocabularies from the segmented training text."""
    model = train_bpe(list(src_texts) + list(tgt_texts), vocab_size)
    sp = _spm().SentencePieceProcessor(model_proto=model)
    n = sp.get_piece_size()
    src_ids = [i for ids in sp.encode(list(src_texts)) for i in ids]
    tgt_ids = [i for ids in sp.encode(list(tgt_texts)) for i in ids]
    source = SideVocab.from_global_ids(src_ids, n)
    target = SideVocab.from_global_ids(tgt_ids, n)
    if joint:
      source = target = SideVocab.from_global_ids(src_ids + tgt_ids, n)
    return cls(model, source, target, joint)

  def side(self, name: str) -> SideVocab:
    if name not in ("source", "target"):
      raise ValueError(f"side must be 'source' or 'target', not {name!r}")
    return self.source if name == "source" else self.target

  def encode(self, texts: Sequence[str], side: str) -> list[np.ndarray]:
    """Sentences → side ids (no <s>/</s>), one int32 array each."""
    v = self.side(side)
    return [v.to_side[np.asarray(ids, np.int64)] if ids else np.zeros((0,), np.int32)
            for ids in self.sp.encode(list(texts))]

  def decode(self, ids: Sequence[int], side: str = "target") -> str:
    """Side ids → detokenised text; stops at </s>, skips <pad>, <s> (and <unk>, which has no surface)."""
    v = self.side(side)
    out = []
    for i in np.asarray(ids, np.int64).tolist():
      if i == EOS:
        break
      if i not in (PAD, BOS, UNK):
        out.append(int(v.to_global[i]))
    return self.sp.decode(out)

  def pieces(self, side: str) -> list[str]:
    return [self.sp.id_to_piece(int(i)) for i in self.side(side).to_global]

  # --- persistence: <dir>/subwords.model (sentencepiece) and <dir>/subwords.json (the side vocabularies).
  def save(self, folder) -> None:
    folder = epath.Path(folder)  # a local folder or a bucket
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "subwords.model").write_bytes(self.model)
    (folder / "subwords.json").write_text(json.dumps(
        {"joint": self.joint, "source": self.source.to_global.tolist(), "target": self.target.to_global.tolist()}))

  @classmethod
  def load(cls, folder) -> "Subwords":
    folder = epath.Path(folder)
    model = (folder / "subwords.model").read_bytes()
    meta = json.loads((folder / "subwords.json").read_text())
    n = _spm().SentencePieceProcessor(model_proto=model).get_piece_size()
    source = SideVocab.from_global_ids(meta["source"], n)
    target = source if meta["joint"] else SideVocab.from_global_ids(meta["target"], n)
    return cls(model, source, target, meta["joint"])

  @classmethod
  def of_run(cls, folder, src_texts: Sequence[str], tgt_texts: Sequence[str], vocab_size: int, joint: bool,
             write: bool = True) -> "Subwords":
    """The subword model a run folder holds, or one learned from the texts and saved there (`write`: this process
    writes the run's files), so that a resumed run and a later decode use the same one. A folder holding a model of
    the other kind (joint or separate vocabularies) is an `InputError`."""
    folder = epath.Path(folder)
    if not ((folder / "subwords.model").is_file() and (folder / "subwords.json").is_file()):
      subwords = cls.learn(src_texts, tgt_texts, vocab_size, joint)
      if write:
        subwords.save(folder)
      return subwords
    subwords = cls.load(folder)
    if subwords.joint != joint:
      kinds = lambda j: "joint" if j else "separate"
      raise InputError(f"{folder} holds a {kinds(subwords.joint)}-vocabulary subword model but this config wants "
                       f"{kinds(joint)} vocabularies; use a new --workdir.")
    return subwords


def overlap(sp_model: bytes, src_texts: Sequence[str], tgt_texts: Sequence[str]) -> dict:
  """Press & Wolf Table 1: of the BPE pieces occurring in the segmented training text, how many occur only
  in the source, only in the target, in both (specials excluded); with the fraction in both."""
  sp = _spm().SentencePieceProcessor(model_proto=sp_model)
  src = {i for ids in sp.encode(list(src_texts)) for i in ids}
  tgt = {i for ids in sp.encode(list(tgt_texts)) for i in ids}
  src -= set(range(len(SPECIALS)))
  tgt -= set(range(len(SPECIALS)))
  both = len(src & tgt)
  total = len(src | tgt)
  return {"source_only": len(src - tgt), "target_only": len(tgt - src), "both": both, "total": total,
          "both_fraction": both / max(total, 1)}
