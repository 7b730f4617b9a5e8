"""Inan et al. (2017) Section 6.2 / Figure 1: train small untied LMs with a loss mixing cross-entropy and the
augmented loss, (1 − β)·CE + α·KL(ỹ‖ŷ), over a grid of AL proportions β and temperatures τ, and measure
after training how far the output projection W [V, D] lies from the input embedding L's column space
(`embeddings.subspace_distance`). Inan et al. argue that the AL drives W into L's span, which is what
motivates reusing L as W.

The KL's weight α is β·τ²·|V| in the paper's equation (18) (`kl_scale="tau2v"`: at high τ the KL's logit
gradient is (W·h − Lᵀ·u)/(τ²|V|), eq. (15), so this scaling makes it a logit-matching term of unit size);
`"tau"` (β·τ, the α = γτ of Table 1's runs) and `"tau2"` (β·τ², distillation's scaling) are weaker
weightings, for comparison.

Each point is one ordinary run of the language-model trainer (`wt_jax.train.lm.fit`) in <workdir>/<point>/
(<point>_seed<k>/ for a seed k other than 0, so a point's seeds share one sweep and its table reads mean ± sd)
— resumable, skipped when its results.json exists. The distance is reported over all V rows and over the rows of the
words that occur in the training span (the others never receive a gradient through the softmax targets
and keep much of their random initialisation), with the mean entropy of the AL's target ỹ over those words
(uniform: ln V).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path
from typing import Sequence

import numpy as np

import wt_jax.files as files
import wt_jax.losses as losses
import wt_jax.models as models
import wt_jax.tying as tying
from wt_jax.analysis import embeddings
from wt_jax.data import batching, ptb
from wt_jax.errors import InputError
from wt_jax.train import lm, trainer
from wt_jax.train.checkpoint import Checkpoints

log = logging.getLogger(__name__)


KL_SCALES = ("tau2v", "tau", "tau2")


@dataclasses.dataclass(frozen=True)
class Point:
  proportion: float  # β: the AL's share of the loss (0: cross-entropy only; 1: AL only)
  tau: float         # τ: the AL's temperature
  kl_scale: str = "tau2v"  # the KL's weight α: β·τ²·|V| (tau2v, Inan eq. (18)), β·τ (tau) or β·τ² (tau2)
  vocab_size: int = 0  # |V|, needed by tau2v only

  def __post_init__(self):
    if self.kl_scale not in KL_SCALES:
      raise ValueError(f"kl_scale must be one of {KL_SCALES}, not {self.kl_scale!r}.")
    if self.kl_scale == "tau2v" and self.vocab_size <= 0:
      raise ValueError("kl_scale='tau2v' (α = β·τ²·|V|) needs the vocabulary size.")

  @property
  def alpha(self) -> float:
    """The KL term's weight α."""
    if self.kl_scale == "tau2v":
      return self.proportion * self.tau ** 2 * self.vocab_size
    return self.proportion * self.tau ** (2 if self.kl_scale == "tau2" else 1)

  @property
  def name(self) -> str:
    return f"beta{self.proportion:g}_tau{self.tau:g}" + ("" if self.kl_scale == "tau" else f"_kl{self.kl_scale}")


def grid(proportions: Sequence[float], temperatures: Sequence[float], fixed_tau: float,
         fixed_proportion: float, kl_scale: str = "tau2v", vocab_size: int = 0) -> list[Point]:
  """Figure 1's two sweeps: every β at `fixed_tau`, then every τ at `fixed_proportion` (shared points once),
  all with the KL weighted by `kl_scale` (see `Point`; `vocab_size` for tau2v)."""
  for b in [*proportions, fixed_proportion]:
    if not 0.0 <= b <= 1.0:
      raise InputError(f"AL proportions must lie in [0, 1], not {b}.")
  for t in [*temperatures, fixed_tau]:
    if not (math.isfinite(t) and t > 0):
      raise InputError(f"Temperatures must be finite and positive, not {t}.")
  points = [Point(float(b), float(fixed_tau), kl_scale, vocab_size) for b in proportions]
  points += [Point(float(fixed_proportion), float(t), kl_scale, vocab_size) for t in temperatures]
  return list(dict.fromkeys(points))


