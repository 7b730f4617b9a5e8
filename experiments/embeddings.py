"""Press & Wolf's embedding tables from trained runs: Table 2 (word2vec), Table 3 (LM) and Table 4.

    python -m experiments.embeddings --w2v_untied=runs/w2v_untied --w2v_tied=runs/w2v_tied \\
        --lm_untied=runs/ptb_table6/small_seed1 --lm_tied=runs/ptb_table6/small_tied_seed1 --lm_corpus=ptb \\
        --tables_dir=results/embeddings/ptb

Each pair of workdirs (an untied and a tied run of the same config family) gives three embeddings: the
untied model's input U and output V and the tied model's S. For each:
  Tables 2 / 3: Spearman ρ of cosine similarity against the five word-similarity sets, with coverage
                (pairs with both words in the model's vocabulary) beside every ρ;
  Table 4:      ρ(In, Out), ρ(In, Tied), ρ(Out, Tied) — the correlation of all pairwise cosine distances
                (`wt_jax.analysis.embeddings.pairwise_distance_rho`, over the whole vocabulary).
Parameters come from each run's `checkpoints/last`, the vocabulary from its `vocab.txt` (an LM run from
before runs wrote one: from its corpus, rebuilt by the same reader, so ids match). Each run must be of its
flags' kind (skip-gram for --w2v_*, a language model trained on --lm_corpus for --lm_*), read from its
checkpoint's config. Writes <out>/tables.json and <out>/tables.md and prints the markdown. Either pair may be
omitted.

Every table prints the paper's value beside ours (PAPER_TABLE2/3/4 below, as Press & Wolf print them), with
the paper's finding in words and whether ours agrees. The paper's word2vec ran on text8; its Table 3 LM
columns are PTB and text8, and its Table 4 has word2vec, the small LM (NNLM(S)) and the large one (NNLM(L)).
A word2vec run's results.json (its corpus size and loss per pair by epoch) goes into the tables when present,
as the evidence beside a Table 2 that disagrees with the paper.

    python -m experiments.embeddings --rerender --tables_dir=results/embeddings/ptb

rebuilds tables.md from a committed tables.json (and w2v_untied/ and w2v_tied/results.json beside it)
without the checkpoints.
"""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import numpy as np
from absl import app, flags

from experiments import check_folder, run_main
import wt_jax.tying as tying
from wt_jax.analysis import embeddings as emb
from wt_jax.data import paths, ptb, wikitext2
from wt_jax.data import vocab as vocab_lib
from wt_jax.errors import InputError
from wt_jax.train.checkpoint import CheckpointUnreadableError, Checkpoints

log = logging.getLogger(__name__)

_W2V_UNTIED = flags.DEFINE_string("w2v_untied", None, "Workdir of an untied word2vec run.")
_W2V_TIED = flags.DEFINE_string("w2v_tied", None, "Workdir of the tied word2vec run.")
_LM_UNTIED = flags.DEFINE_string("lm_untied", None, "Workdir of an untied LM run (e.g. configs/small.py).")
_LM_TIED = flags.DEFINE_string("lm_tied", None, "Workdir of the tied LM run (e.g. configs/small_tied.py).")
_LM_CORPUS = flags.DEFINE_enum("lm_corpus", "ptb", ["ptb", "wikitext2"], "The LM runs' corpus.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Data root (default: $WT_JAX_DATA, else the cache).")
_OUT = flags.DEFINE_string("tables_dir", "results/embeddings", "Folder for tables.json and tables.md.")
_TABLE4_WORDS = flags.DEFINE_integer(
    "table4_words", 0, "Table 4 over a uniform random sample of this many words (seed --table4_seed) when the "
    "vocabulary is larger; 0: all words. All pairs of 33k words (WikiText-2) do not fit 24 GB: 553M distances "
    "and their ranks.")
_TABLE4_SEED = flags.DEFINE_integer("table4_seed", 0, "Seed of the --table4_words sample.")
_RERENDER = flags.DEFINE_bool("rerender", False, "Rebuild tables.md from the tables.json in --tables_dir "
                              "(and its w2v_untied/, w2v_tied/ results.json) instead of from runs.")

