"""A trained language model read from its run folder alone, and its score of any text.

    lm = load(workdir, checkpoint=None, member=None)          → TrainedLM (config, model, params, vocabulary)
    lm = in_memory(config, params, vocab)                     → the same for a model trained in this process
    score(lm, text, per_token=False)                          → {'ppl', 'tokens', 'oov', 'oov_words', ...}
    score_split(lm, "test")                                   → the same for the run's own corpus split

The folder says what it is: the checkpoint's saved config (the model is `wt_jax.models.build` of it, its float32
matmuls at `config.matmul_precision`), `vocab.txt` (row i of the embeddings is word i) and the parameters of
checkpoint `best` or `last`. A members run (`wt_jax.members`) is read member by member: member k's folder,
`<workdir>/members/<k>/`, is a run folder of its own (its config, vocabulary and, once the run has ended, its
checkpoints); until then member k is the slice k of the run's own checkpoint, whose every leaf has a leading
member axis, with its config from `members.parse` of the run's.

Text is tokenised as the run's corpus reader tokenises its files (`wt_jax.data.text`).

**Scoring** is the run's test protocol (`wt_jax.lm_eval.test_perplexities`' `test_ppl`): the text's N tokens
read as one stream at batch 1 in windows of `config.test_window`, the model's carry (recurrent state, the
Transformer's memory, the n-gram context) kept across windows, every one of the N − 1 targets scored; the first
token is context only. With `per_token`, each target's log-probability (natural log) and rank (1 + the number of
words the model finds strictly likelier) from a second pass over the same windows.

Sampling from it: `wt_jax.sampling`.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from etils import epath

import wt_jax.export as export
import wt_jax.lm_eval as lm_eval
import wt_jax.members as members
import wt_jax.models as models
import wt_jax.precision as precision
from wt_jax.data import batching, lm_corpora, paths, ptb, text_corpus, wikitext2
from wt_jax.data import text as text_lib
from wt_jax.data import vocab as vocab_lib
from wt_jax.errors import InputError
from wt_jax.train.members_run import MEMBERS_DIR

CHECKPOINTS = export.KINDS  # 'last', 'best'
SPLITS = ptb.SPLITS
EOS = ptb.EOS


@dataclasses.dataclass
class TrainedLM:
  """A trained language model read from its run folder (`load`)."""

  folder: epath.Path   # the run folder read: the workdir, or a members run's member folder
  checkpoint: str      # 'best' or 'last'
  step: int            # the checkpoint's training step
  config: Any          # the run's config (ml_collections.ConfigDict), as its checkpoint saved it
  model: Any           # `models.build(config)`
  params: Any          # the checkpoint's parameters (host arrays)
  vocab: vocab_lib.Vocab  # the run's vocab.txt
  meta: dict           # the checkpoint's meta (epoch, best_epoch, history, …)
  results: dict        # the folder's results.json ({} while the run has not ended)
  commit: str | None   # the code the run was trained with (run.json's versions.wt_jax_commit)
  member: int | None   # the member index of a members run, None for a plain run
  tokenizer: text_lib.Tokenizer  # how text becomes the run's tokens and back (`text.tokenizer_of`)

  def describe(self) -> dict:
    """What was used, for output records: folder, checkpoint, step, member, config name, commit."""
    return {"workdir": str(self.folder), "checkpoint": self.checkpoint, "step": self.step, "member": self.member,
            "config": self.config.get("name"), "model": self.config.model, "dataset": self.config.dataset,
            "commit": self.commit}


def heading(run: dict) -> str:
  """`TrainedLM.describe()` as a line: folder, config, model, corpus, checkpoint and step (and member)."""
  member = f", member {run['member']}" if run["member"] is not None else ""
  return (f"{run['workdir']}: {run['config']} ({run['model']}, {run['dataset']}), checkpoint {run['checkpoint']} "
          f"step {run['step']}{member}")


def run_folder(workdir, member: int | None) -> epath.Path:
  """The folder of the run to read: `workdir`, or member `member`'s folder of a members run; an `InputError` for
  a member of a plain run, a members run without `member`, or a member it does not have."""
  workdir = epath.Path(workdir)
  if not workdir.is_dir():
    raise InputError(f"No run folder at {workdir}.")
  members_dir = workdir / MEMBERS_DIR
  have = sorted(int(p.name) for p in members_dir.iterdir() if p.name.isdigit()) if members_dir.is_dir() else []
  if member is None:
    if have:
      raise InputError(f"{workdir} is a members run ({len(have)} members): choose one with --member=k "
                       f"(k in 0..{max(have)}).")
    return workdir
  if not have:
    raise InputError(f"{workdir} is not a members run (no {members_dir}): leave out --member.")
  if member not in have:
    raise InputError(f"{workdir} has no member {member} (members 0..{max(have)}).")
  return members_dir / str(member)


def _commit(folder: epath.Path, results: dict) -> str | None:
  record = folder / "run.json"
  try:
    versions = json.loads(record.read_text()).get("versions", {}) if record.is_file() else {}
  except ValueError:
    versions = {}
  return versions.get("wt_jax_commit") or results.get("versions", {}).get("wt_jax_commit")


def _checkpoint(folder: epath.Path, checkpoint: str | None) -> export.Run:
  if checkpoint is not None:
    return export.load_run(folder, checkpoint)
  try:
    return export.load_run(folder, "best")
  except export.ExportError:  # (no best yet: the run has not ended an epoch)
    return export.load_run(folder, "last")


def _stacked_member(workdir: epath.Path, member: int, checkpoint: str | None) -> export.Run:
  """Member `member` of a members run from the run's own checkpoint, whose leaves are [K, ...] (`wt_jax.members`):
  its slice of the parameters, its config (`members.parse` of the run's: seed + k, its values) and its
  record. For a run that has not ended: its members' folders get checkpoints of their own when it ends."""
  run = _checkpoint(workdir, checkpoint)
  group = members.parse(ml_collections.ConfigDict(run.config)) if run.config else None
  if group is None or member >= group.size:
    raise InputError(f"The {run.kind!r} checkpoint in {workdir} holds no member {member} "
                     f"({group.size if group else 'no'} members).")
  own = (run.meta.get("members") or [{}] * group.size)[member]
  meta = {**run.meta, **own, "config": group.configs[member].to_dict()}
  params = jax.tree_util.tree_map(lambda x: np.asarray(x)[member], run.params)
  return dataclasses.replace(run, params=params, meta=meta, results={})


def load(workdir, checkpoint: str | None = None, member: int | None = None) -> TrainedLM:
  """The trained LM of run folder `workdir` (a members run: its member `member`, from the member's folder, or while
  the run has not ended, from the run's own checkpoint) at `checkpoint` (None: `best`, or `last` while the run has no
  best yet). Refuses with one line (`InputError`) a folder that is no run, has no such
  checkpoint or no vocab.txt, or whose vocabulary does not fit its config."""
  folder = run_folder(workdir, member)
  vocab_file = folder / vocab_lib.FILE
  if not vocab_file.is_file():
    raise InputError(f"{folder} has no vocab.txt (a language-model run writes it at its first start); without it "
                     f"the model's word ids cannot be read.")
  own = member is None or (folder / "checkpoints").is_dir()
  run = _checkpoint(folder, checkpoint) if own else _stacked_member(epath.Path(workdir), member, checkpoint)
  if not run.config.get("model"):
    raise InputError(f"The {checkpoint!r} checkpoint in {folder} stores no language-model config.")
  config = ml_collections.ConfigDict(run.config)
  vocab = vocab_lib.Vocab(vocab_lib.read_file(vocab_file))
  if len(vocab) != config.vocab_size:
    raise InputError(f"{vocab_file} lists {len(vocab)} words but the run's config has vocab_size "
                     f"{config.vocab_size}: not this run's vocabulary.")
  pieces = folder / text_corpus.TOKENIZER_FILE
  tokenizer = text_lib.tokenizer_of(config, pieces.read_bytes() if pieces.is_file() else None)
  return TrainedLM(folder=folder, checkpoint=run.kind, step=run.step, config=config, model=models.build(config),
                   params=run.params, vocab=vocab, meta=run.meta, results=run.results,
                   commit=_commit(folder, run.results), member=member, tokenizer=tokenizer)


def in_memory(config, params, vocab: vocab_lib.Vocab, pieces: bytes | None = None) -> TrainedLM:
  """A model trained in this process (a notebook's `params` of `config`, words in `vocab`'s order; `pieces`: a
  sentencepiece corpus's model, `text_corpus.Corpus.model`), to sample and score as `load` reads one from its
  folder."""
  return TrainedLM(folder=None, checkpoint="in memory", step=0, config=config, model=models.build(config),
                   params=params, vocab=vocab, meta={}, results={}, commit=None, member=None,
                   tokenizer=text_lib.tokenizer_of(config, pieces))


def tested_checkpoint(workdir, member: int | None = None) -> str:
  """The checkpoint a run's own test used: results.json's `test_params` ("best (epoch N)" → best, "final" → last),
  else (a run not ended) its config's test_params."""
  folder = run_folder(workdir, member)
  results_file = folder / "results.json"
  tested = json.loads(results_file.read_text()).get("test_params", "") if results_file.is_file() else ""
  if tested:
    return "best" if tested.startswith("best") else "last"
  own = (folder / "checkpoints").is_dir()  # (a members run's member: not until the run has ended)
  saved = export.load_run(folder if own else epath.Path(workdir), "last").config
  return "best" if saved.get("test_params") == "best" else "last"


# --- scoring --------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=16)
def eval_window(model):
  """`lm_eval.make_eval_window(model)`, one per model: the compiled stream evaluation is reused across calls."""
  return lm_eval.make_eval_window(model)


@functools.partial(jax.jit, static_argnames=("model",))
def token_scores(params, xs_NxT, ys_NxT, *, model):
  """Windows x, y[N, T] of one stream (batch 1), the carry kept across them → (logp[N·T], rank[N·T]) of every
  target: its log-probability and 1 + the number of words with a strictly higher one."""

  def body(carry, xy):
    logits_1xTxV, carry = model.apply({"params": params}, xy[0][None], carry, train=False)
    logp_TxV = jax.nn.log_softmax(logits_1xTxV[0].astype(jnp.float32))
    target_T = jnp.take_along_axis(logp_TxV, xy[1][:, None], axis=-1)[:, 0]
    return carry, (target_T, 1 + jnp.sum(logp_TxV > target_T[:, None], axis=-1))

  _, (logp_NxT, rank_NxT) = jax.lax.scan(body, model.initial_carry(1), (xs_NxT, ys_NxT))
  return logp_NxT.reshape(-1), rank_NxT.reshape(-1)


def score_ids(lm: TrainedLM, ids: np.ndarray, per_token: bool = False) -> dict:
  """The test protocol's perplexity of the stream ids[N] (module docstring): {'ppl', 'nll' (Σ over the targets,
  nats), 'tokens' (N − 1 targets), 'protocol'}; with `per_token`, 'per_token': [{'token', 'logp', 'rank'}] for
  targets 2..N."""
  ids = np.asarray(ids, np.int32)
  if ids.size < 2:
    raise InputError(f"Scoring needs at least 2 tokens (the first is context only); the text has {ids.size}.")
  W = lm.config.test_window
  with jax.default_matmul_precision(precision.MATMUL_PRECISIONS[lm.config.get("matmul_precision", "default")]):
    out = lm_eval.evaluate(lm.model, eval_window(lm.model), lm.params, ids, 1, W, drop_remainder=False)
    result = {"ppl": out["ppl"], "nll": out["nll"], "tokens": out["tokens"],
              "protocol": f"one stream at batch 1 in windows of {W} (test_window), the carry kept across them; "
                          f"all N-1 targets (the first token is context only)"}
    if per_token:
      w = batching.lm_windows(ids, 1, W, drop_remainder=False)
      logp, rank = token_scores(lm.params, w.x[:, 0], w.y[:, 0], model=lm.model)
      n, words = ids.size - 1, lm.vocab.decode(ids[1:])
      result["per_token"] = [{"token": t, "logp": float(lp), "rank": int(r)}
                             for t, lp, r in zip(words, np.asarray(logp)[:n], np.asarray(rank)[:n])]
  return result


RESETS = ("never", "line", "blank_line", "wikitext_article")


def documents(ids: np.ndarray, reset_at: str, eos: int, line_text=None) -> list[np.ndarray]:
  """ids[N] cut where `reset_at` says a document ends — after every `<eos>` (line), after an `<eos>` that ends an
  empty line (blank_line: the `<eos>` right after another), or before each WikiText article (wikitext_article: the
  empty line before a ` = Title = ` line, `wikitext2.article_starts`, on the lines as `line_text(ids)` renders a
  line's tokens) — each with `<eos>` in front: a document starts as a text does after a line's end, so every one of
  its tokens is a target."""
  if reset_at not in RESETS:
    raise InputError(f"Unknown reset_at {reset_at!r}; expected one of {', '.join(RESETS)}.")
  ids = np.asarray(ids, np.int32)
  is_eos = ids == eos
  if reset_at == "wikitext_article":
    line_starts = np.concatenate([[0], np.flatnonzero(is_eos) + 1])  # where each line begins (the last may be empty)
    lines = [line_text(line[:-1] if line.size and line[-1] == eos else line) for line in np.split(ids, line_starts[1:])]
    cuts = line_starts[wikitext2.article_starts(lines)]
  else:
    ends = is_eos if reset_at == "line" else is_eos & np.concatenate([[False], is_eos[:-1]])
    cuts = np.flatnonzero(ends) + 1
  return [np.concatenate([[eos], doc]).astype(np.int32) for doc in np.split(ids, cuts) if doc.size]


def by_document(scorer, lm: TrainedLM, ids: np.ndarray, reset_at: str, per_token: bool = False, **settings) -> dict:
  """`scorer(lm, ids, per_token=…, **settings)` (`score_ids`, `adapt.score_cache`, `adapt.score_dynamic`) of ids[N],
  or with `reset_at` 'line' | 'blank_line' | 'wikitext_article' of each of its `documents` from a fresh start — the recurrent state, the
  cache, the adapted parameters — their NLL and targets added: {'ppl', 'nll', 'tokens', 'documents', …}."""
  if reset_at == "never":
    return scorer(lm, ids, per_token=per_token, **settings)
  if EOS not in lm.vocab:
    raise InputError(f"reset_at={reset_at} cuts the text at {EOS}, which the run's vocabulary does not have.")
  line_text = lambda line_ids: lm.tokenizer.render(lm.vocab.decode(line_ids))
  parts = [scorer(lm, doc, per_token=per_token, **settings)
           for doc in documents(ids, reset_at, lm.vocab.index[EOS], line_text)]
  nll, tokens = sum(p["nll"] for p in parts), sum(p["tokens"] for p in parts)
  out = {**parts[0], "ppl": lm_eval.perplexity(nll, tokens), "nll": nll, "tokens": tokens, "documents": len(parts),
         "protocol": f"{parts[0]['protocol']}; each {reset_at.replace('_', ' ')}-ended document from a fresh start "
                     f"after {EOS} (every token a target)"}
  if per_token:
    out["per_token"] = [t for p in parts for t in p["per_token"]]
  return out


def score(lm: TrainedLM, text: str, per_token: bool = False) -> dict:
  """`score_ids` of `text` tokenised as the run's corpus, with 'oov' (words outside the vocabulary, each scored as
  `<unk>`) and 'oov_words' (the first of them). A text with no word is refused."""
  enc = encode_text(lm, text)
  out = score_ids(lm, enc.ids, per_token)
  return {**out, **per_word(lm, text_lib.lines(text), out["nll"]), "oov": enc.oov, "oov_words": enc.oov_words,
          "run": lm.describe()}


def per_word(lm: TrainedLM, lines, nll: float) -> dict:
  """For a run on subword pieces: the text's words W (whitespace tokens and one `<eos>` a line, as a word-level run
  counts its tokens) and the perplexity per word, exp(Σ NLL / (W − 1)), which compares with a word-level run's
  `ppl` on the same text. {} for a word-level run (its `ppl` is per word)."""
  if lm.tokenizer.model is None:
    return {}
  words = sum(len(line.split()) + 1 for line in lines)
  return {"words": words, "ppl_per_word": lm_eval.perplexity(nll, words - 1)}


def encode_text(lm: TrainedLM, text: str):
  """`text` tokenised as the run's corpus and encoded with its vocabulary (`text.encode`: ids, oov, oov_words); a
  text with no word is refused."""
  tokens = lm.tokenizer.words(text_lib.lines(text))
  if all(t == ptb.EOS for t in tokens):
    raise InputError("The text is empty: it has no word to score.")
  return text_lib.encode(tokens, lm.vocab)


def read_text(path) -> str:
  """A text file's contents; an `InputError` for a missing file or one that is not UTF-8."""
  path = epath.Path(path)
  if not path.is_file():
    raise InputError(f"No text file at {path}.")
  data = path.read_bytes()
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise InputError(f"{path} is not UTF-8 text (byte {e.start}: {data[e.start:e.start + 4]!r}); convert it to "
                     f"UTF-8 first.") from None


def split_stream(lm: TrainedLM, split: str, data_dir: str | None = None) -> np.ndarray:
  """The run's own `split` of its corpus as its run read it (valid and test cut to `eval_max_tokens`, train to
  `train_max_tokens`), from `data_dir`, else the config's data_dir, else $WT_JAX_DATA; the corpus's vocabulary
  must be the run's."""
  if split not in SPLITS:
    raise InputError(f"Unknown split {split!r}; expected one of {', '.join(SPLITS)}.")
  if lm.config.dataset == "text":
    stream = text_split(lm, split, data_dir)
  else:
    stream = named_split(lm, split, data_dir)
  cut = lm.config.train_max_tokens if split == "train" else lm.config.eval_max_tokens
  return stream[:cut] if cut else stream


def text_split(lm: TrainedLM, split: str, data_dir: str | None = None) -> np.ndarray:
  """A `text` run's `split` file (in `data_dir`, else the config's) cut into the run's tokens, in its vocabulary."""
  folder = epath.Path(data_dir or lm.config.data_dir)
  path = text_corpus.split_file(folder, split)
  if path is None:
    raise InputError(f"{folder} has no {split}.txt (plain or .gz): the text folder the run was trained on "
                     "(--data_dir).")
  return text_lib.encode(lm.tokenizer.words(text_corpus.read_lines(path)), lm.vocab).ids


def named_split(lm: TrainedLM, split: str, data_dir: str | None = None) -> np.ndarray:
  """A named corpus's `split` read by its reader (`lm_corpora`), whose vocabulary must be the run's."""
  c = ml_collections.ConfigDict({"dataset": lm.config.dataset, "data_dir": data_dir or lm.config.get("data_dir", ""),
                                 "download": False})
  try:
    corpus = lm_corpora.load_corpus(c)
  except paths.DataUnavailableError as e:
    raise InputError(str(e)) from None
  if list(corpus.vocab.words) != lm.vocab.words:
    raise InputError(f"The {lm.config.dataset} corpus in {paths.data_root(c.data_dir or None)} has another "
                     f"vocabulary than the run's vocab.txt: not the corpus the run was trained on.")
  return getattr(corpus, split)


def not_the_runs_test(lm: TrainedLM) -> str | None:
  """Why `lm`'s checkpoint is not the parameters the run's test used (results.json's test_params: "best (epoch N)"
  is the best checkpoint of epoch N, "final" the last), or None when it is (or the run has not been tested)."""
  tested = lm.results.get("test_params", "")
  if not tested:
    return None
  want = "best" if tested.startswith("best") else "last"
  if lm.checkpoint != want:
    return f"the run's test used its {tested!r} parameters, checkpoint {want!r}; this is {lm.checkpoint!r}"
  epoch = tested.partition("(epoch ")[2].rstrip(")")
  if want == "best" and epoch.isdigit() and lm.meta.get("best_epoch") != int(epoch):
    return (f"the run's test used its best parameters of epoch {epoch}, but the best checkpoint holds epoch "
            f"{lm.meta.get('best_epoch')}'s")
  return None


def score_split(lm: TrainedLM, split: str = "test", data_dir: str | None = None, per_token: bool = False) -> dict:
  """`score_ids` of the run's own `split` (`split_stream`). For 'test' with the checkpoint the run's own test used,
  'ppl' is results.json's test_ppl; with another, 'not_the_runs_test' says why not (`not_the_runs_test`)."""
  out = {**score_ids(lm, split_stream(lm, split, data_dir), per_token), "split": split, "oov": 0, "oov_words": [],
         "run": lm.describe()}
  if lm.tokenizer.model is not None and not (lm.config.eval_max_tokens or lm.config.train_max_tokens):
    out |= per_word(lm, text_corpus.read_lines(text_corpus.split_file(epath.Path(data_dir or lm.config.data_dir),
                                                                      split)), out["nll"])
  why = not_the_runs_test(lm) if split == "test" else None
  return {**out, "not_the_runs_test": why} if why else out
