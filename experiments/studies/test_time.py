"""Test-time adaptation of trained runs: for each run folder, the continuous cache and dynamic
evaluation (`wt_jax.adapt`) tuned on the run's validation split, then scored on its test split.

    python -m experiments.studies.test_time --records=runs/test_time runs/ptb_table6/small_seed0 \
        runs/ptb_table6/small_tied_seed0

Writes <records>/<run name>.json per run (a finished one is not redone): the plain valid and test perplexity (the
run's own test protocol, its tested checkpoint), every grid point's validation perplexity, the chosen settings and
their test perplexity, and the time each took. The grids (ours; `--cache_sizes`, `--cache_thetas`, ...): the cache
over n × θ × λ (one model pass per n: `adapt.cache_nll`); dynamic evaluation over η × λ × segment per rule (segments
`--dynamic_segments`, default the run's bptt); the cache with dynamic evaluation ('dynamic_sgd+cache': sgd's best with
the cache's best n and θ, over the cache's λ); `--reset_at` scores every text by documents; the rms rule's MS from the training split (`--stats_batches` windows of `--stats_batch_size` streams).
`--valid_max_tokens` tunes everything on a prefix of validation (smoke runs); `--dynamic_valid_tokens` tunes only
dynamic evaluation on one (its passes cost a gradient step per segment). Each method's result is kept in
<run name>.partial.json as it finishes, so the same command after a kill redoes only the methods not yet done
(with other grids it is refused, naming the file); the record's `reused` names them, and its `wall_s` is
the last command's.
"""
import json
import logging
import math
import time
from pathlib import Path

from absl import app, flags

from experiments import check_folder, lm_run_flags, quiet_library_logs, run_main
import wt_jax.adapt as adapt
import wt_jax.files as files
import wt_jax.lm_eval as lm_eval
import wt_jax.trained_lm as trained_lm
from wt_jax.train import run_record

log = logging.getLogger(__name__)

_RECORDS = flags.DEFINE_string("records", None, "Folder for the per-run records.")
_CACHE_SIZES = flags.DEFINE_list("cache_sizes", ["100", "500", "2000"], "The cache's n to try.")
_CACHE_THETAS = flags.DEFINE_list("cache_thetas", ["0.1", "0.2", "0.3", "0.5", "0.7", "1.0"], "θ to try.")
_CACHE_LAMBDAS = flags.DEFINE_list("cache_lambdas", ["0.02", "0.05", "0.1", "0.15", "0.2", "0.3"], "λ to try.")
_SGD_LRS = flags.DEFINE_list("sgd_lrs", ["0.01", "0.02", "0.05", "0.1", "0.2"], "sgd: η to try.")
_SGD_DECAYS = flags.DEFINE_list("sgd_decays", ["0", "0.001", "0.01"], "sgd: λ to try.")
_RMS_LRS = flags.DEFINE_list("rms_lrs", ["1e-5", "2e-5", "5e-5", "1e-4", "2e-4"], "rms: η to try (Krause et al.'s "
                             "code tries 3e-5 … 1e-4 at segments of 5).")
_RMS_DECAYS = flags.DEFINE_list("rms_decays", ["0.001", "0.002", "0.005"], "rms: λ to try.")
_RULES = flags.DEFINE_list("dynamic_rules", ["sgd", "rms"], "Dynamic evaluation's rules to tune (sgd, rms); the cache "
                           "with dynamic evaluation uses sgd's best.")
_SEGMENTS = flags.DEFINE_list("dynamic_segments", [], "Dynamic evaluation's segment lengths to try (default: the "
                              "run's bptt alone; Krause et al. use 5).")
_STATS_BATCHES = flags.DEFINE_integer("stats_batches", 0, "rms: training windows for MS (0: all).")
_STATS_BATCH_SIZE = flags.DEFINE_integer("stats_batch_size", 100, "rms: streams per training window for MS.")
_VALID_MAX = flags.DEFINE_integer("valid_max_tokens", 0, "Tune on this prefix of validation (0: all of it).")
_DYNAMIC_VALID = flags.DEFINE_integer("dynamic_valid_tokens", 0, "Tune dynamic evaluation on this prefix of "
                                      "validation (0: all of it).")