LM_CORPORA = {"ptb": ptb.load, "wikitext2": wikitext2.load}
CORPUS_NAMES = {"ptb": "PTB", "wikitext2": "WikiText-2", "text8": "text8"}

# Press & Wolf (2017), "Quality of Obtained Embeddings", Tables 2–4: Spearman ρ as printed (two decimals).
# Table 2: word2vec skip-gram on text8 (vocabulary: words seen at least five times).
PAPER_TABLE2 = {
    "input": {"simlex999": 0.30, "verb143": 0.41, "men": 0.66, "rw": 0.34, "mturk771": 0.59},
    "output": {"simlex999": 0.29, "verb143": 0.34, "men": 0.61, "rw": 0.34, "mturk771": 0.54},
    "tied": {"simlex999": 0.17, "verb143": 0.12, "men": 0.50, "rw": 0.23, "mturk771": 0.37},
}
# Table 3: the small (200-unit, no dropout) LSTM LM, untied (In, Out) and tied, on PTB and on text8.
PAPER_TABLE3 = {
    "ptb": {
        "input": {"simlex999": 0.02, "verb143": 0.12, "men": 0.11, "rw": 0.28, "mturk771": 0.17},
        "output": {"simlex999": 0.13, "verb143": 0.37, "men": 0.21, "rw": 0.38, "mturk771": 0.28},
        "tied": {"simlex999": 0.14, "verb143": 0.32, "men": 0.26, "rw": 0.36, "mturk771": 0.30},
    },
    "text8": {
        "input": {"simlex999": 0.17, "verb143": 0.20, "men": 0.26, "rw": 0.14, "mturk771": 0.26},
        "output": {"simlex999": 0.27, "verb143": 0.35, "men": 0.50, "rw": 0.15, "mturk771": 0.48},
        "tied": {"simlex999": 0.28, "verb143": 0.42, "men": 0.50, "rw": 0.17, "mturk771": 0.45},
    },
}
# Table 4: ρ between the pairwise cosine distances of all words under two embeddings.
PAPER_TABLE4 = {
    "word2vec": {"in_out": 0.77, "in_tied": 0.19, "out_tied": 0.39},
    "NNLM(S)": {"in_out": 0.13, "in_tied": 0.31, "out_tied": 0.65},
    "NNLM(L)": {"in_out": 0.16, "in_tied": 0.45, "out_tied": 0.77},
}
# Our Table 4 rows → the paper's row printed beside them (our PTB LM runs are the paper's small model).
PAPER_TABLE4_ROW = {"word2vec": "word2vec", "LM (ptb)": "NNLM(S)"}

# What the paper reports, in words, to read our numbers against.
FINDINGS = {
    "word2vec": "word2vec: the output embedding is only slightly worse than the input one; the tied "
                "embedding is much worse than both (Table 2).",
    "lm": "LM: the output embedding is better than the input one; the tied embedding is about as good as "
          "the output one (Table 3).",
    "table4": "The tied embedding is more similar to the untied model's output embedding than to its input "
              "embedding: ρ(Out, Tied) > ρ(In, Tied) (Table 4).",
}


def run_embeddings(workdir: str | Path) -> tuple[dict[str, np.ndarray], dict]:
  """({'embedding': [V, D], ('out_embedding': [V, D])}, the run's config) from a run's last checkpoint; the
  config is the checkpoint's meta['config'] ({} where the meta holds none)."""
  ckpts = Checkpoints(Path(workdir) / "checkpoints", read_only=True)
  state, meta = ckpts.restore_saved("last")
  ckpts.close()
  leaves = tying.embedding_leaves(state["params"])
  return ({name.rsplit("/", 1)[-1]: np.asarray(x) for name, x in leaves.items()},
          dict((meta or {}).get("config") or {}))