def point_config(base, point: Point):
  """`base` with the loss of `point`: al.ce_weight = 1 − β, al.tau = τ and al.alpha = the point's α."""
  if point.kl_scale == "tau2v" and point.vocab_size != base.vocab_size:
    raise ValueError(f"The point's |V| = {point.vocab_size} is not the config's vocab_size {base.vocab_size}.")
  c = base.copy_and_resolve_references()
  with c.unlocked():
    c.name = f"{base.name}_{point.name}"
    c.al.alpha = point.alpha
    c.al.ce_weight = 1.0 - point.proportion
    c.al.tau = point.tau
  if c.words.mode != "untied":
    raise ValueError(f"The Section-6.2 sweep needs an untied model (L and W as two leaves), not "
                     f"{c.words.mode!r}.")
  return c


def embedding_matrices(params) -> tuple[np.ndarray, np.ndarray]:
  """(L, W), the input embedding and the output projection [V, D] as float64; W is L when tied."""
  leaves = {k.rsplit("/", 1)[-1]: np.asarray(v, np.float64) for k, v in tying.embedding_leaves(params).items()}
  return leaves["embedding"], leaves.get("out_embedding", leaves["embedding"])


def distances(params, seen: np.ndarray, initial=None, frequent: np.ndarray | None = None) -> dict:
  """Subspace distance of W from span(L): over all words, and over the `seen` word ids only; with the
  run's `initial` parameters also the distance between what training added, ΔW and ΔL (seen words), and
  ‖ΔW‖/‖W₀‖. `random_seen` is the expected distance of two random D-dimensional subspaces of R^n
  (n = seen words), √(1 − D/n): the value to read the others against. With `frequent` (word ids, e.g. the
  span's most frequent words, where training moved W furthest from W₀) the same quantities over those rows,
  suffixed `_frequent`."""
  L, W = embedding_matrices(params)
  L0, W0 = embedding_matrices(initial) if initial is not None else (None, None)

  def over(rows, suffix):
    out = {f"distance_{suffix}": embeddings.subspace_distance(W[rows], L[rows]),
           f"random_{suffix}": float(np.sqrt(max(0.0, 1.0 - W.shape[1] / len(rows)))),
           f"words_{suffix}": int(len(rows))}
    if initial is not None:
      dL, dW = (L - L0)[rows], (W - W0)[rows]
      out[f"update_norm_ratio{'' if suffix == 'seen' else '_' + suffix}"] = float(
          np.linalg.norm(dW) / np.linalg.norm(W0[rows]))
      out[f"update_distance_{suffix}"] = (embeddings.subspace_distance(dW, dL)
                                          if np.linalg.norm(dW) > 0 and np.linalg.norm(dL) > 0 else float("nan"))
    return out

  out = {"distance_all": embeddings.subspace_distance(W, L), **over(seen, "seen")}
  if frequent is not None:
    out.update(over(frequent, "frequent"))
  return out


def most_frequent(span: np.ndarray, k: int) -> np.ndarray:
  """The ids of the k most frequent words of `span` (ties: the smaller id first)."""
  ids, counts = np.unique(np.asarray(span), return_counts=True)
  return ids[np.argsort(-counts, kind="stable")][:k]


def target_entropy(params, seen: np.ndarray, tau: float) -> float:
  """Mean entropy (nats) of the AL's target ỹ = softmax(L·u_w/τ) over the `seen` words w, with the trained
  input embedding L. ln V means ỹ is uniform (the AL then only flattens ŷ); small values mean it points
  at w's neighbours."""
  return target_stats(embedding_matrices(params)[0], seen, tau)["entropy"]


def target_stats(L: np.ndarray, words: np.ndarray, tau: float) -> dict:
  """ỹ_w = softmax(L·l_w/τ) for each w in `words` (ids): mean entropy, the share peaking on w itself, the
  commonest peak (id) with how many ỹ's peak there and its mean mass."""
  z = L[words] @ L.T / tau
  z -= z.max(axis=1, keepdims=True)
  logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
  p = np.exp(logp)
  peaks = p.argmax(axis=1)
  ids, counts = np.unique(peaks, return_counts=True)
  hub = int(ids[np.argmax(counts)])
  return {"entropy": float(-(p * logp).sum(axis=1).mean()),
          "peak_on_self": float((peaks == words).mean()), "hub": hub, "hub_peaks": int(counts.max()),
          "hub_mass": float(p[:, hub].mean())}