flags.mark_flag_as_required("records")


def _floats(values) -> list[float]:
  return [float(v) for v in values]


def best_point(grid: list[dict]) -> dict:
  """The grid point of lowest finite validation perplexity: a setting that diverged (NaN or inf) is never chosen."""
  finite = [g for g in grid if math.isfinite(g["valid_ppl"])]
  if not finite:
    raise app.UsageError(f"every one of the grid's {len(grid)} points diverged on validation; give smaller values.")
  return min(finite, key=lambda g: g["valid_ppl"])


def settings(valid_tokens: int) -> dict:
  """What a record depends on besides the run: the grids and the tuning prefixes, as the flags give them."""
  names = ("cache_sizes", "cache_thetas", "cache_lambdas", "sgd_lrs", "sgd_decays", "rms_lrs", "rms_decays",
           "stats_batches", "stats_batch_size", "dynamic_valid_tokens", "dynamic_segments", "dynamic_rules", "reset_at")
  return {"valid_tokens": valid_tokens, **{n: flags.FLAGS[n].value for n in names}}


def study(lm, valid, test, train, done: dict, keep) -> dict:
  """The record of one run: plain, cache, dynamic evaluation (each rule over η × λ × segment), and the cache with
  dynamic evaluation (sgd's best setting with the cache's best n and θ, over the cache's λ), each tuned on `valid`
  and scored on `test`, every score with `--reset_at`'s documents. A method already in `done` is not redone;
  `keep(out)` is called after each method with what is done so far."""
  reset = lm_run_flags.RESET_AT.value
  score = lambda scorer, ids, **kw: trained_lm.by_document(scorer, lm, ids, reset, **kw)["ppl"]
  out = dict(done)
  if "plain" not in out:
    out["plain"] = {"valid_ppl": score(trained_lm.score_ids, valid), "test_ppl": score(trained_lm.score_ids, test)}
    keep(out)
  t0 = time.time()
  thetas, lambdas = _floats(_CACHE_THETAS.value), _floats(_CACHE_LAMBDAS.value)
  if lm.config.model != "nnlm" and "cache" not in out:  # (no cache for the NNLM: `adapt`)
    grid = []
    for n in (int(v) for v in _CACHE_SIZES.value):
      if reset == "never":  # (one model pass for every θ and λ)
        nll = adapt.cache_nll(lm, valid, n, thetas, lambdas)
        grid += [{"n": n, "theta": th, "lambda": la, "valid_ppl": lm_eval.perplexity(nll[i, j], len(valid) - 1)}
                 for i, la in enumerate(lambdas) for j, th in enumerate(thetas)]
      else:
        grid += [{"n": n, "theta": th, "lambda": la, "valid_ppl": score(adapt.score_cache, valid, size=n, theta=th,
                                                                         lam=la)} for la in lambdas for th in thetas]
    best = best_point(grid)
    test_ppl = score(adapt.score_cache, test, size=best["n"], theta=best["theta"], lam=best["lambda"])
    out["cache"] = {"grid": grid, "best": best, "test_ppl": test_ppl, "s": time.time() - t0}
    keep(out)
  tune = valid[:_DYNAMIC_VALID.value + 1] if _DYNAMIC_VALID.value else valid
  segments = [int(v) for v in _SEGMENTS.value] or [lm.config.bptt]
  for rule, lrs, decays in (("sgd", _SGD_LRS.value, _SGD_DECAYS.value), ("rms", _RMS_LRS.value, _RMS_DECAYS.value)):
    if f"dynamic_{rule}" in out or rule not in _RULES.value:
      continue
    t1 = time.time()
    ms = (adapt.gradient_rms(lm, train, _STATS_BATCH_SIZE.value, max_batches=_STATS_BATCHES.value) if rule == "rms"
          else None)
    grid = [{"lr": lr, "decay": d, "segment": seg,
             "valid_ppl": score(adapt.score_dynamic, tune, rule=rule, lr=lr, decay=d, ms=ms, segment=seg)}
            for seg in segments for lr in _floats(lrs) for d in _floats(decays)]
    best = best_point(grid)
    test_ppl = score(adapt.score_dynamic, test, rule=rule, lr=best["lr"], decay=best["decay"], ms=ms,
                     segment=best["segment"])
    out[f"dynamic_{rule}"] = {"grid": grid, "best": best, "test_ppl": test_ppl, "segment": best["segment"],
                              "tuned_tokens": len(tune) - 1, "s": time.time() - t1}
    keep(out)
  if "cache" in out and "dynamic_sgd" in out and "dynamic_sgd+cache" not in out:
    t2, c, d = time.time(), out["cache"]["best"], out["dynamic_sgd"]["best"]
    both = lambda ids, la: score(adapt.score_dynamic, ids, rule="sgd", lr=d["lr"], decay=d["decay"],
                                 segment=d["segment"], cache=(c["n"], c["theta"], la))
    grid = [{"lambda": la, "valid_ppl": both(tune, la)} for la in lambdas]
    best = best_point(grid)
    out["dynamic_sgd+cache"] = {"grid": grid, "best": {**d, "n": c["n"], "theta": c["theta"], **best},
                                "test_ppl": both(test, best["lambda"]), "tuned_tokens": len(tune) - 1,
                                "s": time.time() - t2}
    keep(out)
  return out