def check_run(workdir, config: dict, family: str, corpus: str | None = None) -> None:
  """Refuse a run of another kind than its pair's: `family` 'w2v' takes skip-gram runs (model 'skipgram'),
  'lm' language models (any other model; an NMT config names none) trained on `corpus` when one is given (a
  half of WikiText-2's training text, `wikitext2_half1/2`, has WikiText-2's vocabulary and counts as it). A
  run whose checkpoint holds no config is not checked."""
  if not config:
    return
  model, dataset = config.get("model"), config.get("dataset")
  if family == "w2v" and model != "skipgram":
    raise InputError(f"{workdir} is not a word2vec run (its model: {model or 'NMT'}); --w2v_untied and "
                     "--w2v_tied take skip-gram runs.")
  if family == "lm" and model in (None, "skipgram"):
    raise InputError(f"{workdir} is not a language-model run (its model: {model or 'NMT'}); --lm_untied and "
                     "--lm_tied take LM runs.")
  if corpus and dataset and dataset.split("_half")[0] != corpus:
    raise InputError(f"{workdir} was trained on {dataset}, not {corpus}: give --lm_corpus="
                     f"{dataset.split('_half')[0]}.")


def three_embeddings(untied_dir, tied_dir, family: str | None = None, corpus: str | None = None
                     ) -> dict[str, np.ndarray]:
  """{'input': U, 'output': V, 'tied': S} from an untied and a tied run; with `family` ('w2v' or 'lm', the
  pair's flags) the runs must be of that kind, and with `corpus` trained on it (`check_run`)."""
  (untied, untied_config), (tied, tied_config) = run_embeddings(untied_dir), run_embeddings(tied_dir)
  if family:
    check_run(untied_dir, untied_config, family, corpus)
    check_run(tied_dir, tied_config, family, corpus)
  if "out_embedding" not in untied and "out_embedding" in tied:
    pair = f"--{family}_untied and --{family}_tied" if family else "the untied and the tied run"
    raise InputError(f"{untied_dir} is a tied run and {tied_dir} an untied one: {pair} swapped?")
  if "out_embedding" not in untied:
    raise InputError(f"{untied_dir} is not an untied run (it has one embedding matrix).")
  if "out_embedding" in tied:
    raise InputError(f"{tied_dir} is not a tied run (it has two embedding matrices).")
  if untied["embedding"].shape[0] != tied["embedding"].shape[0]:
    raise InputError(f"The runs have different vocabularies: {untied['embedding'].shape[0]} vs "
                     f"{tied['embedding'].shape[0]} words.")
  return {"input": untied["embedding"], "output": untied["out_embedding"], "tied": tied["embedding"]}


def run_vocab(workdir) -> dict[str, int]:
  """word → id from a run's vocab.txt (one word per line in id order, "<TAB>count" after it for word2vec)."""
  words = vocab_lib.read_file(Path(workdir) / vocab_lib.FILE)
  return {w: i for i, w in enumerate(words)}


def similarity_table(mats: dict[str, np.ndarray], vocab: dict[str, int], data_dir) -> dict:
  """{embedding: {set: {'rho', 'covered', 'pairs'}}} over the five word-similarity sets."""
  sets = {name: emb.load_wordsim(name, data_dir) for name in emb.WORDSIM}
  return {role: {name: emb.similarity_rho(E, vocab, pairs) for name, pairs in sets.items()}
          for role, E in mats.items()}


def correlation_row(mats: dict[str, np.ndarray], words: int = 0, seed: int = 0) -> dict:
  """Table 4's three correlations, over all words, or over the pairs of a uniform random sample of `words` of
  them (the same rows of every matrix; recorded as "sampled_words" and "sample_seed") when the vocabulary is
  larger: the pairs among random words estimate the all-pairs ρ without holding all V(V−1)/2 distances."""
  V = len(mats["tied"])
  extra = {}
  if 0 < words < V:
    rows = np.sort(np.random.default_rng(seed).choice(V, words, replace=False))
    mats = {k: m[rows] for k, m in mats.items()}
    extra = {"sampled_words": words, "sample_seed": seed}
  return {"in_out": emb.pairwise_distance_rho(mats["input"], mats["output"]),
          "in_tied": emb.pairwise_distance_rho(mats["input"], mats["tied"]),
          "out_tied": emb.pairwise_distance_rho(mats["output"], mats["tied"]), **extra}


