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
Parameters come from each run's `checkpoints/last`; word2vec's vocabulary from its `vocab.txt`, an LM's
from its corpus (rebuilt by the same reader, so ids match). Writes <out>/tables.json and <out>/tables.md
and prints the markdown. Either pair may be omitted.

The paper's values are not transcribed here (the paper's text was not available to the session that wrote
this; see BUILD_NOTES.md): the tables print ours, with the paper's *findings* to compare against.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from absl import app, flags, logging

from wt_jax import tying
from wt_jax.analysis import embeddings as emb
from wt_jax.data import ptb, wikitext2
from wt_jax.train.checkpoint import Checkpoints

_W2V_UNTIED = flags.DEFINE_string("w2v_untied", None, "Workdir of an untied word2vec run.")
_W2V_TIED = flags.DEFINE_string("w2v_tied", None, "Workdir of the tied word2vec run.")
_LM_UNTIED = flags.DEFINE_string("lm_untied", None, "Workdir of an untied LM run (e.g. configs/small.py).")
_LM_TIED = flags.DEFINE_string("lm_tied", None, "Workdir of the tied LM run (e.g. configs/small_tied.py).")
_LM_CORPUS = flags.DEFINE_enum("lm_corpus", "ptb", ["ptb", "wikitext2"], "The LM runs' corpus.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Data root (default: $WT_JAX_DATA, else the cache).")
_OUT = flags.DEFINE_string("tables_dir", "results/embeddings", "Folder for tables.json and tables.md.")

LM_CORPORA = {"ptb": ptb.load, "wikitext2": wikitext2.load}

# What the paper reports, in words (Press & Wolf 2017, "Quality of Obtained Embeddings",
# Tables 2–4), to read our numbers against.
FINDINGS = {
    "word2vec": "word2vec: the output embedding is only slightly worse than the input one; the tied "
                "embedding is much worse than both (Table 2).",
    "lm": "LM: the output embedding is better than the input one; the tied embedding is about as good as "
          "the output one (Table 3).",
    "table4": "The tied embedding is more similar to the untied model's output embedding than to its input "
              "embedding: ρ(Out, Tied) > ρ(In, Tied) (Table 4).",
}


def run_embeddings(workdir: str | Path) -> dict[str, np.ndarray]:
  """{'embedding': [V, D], ('out_embedding': [V, D])} from a run's last checkpoint."""
  ckpts = Checkpoints(Path(workdir) / "checkpoints", read_only=True)
  state, _ = ckpts.restore_saved("last")
  ckpts.close()
  leaves = tying.embedding_leaves(state["params"])
  return {name.rsplit("/", 1)[-1]: np.asarray(x) for name, x in leaves.items()}


def three_embeddings(untied_dir, tied_dir) -> dict[str, np.ndarray]:
  """{'input': U, 'output': V, 'tied': S} from an untied and a tied run."""
  untied, tied = run_embeddings(untied_dir), run_embeddings(tied_dir)
  if "out_embedding" not in untied:
    raise ValueError(f"{untied_dir} is not an untied run (it has one embedding matrix).")
  if "out_embedding" in tied:
    raise ValueError(f"{tied_dir} is not a tied run (it has two embedding matrices).")
  if untied["embedding"].shape[0] != tied["embedding"].shape[0]:
    raise ValueError(f"The runs have different vocabularies: {untied['embedding'].shape[0]} vs "
                     f"{tied['embedding'].shape[0]} words.")
  return {"input": untied["embedding"], "output": untied["out_embedding"], "tied": tied["embedding"]}


def w2v_vocab(workdir) -> dict[str, int]:
  words = [line.split("\t")[0] for line in (Path(workdir) / "vocab.txt").read_text().splitlines() if line]
  return {w: i for i, w in enumerate(words)}


def similarity_table(mats: dict[str, np.ndarray], vocab: dict[str, int], data_dir) -> dict:
  """{embedding: {set: {'rho', 'covered', 'pairs'}}} over the five word-similarity sets."""
  sets = {name: emb.load_wordsim(name, data_dir) for name in emb.WORDSIM}
  return {role: {name: emb.similarity_rho(E, vocab, pairs) for name, pairs in sets.items()}
          for role, E in mats.items()}