SWEEP_FILE = "sweep.json"
RESULT_KEYS = ("train_ppl", "valid_ppl", "steps")  # what a row takes from a point's results.json


def _record(path: Path, check) -> object | None:
  """The JSON in `path` if `check` accepts it; None if there is no such file; a file that cannot be read as
  JSON or that `check` refuses is moved aside (`files.set_aside`: <name>.damaged), said in the log, and None."""
  if not path.exists():
    return None
  try:
    value = json.loads(path.read_text())
    if check(value):
      return value
    why = "not the record expected"
  except (OSError, ValueError) as e:  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
    why = f"{type(e).__name__}: {e}"
  log.warning("%s cannot be used (%s); moved aside to %s.", path, why, files.set_aside(path).name)
  return None


def _is_results(r) -> bool:
  return isinstance(r, dict) and all(k in r for k in RESULT_KEYS)


def _is_rows(rows) -> bool:
  return isinstance(rows, list) and all(isinstance(r, dict) and "point" in r for r in rows)


def kl_scale_of(row: dict) -> str:
  """The KL weighting of a sweep row (rows written before they recorded it: from the point's name)."""
  return row.get("kl_scale") or (row["point"].rsplit("_kl", 1)[1] if "_kl" in row["point"] else "tau")


def merge(earlier: Sequence[dict], rows: Sequence[dict], workdir: Path) -> list[dict]:
  """The sweep's rows: `earlier` (an earlier sweep.json's), each replaced by the row of `rows` with its point,
  and dropped when its point's run no longer has a results.json in `workdir`; then the points of `rows` that
  `earlier` lacks. A later command that measures some points keeps the others' rows."""
  now = {r["point"]: r for r in rows}
  out = [now.pop(r["point"], r) for r in earlier
         if r["point"] in now or (workdir / r["point"] / "results.json").is_file()]
  return out + list(now.values())


def run(base, corpus, workdir: str | Path, points: Sequence[Point], frequent_words: int = 1000) -> list[dict]:
  """Train (or resume, or skip if finished) every point; returns one row per point. Distances are measured
  over all words, the span's words and its `frequent_words` most frequent words. Writes <workdir>/sweep.json
  after each point: these rows merged with those of the points sweep.json holds then and this call does not
  measure (`merge`; read at each write, so rows another command wrote meanwhile are kept). A point whose
  results.json is damaged (not JSON, or without the keys of a row) has it moved aside and finishes again from
  its checkpoint, so does a damaged sweep.json (started anew)."""
  workdir = Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  span = corpus.train[:base.train_max_tokens] if base.train_max_tokens else corpus.train
  seen = np.unique(np.asarray(span))
  frequent = most_frequent(span, frequent_words)
  model = models.build(base)
  initial = models.init_params(model, base, trainer.run_keys(base.seed)[0])
  rows = []
  for point in points:
    config = point_config(base, point)
    name = point.name + (f"_seed{base.seed}" if base.seed else "")
    run_dir = workdir / name
    results = _record(run_dir / "results.json", _is_results) or lm.fit(config, corpus, run_dir)
    ckpts = Checkpoints(run_dir / "checkpoints", read_only=True)
    state, _ = ckpts.restore_saved("last")
    ckpts.close()
    rows.append({"point": name, "seed": base.seed, "proportion": point.proportion, "tau": point.tau,
                 "alpha": point.alpha, "kl_scale": point.kl_scale, **distances(state["params"], seen, initial, frequent),
                 "target_entropy": target_entropy(state["params"], seen, point.tau),
                 **{k: results[k] for k in RESULT_KEYS}})
    earlier = _record(workdir / SWEEP_FILE, _is_rows) or []
    (workdir / SWEEP_FILE).write_text(json.dumps(merge(earlier, rows, workdir), indent=2))
  return rows


def by_point(rows: Sequence[dict]) -> list[list[dict]]:
  """The rows grouped by point (β, τ, KL weighting) in first-seen order, each group in seed order (a row written
  before rows recorded the seed is seed 0)."""
  groups: dict[tuple, list[dict]] = {}
  for r in rows:
    groups.setdefault((r["proportion"], r["tau"], kl_scale_of(r)), []).append(r)
  return [sorted(g, key=lambda r: r.get("seed", 0)) for g in groups.values()]