def _paper(x: float | None) -> str:
  return "—" if x is None else f"{x:.2f}"


def _rho(cell) -> float:
  return cell["rho"] if isinstance(cell, dict) else cell


def _above(rho: dict, a: str, b: str) -> int:
  """Word-similarity sets on which embedding a's ρ is above embedding b's (rho: role → set → ρ or cell)."""
  return sum(_rho(rho[a][s]) > _rho(rho[b][s]) for s in emb.WORDSIM)


def _below_both(rho: dict, a: str, b: str, c: str) -> int:
  """Sets on which a's ρ is below both b's and c's."""
  return sum(_rho(rho[a][s]) < min(_rho(rho[b][s]), _rho(rho[c][s])) for s in emb.WORDSIM)


def lm_corpus_of(table3: dict) -> str:
  """The corpus of a Table 3 entry (older tables.json name it only in 'source': '<corpus> LM …')."""
  return table3.get("corpus") or table3["source"].split()[0]


def training_summary(workdir) -> dict | None:
  """{'tokens', 'epochs', 'loss_first', 'loss_last'} (loss per pair, first and last epoch) from a word2vec
  run's results.json, or None when the folder has none."""
  path = Path(workdir) / "results.json"
  if not path.is_file():
    return None
  try:
    r = json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise InputError(f"{path} is not JSON ({e}).") from e
  hist = r.get("history") or []
  if not hist:
    return None
  return {"tokens": r["tokens"], "epochs": len(hist), "loss_first": hist[0]["loss_per_pair"],
          "loss_last": hist[-1]["loss_per_pair"]}


def _similarity_table(t: dict, paper: dict | None, paper_name: str) -> list[str]:
  out = [f"Spearman ρ, paper / ours; ours with (pairs covered / pairs in the set). Paper: {paper_name}.", "",
         "| embedding | " + " | ".join(emb.WORDSIM) + " |", "|---" * (len(emb.WORDSIM) + 1) + "|"]
  for role, row in t["rho"].items():
    cells = [f"{_paper(paper[role][s] if paper else None)} / {r['rho']:.3f} ({r['covered']}/{r['pairs']})"
             for s, r in row.items()]
    out.append(f"| {role} | " + " | ".join(cells) + " |")
  return out


def _table2_reading(t: dict) -> list[str]:
  """Whether our tied word2vec embedding is below both untied ones, as in the paper's Table 2, and the
  evidence beside it when it is not."""
  n = len(emb.WORDSIM)
  ours = _below_both(t["rho"], "tied", "input", "output")
  paper = _below_both(PAPER_TABLE2, "tied", "input", "output")
  line = (f"Ours: the tied embedding is below both the input and the output embedding on {ours} of {n} sets "
          f"(paper: {paper} of {n}).")
  if 2 * ours > n:
    return [line + " Agrees with the paper."]
  line += (" **This contradicts the paper's Table 2**: here the tied word2vec embedding is not worse than "
           "the untied ones on most sets.")
  tr = t.get("training") or {}
  if tr.get("tied") and tr.get("untied"):
    u, s = tr["untied"], tr["tied"]
    line += (f" Measured beside it: this corpus has {s['tokens']:,} training words, where the paper's text8 has "
             f"about 17M (that the corpus size explains the difference is a guess, untested); the tied model's "
             f"loss per pair moves only from {s['loss_first']:.3f} (epoch 1) to {s['loss_last']:.3f} (epoch "
             f"{s['epochs']}), the untied model's from {u['loss_first']:.3f} to {u['loss_last']:.3f}. The tied model "
             f"hardly learns, which is consistent with the paper's argument (our reading, not a test of it), but on "
             f"this corpus that does not show as lower similarity scores; whether it does on text8 is not tested here.")
  return [line]