def main(argv):
  check_folder(_RECORDS.value, "--records")
  if not set(_RULES.value) <= {"sgd", "rms"}:
    raise app.UsageError(f"--dynamic_rules takes sgd and rms, not {', '.join(sorted(set(_RULES.value) - {'sgd', 'rms'}))}.")
  quiet_library_logs()
  out_dir = Path(_RECORDS.value)
  for workdir in argv[1:]:
    record = out_dir / f"{Path(workdir).name}.json"
    if record.exists():
      log.info("%s done already: %s", workdir, record)
      continue
    lm = trained_lm.load(workdir, trained_lm.tested_checkpoint(workdir))
    valid, test, train = (trained_lm.split_stream(lm, s) for s in ("valid", "test", "train"))
    valid = valid[:_VALID_MAX.value] if _VALID_MAX.value else valid
    t0 = time.time()
    given = settings(len(valid) - 1)
    partial = out_dir / f"{Path(workdir).name}.partial.json"
    try:
      done = json.loads(partial.read_text()) if partial.exists() else {"settings": given, "methods": {}}
    except (json.JSONDecodeError, UnicodeDecodeError):
      raise app.UsageError(f"{partial} cannot be read; delete it to start this run's record afresh.") from None
    if done.get("settings") != given:
      raise app.UsageError(f"{partial} holds methods done with other grids or prefixes; give the same flags, or "
                           "delete it to start this run's record afresh.")
    out_dir.mkdir(parents=True, exist_ok=True)
    keep = lambda out: files.write_json(partial, {"settings": given, "methods": out})
    result = study(lm, valid, test, train, done["methods"], keep)
    files.write_json(record, {"run": lm.describe(), "config": lm.config.name, "tying": lm.config.words.mode,
                              "seed": lm.config.seed, "valid_tokens": len(valid) - 1, "test_tokens": len(test) - 1,
                              **result, "settings": given, "reused": sorted(done["methods"]),
                              "wall_s": time.time() - t0,
                              "versions": run_record.versions(), "host": run_record.host()})
    partial.unlink()
    log.info("%s: %s", workdir, json.dumps({k: result[k].get("test_ppl") for k in result}))


if __name__ == "__main__":
  run_main(main)
