"""A cell of the tying surface: the tied − untied gap over the Transformer's width and the vocabulary's size.

    python -m experiments.ptb --config=configs/tying_surface.py:tied,128,4000 --config.data_dir=DIR --workdir=...
    bash experiments/studies/tying_surface.sh [RUNS_DIR] CELL ... [-- EXTRA_FLAGS]   # cells one after the other

Argument ARM,D,VOCAB[,lr=LR][,dropout=P]: ARM untied | tied | tied_wide (tied, its width raised until its parameters
match the untied model's at D: `matched_width`); D the untied and tied models' width (64, 128, 256, 512); VOCAB the
number of sentencepiece BPE pieces learned on the training text (1000, 4000, 16000) or `words` (whitespace words,
every type of the training text: WikiText-2's 33,278). The text is a folder of train/valid/test.txt
(`--config.data_dir`; the driver links WikiText-2's files), so every cell reports bits per byte of the same test
text. `lr=` and `dropout=` set Adam's peak rate and the dropout (the grid on validation; the run's name says them);
without them a cell takes its arm's values chosen on that grid (`CHOSEN`).

Everything else is the Transformer study's (configs/transformer.py, ours): 4 pre-LN blocks, heads of 64 dimensions
(one head at D = 64), feed-forward 4·D, the input embedding × √D (that study's best scale on PTB), dropout 0.3, Adam
at 1e-3 after 500 warm-up steps, ×0.5 per epoch after the third, 6 epochs of 64-token windows after 32 of memory.
"""
import re

from configs import transformer

ARMS = ("untied", "tied", "tied_wide")
# Each arm's Adam peak rate and dropout, chosen on validation by the grid at D = 64, 4,000 pieces, seed 0 (untied:
# experiments/studies/tying_surface_grid.sh, {1e-3, 2e-3} × {0.1, 0.3}; tied: {1e-3, 2e-3} × {0.1}, two runs of
# tying_surface.sh; the lowest best validation perplexity, a tie to the lower rate), its table on
# results/tying_surface/README.md; tied_wide takes tied's. Absent: not chosen yet (the Transformer study's 1e-3, 0.3).
CHOSEN = {"untied": (2e-3, 0.1),  # 42.6 against 42.8 at (1e-3, 0.1), one seed; dropout at the grid's edge
          "tied": (2e-3, 0.1)}    # 45.2 against 46.5 at (1e-3, 0.1), one seed; dropout 0.3 not run for this arm
HEAD_DIM = 64  # ours: head width (the study's D = 256 has 4 heads of 64)
WORDS_CAP = 1_000_000  # `vocab_size` is a cap for a text corpus's words: above any training text's types here


def transformer_params(D: int, V: int, tied: bool, layers: int = 4, memory_plus_window: int = 96) -> int:
  """Parameters of `wt_jax.models.transformer_lm` (output bias on, feed-forward 4·D): per block two layer norms (4D),
  qkv and attention output (4D² + 4D), the feed-forward layers (8D² + 5D); the positions (P·D), the last layer
  norm (2D); the word matrix V·D (twice untied) and the output bias V."""
  block = 12 * D * D + 13 * D
  return layers * block + memory_plus_window * D + 2 * D + V * D * (1 if tied else 2) + V


def matched_width(D: int, V: int, heads: int) -> int:
  """The tied model's width whose parameter count is nearest the untied model's at width D, a multiple of 8·heads
  (so that `heads` heads of a whole number of dimensions divide it)."""
  target, step = transformer_params(D, V, tied=False), 8 * heads
  wide = min(range(D, 4 * D + 1, step), key=lambda w: abs(transformer_params(w, V, tied=True) - target))
  return wide


def get_config(arg: str = "tied,128,4000"):
  parts = arg.split(",")
  settings = dict(p.split("=", 1) for p in parts[3:] if "=" in p)
  cell_ok = len(parts) >= 3 and parts[0] in ARMS and parts[1].isdigit() and (parts[2] == "words" or parts[2].isdigit())
  settings_ok = (len(settings) == len(parts) - 3 and set(settings) <= {"lr", "dropout"}
                 and all(map(_number, settings.values())))
  if not (cell_ok and settings_ok):
    raise ValueError(f"configs/tying_surface.py:{arg}: expected ARM,D,VOCAB[,lr=LR][,dropout=P] with ARM in "
                     f"{list(ARMS)}, D a width (64, 128, 256, 512), VOCAB a number of BPE pieces (1000, 4000, "
                     "16000) or 'words', LR and P numbers.")
  arm, D, vocab = parts[0], int(parts[1]), parts[2]
  c = transformer.get_config("tied,sqrt_d")
  c.name = f"surface_{arm}_d{D}_{vocab}" + "".join(f"_{k}{v}" for k, v in settings.items())
  c.dataset = "text"
  c.tokenizer = "word" if vocab == "words" else "sentencepiece"
  c.subword_model = "bpe"
  c.vocab_size = WORDS_CAP if vocab == "words" else int(vocab)  # (a cap: the run records the vocabulary it got)
  c.words.mode = "untied" if arm == "untied" else "tied"
  heads = max(1, D // HEAD_DIM)
  V = 33_278 if vocab == "words" else int(vocab)  # (WikiText-2's words: the width match's vocabulary)
  c.hidden_size = matched_width(D, V, heads) if arm == "tied_wide" else D
  c.num_heads = heads
  c.mlp_size = 4 * c.hidden_size
  lr, dropout = CHOSEN.get("tied" if arm == "tied_wide" else arm, (c.learning_rate, c.dropout))
  c.learning_rate = float(settings.get("lr", lr))
  c.dropout = float(settings.get("dropout", dropout))
  return c


NAME = re.compile(r"surface_(?P<arm>untied|tied|tied_wide)_d(?P<width>\d+)_(?P<vocab>\d+|words)"
                  r"(?:_lr(?P<lr>[^_]+))?(?:_dropout(?P<dropout>[^_]+))?")


def arg_of(name: str) -> str | None:
  """The argument ARM,D,VOCAB[,lr=LR][,dropout=P] of the config named `name` (`get_config`'s c.name, as a run's
  results.json records it); None for another config's name."""
  m = NAME.fullmatch(name)
  return m and ",".join([m["arm"], m["width"], m["vocab"], *(f"{k}={m[k]}" for k in ("lr", "dropout") if m[k])])


def trains_the_cell(arg: str) -> bool:
  """Whether the grid point ARM,D,VOCAB,lr=…,dropout=… has the cell ARM,D,VOCAB's config but for its name (its
  settings are the arm's `CHOSEN`): its run, not a member's, is then also that cell's run of its seed."""
  point, cell = get_config(arg).to_dict(), get_config(",".join(arg.split(",")[:3])).to_dict()
  return {**point, "name": ""} == {**cell, "name": ""}


def _number(text: str) -> bool:
  try:
    return float(text) >= 0
  except ValueError:
    return False