def _table3_reading(t: dict, paper: dict | None) -> list[str]:
  n = len(emb.WORDSIM)
  line = (f"Ours: output above input on {_above(t['rho'], 'output', 'input')} of {n} sets, tied above input on "
          f"{_above(t['rho'], 'tied', 'input')} of {n}, tied above output on {_above(t['rho'], 'tied', 'output')} of {n}")
  if paper:
    line += (f" (paper: {_above(paper, 'output', 'input')}, {_above(paper, 'tied', 'input')} and "
             f"{_above(paper, 'tied', 'output')} of {n})")
  return [line + "."]


def to_markdown(tables: dict) -> str:
  out = []
  if "table2" in tables:
    t = tables["table2"]
    out += [f"### Table 2: word2vec ({t['source']})", ""]
    out += _similarity_table(t, PAPER_TABLE2, "Press & Wolf Table 2, word2vec skip-gram on text8")
    out += ["", f"Paper's finding: {FINDINGS['word2vec']}", ""] + _table2_reading(t) + [""]
  if "table3" in tables:
    t = tables["table3"]
    corpus = lm_corpus_of(t)
    paper = PAPER_TABLE3.get(corpus)
    name = (f"Press & Wolf Table 3, the small LM on {CORPUS_NAMES.get(corpus, corpus)}" if paper
            else "none; Press & Wolf Table 3 has PTB and text8 columns only")
    out += [f"### Table 3: LM ({t['source']})", ""] + _similarity_table(t, paper, name)
    out += ["", f"Paper's finding: {FINDINGS['lm']}", ""] + _table3_reading(t, paper) + [""]
  if "table4" in tables:
    ran = {PAPER_TABLE4_ROW.get(m) for m in tables["table4"]}
    out += ["### Table 4: ρ of all pairwise cosine distances", "",
            "Paper / ours. Paper: Press & Wolf Table 4 (word2vec on text8; NNLM(S) and NNLM(L): the small and "
            "the large LM).", "",
            "| model | vocabulary (ours) | paper row | ρ(In, Out) | ρ(In, Tied) | ρ(Out, Tied) |",
            "|---|---|---|---|---|---|"]
    for model, r in tables["table4"].items():
      pk = PAPER_TABLE4_ROW.get(model)
      p = PAPER_TABLE4.get(pk, {})
      cells = " | ".join(f"{_paper(p.get(k))} / {r[k]:.3f}" for k in ("in_out", "in_tied", "out_tied"))
      words = (f"{r['vocab']:,} (ρ over {r['sampled_words']:,} random words, seed {r['sample_seed']})"
               if r.get("sampled_words") else f"{r['vocab']:,}")
      out.append(f"| {model} | {words} | {pk or '—'} | {cells} |")
    for pk, p in PAPER_TABLE4.items():
      if pk not in ran:
        cells = " | ".join(f"{_paper(p[k])} / —" for k in ("in_out", "in_tied", "out_tied"))
        out.append(f"| not run here | — | {pk} | {cells} |")
    out += ["", f"Paper's finding: {FINDINGS['table4']}", ""]
    for model, r in tables["table4"].items():
      out.append(f"- {model}, ours: ρ(Out, Tied) {'>' if r['out_tied'] > r['in_tied'] else '≤'} ρ(In, Tied) "
                 f"({r['out_tied']:.3f} against {r['in_tied']:.3f}).")
    out.append("")
  return "\n".join(out)