def correlation_row(mats: dict[str, np.ndarray]) -> dict:
  """Table 4's three correlations."""
  return {"in_out": emb.pairwise_distance_rho(mats["input"], mats["output"]),
          "in_tied": emb.pairwise_distance_rho(mats["input"], mats["tied"]),
          "out_tied": emb.pairwise_distance_rho(mats["output"], mats["tied"])}


def to_markdown(tables: dict) -> str:
  out = []
  for key, title in (("table2", "Table 2: word2vec"), ("table3", "Table 3: LM")):
    if key not in tables:
      continue
    t = tables[key]
    out += [f"### {title} ({t['source']})", "", "Spearman ρ × 100 (pairs covered / pairs in the set).", "",
            "| embedding | " + " | ".join(emb.WORDSIM) + " |", "|---" * (len(emb.WORDSIM) + 1) + "|"]
    for role, row in t["rho"].items():
      cells = [f"{100 * r['rho']:.1f} ({r['covered']}/{r['pairs']})" for r in row.values()]
      out.append(f"| {role} | " + " | ".join(cells) + " |")
    out += ["", f"Paper's finding: {FINDINGS['word2vec' if key == 'table2' else 'lm']}", ""]
  if "table4" in tables:
    out += ["### Table 4: ρ of all pairwise cosine distances", "",
            "| model | vocabulary | ρ(In, Out) | ρ(In, Tied) | ρ(Out, Tied) |", "|---|---|---|---|---|"]
    for model, r in tables["table4"].items():
      out.append(f"| {model} | {r['vocab']:,} | {r['in_out']:.3f} | {r['in_tied']:.3f} | {r['out_tied']:.3f} |")
    out += ["", f"Paper's finding: {FINDINGS['table4']}", ""]
  return "\n".join(out)


def build_tables(w2v: tuple | None, lm: tuple | None, lm_corpus: str = "ptb", data_dir=None) -> dict:
  """w2v, lm: (untied_dir, tied_dir) or None. Returns the tables as a dict (see module docstring)."""
  tables: dict = {"table4": {}}
  if w2v:
    mats = three_embeddings(*w2v)
    tables["table2"] = {"source": f"word2vec {w2v[0]} / {w2v[1]}",
                        "rho": similarity_table(mats, w2v_vocab(w2v[1]), data_dir)}
    tables["table4"]["word2vec"] = {**correlation_row(mats), "vocab": len(mats["tied"])}
  if lm:
    mats = three_embeddings(*lm)
    corpus = LM_CORPORA[lm_corpus](data_dir, download=False)
    if corpus.vocab_size != len(mats["tied"]):
      raise ValueError(f"The LM runs have {len(mats['tied'])} words, the {lm_corpus} vocabulary "
                       f"{corpus.vocab_size}: not runs on {lm_corpus}?")
    tables["table3"] = {"source": f"{lm_corpus} LM {lm[0]} / {lm[1]}",
                        "rho": similarity_table(mats, corpus.vocab.index, data_dir)}
    tables["table4"][f"LM ({lm_corpus})"] = {**correlation_row(mats), "vocab": len(mats["tied"])}
  if not tables["table4"]:
    del tables["table4"]
  return tables


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  pairs = {}
  for name, (u, t) in {"w2v": (_W2V_UNTIED.value, _W2V_TIED.value), "lm": (_LM_UNTIED.value, _LM_TIED.value)}.items():
    if bool(u) != bool(t):
      raise app.UsageError(f"--{name}_untied and --{name}_tied go together.")
    pairs[name] = (u, t) if u else None
  if not any(pairs.values()):
    raise app.UsageError("Give --w2v_untied/--w2v_tied and/or --lm_untied/--lm_tied.")
  tables = build_tables(pairs["w2v"], pairs["lm"], _LM_CORPUS.value, _DATA_DIR.value)
  out = Path(_OUT.value)
  out.mkdir(parents=True, exist_ok=True)
  (out / "tables.json").write_text(json.dumps(tables, indent=2))
  md = to_markdown(tables)
  (out / "tables.md").write_text(md + "\n")
  logging.info("Wrote %s and %s", out / "tables.json", out / "tables.md")
  print(md)


if __name__ == "__main__":
  app.run(main)