def _cell(group: Sequence[dict], key: str, fmt: str) -> str:
  """One seed: its value; several: mean ± sample sd, then each seed's value."""
  v = [r[key] for r in group]
  if len(v) == 1:
    return f"{v[0]:{fmt}}"
  return f"{np.mean(v):{fmt}} ± {np.std(v, ddof=1):{fmt}} ({', '.join(f'{x:{fmt}}' for x in v)})"


def table(rows: Sequence[dict]) -> str:
  """One line per point; a point measured at several seeds reads mean ± sd (each seed) in every measured column."""
  k = rows[0]["words_frequent"] if rows else 0
  lines = ["| β (AL proportion) | τ | α | seeds | distance (all words) | distance (words in the span; random) "
           f"| distance ΔW–ΔL (span) | ‖ΔW‖/‖W₀‖ (span) | distance ({k:,} most frequent; random) | ΔW–ΔL ({k:,}) "
           f"| ‖ΔW‖/‖W₀‖ ({k:,}) | entropy of ỹ (nats) | train ppl | valid ppl |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for g in by_point(rows):
    r, c = g[0], lambda key, fmt=".3f": _cell(g, key, fmt)
    lines.append(f"| {r['proportion']:g} | {r['tau']:g} | {r['alpha']:g} "
                 f"| {', '.join(str(x.get('seed', 0)) for x in g)} | {c('distance_all')} "
                 f"| {c('distance_seen')} ({r['random_seen']:.3f}) | {c('update_distance_seen')} "
                 f"| {c('update_norm_ratio', '.3g')} "
                 f"| {c('distance_frequent')} ({r['random_frequent']:.3f}) | {c('update_distance_frequent')} "
                 f"| {c('update_norm_ratio_frequent', '.3g')} "
                 f"| {c('target_entropy', '.2f')} | {c('train_ppl', '.1f')} | {c('valid_ppl', '.1f')} |")
  return "\n".join(lines)


def plot(rows: Sequence[dict], png: str | Path, fixed_tau: float, fixed_proportion: float) -> Path:
  """Figure 1's two panels: distance against β (at `fixed_tau`) and against τ (at `fixed_proportion`); a point
  of several seeds is their mean with ± one sd."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  panels = ((axes[0], "proportion", lambda r: r["tau"] == fixed_tau, f"AL proportion β (τ = {fixed_tau:g})"),
            (axes[1], "tau", lambda r: r["proportion"] == fixed_proportion,
             f"temperature τ (β = {fixed_proportion:g})"))
  for ax, key, keep, xlabel in panels:
    sel = sorted((g for g in by_point(rows) if keep(g[0])), key=lambda g: g[0][key])
    for field, label in (("distance_all", "W from span(L), all words"),
                         ("distance_seen", "W from span(L), words in the span"),
                         ("update_distance_seen", "ΔW from span(ΔL), words in the span")):
      ax.errorbar([g[0][key] for g in sel], [np.mean([r[field] for r in g]) for g in sel],
                  [np.std([r[field] for r in g], ddof=1) if len(g) > 1 else 0.0 for g in sel],
                  marker="o", capsize=3, label=label)
    ax.set_xlabel(xlabel)
    ax.axhline(sel[0][0]["random_seen"] if sel else 1.0, color="grey", linestyle=":", linewidth=1,
               label="random subspaces (words in the span)")
    ax.set_ylabel("subspace distance")
    if key == "tau":
      ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
  fig.suptitle("Inan et al. (2017) Section 6.2: the augmented loss and the output projection's subspace", fontsize=9)
  fig.tight_layout()
  png = Path(png)
  fig.savefig(png, dpi=100)
  plt.close(fig)
  return png


def checkpoint_report(checkpoints: str | Path, which: str = "last", tau: float = 20.0, words: int = 2000,
                      data_dir: str | None = None) -> dict:
  """Where a PTB run's augmented-loss target puts its mass, and how large its embedding rows are.

  Reads `checkpoints` (a run's checkpoints/ folder, read-only) and returns the row norms of the input
  embedding L [V, D] (mean, and the five largest with their words) and, over the `words` most frequent
  training words w, `target_stats` of ỹ_w = softmax(L·l_w / τ) with the hub named by its word. With a tied
  matrix and no output bias, a few frequent words' rows can grow until they dominate every target: a hub.

      python -c "from wt_jax.analysis import al_sweep; print(al_sweep.checkpoint_report('RUN/checkpoints'))"
  """
  corpus = ptb.load(data_dir, download=False)
  ckpts = Checkpoints(checkpoints, read_only=True)
  state, _ = ckpts.restore_saved(which)
  ckpts.close()
  L, _ = embedding_matrices(state["params"])
  norms = np.linalg.norm(L, axis=1)
  top = np.argsort(-norms)[:5]
  frequent = most_frequent(corpus.train, words)
  stats = target_stats(L, frequent, tau)
  stats["hub"] = corpus.vocab.words[stats["hub"]]
  return {"checkpoint": f"{checkpoints}/{which}", "step": int(state["step"]), "row_norm_mean": float(norms.mean()),
          "largest_rows": [[corpus.vocab.words[i], round(float(norms[i]), 2)] for i in top], "tau": tau,
          "words": len(frequent), **stats}


def logit_gradients(config, params, tokens: np.ndarray, windows: int = 30, alpha: float | None = None,
                    tau: float | None = None) -> dict:
  """How strongly a trained LM's augmented loss acts, next to its cross-entropy, on a token stream.

  The model (`models.build(config)`, dropout off) reads the first `windows` of the stream's evaluation
  windows (`batching.lm_windows`: B = config.eval_batch_size streams, T = config.bptt), carrying its state.
  Per scored token, with logits z [V] and target y, it takes the gradient with respect to z of each term of
  the training cost (`losses.make_lm_cost`): the cross-entropy's, softmax(z) − onehot(y), and the augmented
  loss's, α·∂KL(ỹ‖ŷ)/∂z = (α/τ)·(ŷ − ỹ) (Inan et al. Section 3's loss; Section 4 expands it at high τ, where
  it matches logits). Returned as means over tokens: the two terms' values (`ce`, `al` = α·KL, nats) and
  gradient L2 norms (`grad_ce`, `grad_al`); the correlation over words of the centred logits z with the
  centred target logits s = L·u_y, which the AL pulls z towards (`logit_target_corr`); and the standard
  deviations over words of z and s. α and τ default to config.al's; pass them to measure a model trained
  without the AL (α = 0) at another run's setting.
  """
  import jax
  import jax.numpy as jnp
  model = models.build(config)
  L = jnp.asarray(tying.word_matrix(params, config.al.embedding))
  alpha = float(config.al.alpha if alpha is None else alpha)
  tau = float(config.al.tau if tau is None else tau)
  wins = batching.lm_windows(tokens, config.eval_batch_size, config.bptt)
  if len(wins) < windows:
    raise ValueError(f"{len(tokens)} tokens give {len(wins)} windows, fewer than windows={windows}.")

  @jax.jit
  def window(carry, x, y):
    (z, carry), _ = model.apply({"params": params}, x, carry, train=False, mutable=[tying.PENALTIES])
    z = z.astype(jnp.float32)
    ce = lambda z: jnp.sum(-jnp.take_along_axis(jax.nn.log_softmax(z), y[..., None], -1))
    al = lambda z: alpha * jnp.sum(losses.augmented_kl(z, y, L, tau))
    g_ce, g_al = jax.grad(ce)(z), jax.grad(al)(z)
    s = jnp.einsum("btd,vd->btv", L[y], L)
    zc, sc = z - z.mean(-1, keepdims=True), s - s.mean(-1, keepdims=True)
    corr = jnp.sum(zc * sc, -1) / jnp.sqrt(jnp.sum(zc ** 2, -1) * jnp.sum(sc ** 2, -1))
    norm = lambda g: jnp.linalg.norm(g, axis=-1).mean()
    return carry, {"ce": ce(z) / y.size, "al": al(z) / y.size, "grad_ce": norm(g_ce), "grad_al": norm(g_al),
                   "logit_target_corr": corr.mean(), "logit_std": zc.std(-1).mean(), "target_std": sc.std(-1).mean()}

  carry, rows = model.initial_carry(config.eval_batch_size), []
  for x, y in zip(wins.x[:windows], wins.y[:windows]):
    carry, row = window(carry, jnp.asarray(x), jnp.asarray(y))
    rows.append(row)
  out = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
  return {**out, "alpha": alpha, "tau": tau, "tokens": int(wins.x[:windows].size)}