def build_tables(w2v: tuple | None, lm: tuple | None, lm_corpus: str = "ptb", data_dir=None,
                 table4_words: int = 0, table4_seed: int = 0) -> dict:
  """w2v, lm: (untied_dir, tied_dir) or None. Returns the tables as a dict (see module docstring)."""
  tables: dict = {"table4": {}}
  if w2v:
    mats = three_embeddings(*w2v, family="w2v")
    tables["table2"] = {"source": f"word2vec {w2v[0]} / {w2v[1]}",
                        "rho": similarity_table(mats, run_vocab(w2v[1]), data_dir),
                        "training": {"untied": training_summary(w2v[0]), "tied": training_summary(w2v[1])}}
    tables["table4"]["word2vec"] = {**correlation_row(mats, table4_words, table4_seed),
                                    "vocab": len(mats["tied"])}
  if lm:
    mats = three_embeddings(*lm, family="lm", corpus=lm_corpus)
    own = [Path(d) / vocab_lib.FILE for d in lm]
    if all(p.is_file() for p in own):  # the runs' own vocabularies (written at their first start)
      vocabs = [run_vocab(d) for d in lm]
      if vocabs[0] != vocabs[1]:
        raise InputError(f"The LM runs {lm[0]} and {lm[1]} were trained with different vocabularies.")
      index = vocabs[1]
    else:  # runs from before vocab.txt: the corpus, rebuilt by the same reader
      index = LM_CORPORA[lm_corpus](data_dir, download=False).vocab.index
    if len(index) != len(mats["tied"]):
      raise InputError(f"The LM runs have {len(mats['tied'])} words, the {lm_corpus} vocabulary "
                       f"{len(index)}: not runs on {lm_corpus}?")
    tables["table3"] = {"source": f"{lm_corpus} LM {lm[0]} / {lm[1]}", "corpus": lm_corpus,
                        "rho": similarity_table(mats, index, data_dir)}
    tables["table4"][f"LM ({lm_corpus})"] = {**correlation_row(mats, table4_words, table4_seed),
                                             "vocab": len(mats["tied"])}
  if not tables["table4"]:
    del tables["table4"]
  return tables


def rerender(tables_dir) -> str:
  """tables.md again from tables_dir/tables.json, adding what an older json lacks (the word2vec runs'
  training summary from tables_dir/w2v_{untied,tied}/results.json, the LM's corpus); rewrites both files and
  returns the markdown."""
  out = Path(tables_dir)
  path = out / "tables.json"
  if not path.is_file():
    raise InputError(f"No tables.json in {out}: --rerender rebuilds tables built before; build them from runs "
                     "first (--lm_untied/--lm_tied, --w2v_untied/--w2v_tied).")
  try:
    tables = json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise InputError(f"{path} is not JSON ({e}); nothing was rewritten.") from e
  if not isinstance(tables, dict) or not {"table2", "table3", "table4"} & set(tables):
    raise InputError(f"{path} holds no table (table2, table3 or table4); nothing was rewritten.")
  training = (tables.get("table2") or {}).get("training") or {}
  if "table2" in tables and not (training.get("untied") and training.get("tied")):
    tables["table2"]["training"] = {k: training_summary(out / f"w2v_{k}") for k in ("untied", "tied")}
  if "table3" in tables:
    tables["table3"].setdefault("corpus", lm_corpus_of(tables["table3"]))
  (out / "tables.json").write_text(json.dumps(tables, indent=2))
  md = to_markdown(tables)
  (out / "tables.md").write_text(md + "\n")
  return md


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if _RERENDER.value:
    print(rerender(_OUT.value))
    return
  check_folder(_OUT.value, "--tables_dir")
  pairs = {}
  for name, (u, t) in {"w2v": (_W2V_UNTIED.value, _W2V_TIED.value), "lm": (_LM_UNTIED.value, _LM_TIED.value)}.items():
    if bool(u) != bool(t):
      raise app.UsageError(f"--{name}_untied and --{name}_tied go together.")
    pairs[name] = (u, t) if u else None
  if not any(pairs.values()):
    raise app.UsageError("Give --w2v_untied/--w2v_tied and/or --lm_untied/--lm_tied.")
  try:
    tables = build_tables(pairs["w2v"], pairs["lm"], _LM_CORPUS.value, _DATA_DIR.value, _TABLE4_WORDS.value,
                          _TABLE4_SEED.value)
  except (FileNotFoundError, CheckpointUnreadableError, paths.DataUnavailableError) as e:  # no such run,
    # checkpoint or corpus, or a checkpoint this user may not read: one line
    sys.exit(str(e))
  out = Path(_OUT.value)
  out.mkdir(parents=True, exist_ok=True)
  (out / "tables.json").write_text(json.dumps(tables, indent=2))
  md = to_markdown(tables)
  (out / "tables.md").write_text(md + "\n")
  log.info("Wrote %s and %s", out / "tables.json", out / "tables.md")
  print(md)


if __name__ == "__main__":
  run_main(main)
