"""What a job of the GPU queue (`experiments.gpu.run_queue`) is: its spelling, the config and corpus it trains,
its steps, and whether a folder's record is its run.

A job is a config of `configs/`, its argument if the config takes one, and overrides,
`CONFIG[.py][:ARGUMENT][:key=value...]` (`parse_job`), e.g. `large:seed=1:bptt=35` or `inan.py:medium,al`; jobs
joined by '+' are one program whose members are every part's models (`combined_job`). `job_config` builds the
config its `python -m experiments.ptb` process will run, the overrides parsed by ml_collections' own
`--config.key=value` flags; `record_mismatch` says why a workdir's record is not that config's run.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import re
import subprocess
import zlib
from pathlib import Path

from absl import app, flags

REPO = Path(__file__).resolve().parents[2]
# A members run's folder (wt_jax/train/trainer.py: MEMBERS_DIR, SUMMARY_FILE): members/<k>/ is member k's run
# folder; summary.json, written after every member's results.json, marks the run finished.
MEMBERS_DIR, SUMMARY_FILE = "members", "summary.json"


@dataclasses.dataclass
class Job:
  """One entry of the list: its label (folder name), config file, the file's argument, overrides, and where it
  stands."""

  label: str
  config: str  # the file's stem: configs/<config>.py
  overrides: list[str]
  arg: str | None = None  # the config file's argument (configs/inan.py:medium,al → "medium,al")
  rung: int = 0  # index into the precision ladder
  members: int = 0  # K > 0: K models in one program (wt_jax.members); set from its config (`job_members`)
  state: str = "queued"  # queued | running | finished | failed | stopped (deadline) | shed
  proc: subprocess.Popen | None = dataclasses.field(default=None, repr=False)
  started: float | None = None
  ended: float | None = None
  checked_at_step: int = 0
  last_check: dict | None = None  # the latest rate and projection
  checks: list[dict] = dataclasses.field(default_factory=list)  # every one, in order
  events: list[dict] = dataclasses.field(default_factory=list)

  @property
  def config_arg(self) -> str:
    """experiments.ptb's --config value."""
    return f"configs/{self.config}.py" + (f":{self.arg}" if self.arg else "")


def parse_job(spec: str, common: list[str] | tuple = ()) -> Job:
  """'large:seed=1:bptt=35' → Job(label='large_seed1_bptt35', config='large', overrides=[...]);
  'inan.py:medium,al' → Job(label='inan_medium_al', config='inan', arg='medium,al'). The first part after the
  config without '=' is the config file's argument. 'A + B' → one job training A's and B's models as members
  (`combined_job`; its members depend on `common`, the overrides every job gets)."""
  parts = re.split(r"\+(?=\s*[A-Za-z_])", spec)  # ('+' before a config's name: not a value's 1e+3)
  if len(parts) > 1:
    return combined_job([parse_job(part) for part in parts], common)
  config, *rest = spec.strip().split(":")
  config = config[:-3] if config.endswith(".py") else config
  if not re.fullmatch(r"[A-Za-z]\w*", config) or not (REPO / "configs" / f"{config}.py").exists():
    raise app.UsageError(f"Unknown job {spec!r}: no configs/{config}.py.")
  arg = rest.pop(0) if rest and "=" not in rest[0] else None
  bad = [o for o in rest if "=" not in o]
  if bad or arg == "":
    raise app.UsageError(f"Job {spec!r}: expected CONFIG[:ARGUMENT][:key=value...], got {(bad or [''])[0]!r}.")
  parts = [config] + ([arg.replace(",", "_")] if arg else []) + [o.replace("=", "").replace(".", "") for o in rest]
  return Job(label=_label("_".join(parts)), config=config, overrides=rest, arg=arg)


def _label(text: str) -> str:
  """A folder name for a job: `text`'s safe characters; a long one (many overrides or parts) is cut to 100
  characters and its digest added, so that it stays a valid, distinct file name."""
  label = re.sub(r"[^A-Za-z0-9_.-]", "", text)
  return label if len(label) <= 120 else f"{label[:100]}_{hashlib.sha256(label.encode()).hexdigest()[:12]}"


def read_job_specs(jobs: list[str], job: list[str], job_file: str) -> list[str]:
  """The job specs of --jobs, --job and --job_file (one a line; '#' starts a comment), in that order."""
  specs = list(jobs) + list(job)
  if job_file:
    try:
      lines = Path(job_file).read_text().splitlines()
    except OSError as e:
      raise app.UsageError(f"--job_file: cannot read {job_file}: {e.strerror}.") from None
    except UnicodeDecodeError:
      raise app.UsageError(f"--job_file: {job_file} is not UTF-8 text.") from None
    specs += [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]
  return specs


def _apply_overrides(config, overrides: list[str]) -> None:
  """Set `overrides` (key=value) on `config` as `--config.key=value` flags do on experiments.ptb's command line:
  ml_collections' config flag parses each value by its field's type, in order (a later one for a key wins). A
  bad one (no '=', an unknown key, a value of the wrong type) is one `app.UsageError` line."""
  from ml_collections import config_flags
  for override in overrides:
    key, eq, _ = override.partition("=")
    if not (eq and key):
      raise app.UsageError(f"Override {override!r}: expected key=value.")
    argv = ["job", f"--config.{override}"]
    parser = flags.FlagValues()
    try:
      config_flags.DEFINE_config_dict("config", config, flag_values=parser, sys_argv=argv, lock_config=False)
      parser(argv)
    except (AttributeError, KeyError, IndexError, ValueError) as e:  # the path: not found (ml_collections: the
      # missing part, then "Did you mean ..."), or not a path
      why = e
      while isinstance(why, BaseException) and why.args:
        why = why.args[0]
      hint = "; ".join(line.strip() for line in str(why).splitlines()[1:])
      raise app.UsageError(f"Override {override!r}: the config has no key {key!r}"
                           f"{f' ({hint})' if hint else ''}.") from None
    except flags.Error as e:  # a value its field's type refuses, a field of a type no flag sets
      raise app.UsageError(f"Override {override!r}: {str(e).rstrip('.')}.") from None


def job_config(job: Job, common: list[str], precision: str | None = None):
  """The config the job's process will run (experiments.ptb builds the same from the same file, argument and
  overrides): `common` then the job's own overrides, and `precision` if given."""
  module = importlib.import_module(f"configs.{job.config}")
  if not hasattr(module, "get_config"):
    raise app.UsageError(f"Job {job.label}: configs/{job.config}.py has no get_config(): not a run's config.")
  ladder = [o for o in common + job.overrides if o.partition("=")[0] == "matmul_precision"]
  if ladder:  # (the record names the rung it ran on: an override would run another precision under that name)
    raise app.UsageError(f"Job {job.label}: {ladder[0]!r}: the precision is set by --precisions, not an override.")
  if job.arg is not None and not inspect.signature(module.get_config).parameters:
    raise app.UsageError(f"Job {job.label}: configs/{job.config}.py takes no argument, not {job.arg!r} (an "
                         f"override is key=value).")
  try:
    config = module.get_config(job.arg) if job.arg is not None else module.get_config()
  except (TypeError, ValueError) as e:
    raise app.UsageError(f"Job {job.label}: configs/{job.config}.py:{job.arg}: {e}") from None
  if precision is not None:  # (before the overrides: the job's command line gives it first too)
    config.matmul_precision = precision
  _apply_overrides(config, common + job.overrides)
  return config


def combined_job(parts: list[Job], common: list[str] | tuple) -> Job:
  """Several jobs as one program: every part's models (a part with members: each of its members) become the
  members of the first part's config, spelled out in `member_values` (`wt_jax.members.combine`: names, seeds
  and the values that differ), so member k's config is exactly that part's. A part that differs from the
  first in anything else (a shape, the model, the corpus) cannot share the program: one line says which key."""
  import wt_jax.members as members
  label = "__".join(p.label for p in parts)
  configs = []
  try:
    for part in parts:
      config = job_config(part, list(common))
      group = members.parse(config)
      configs += list(group.configs) if group else [config]
    values = members.combine(configs)
  except ValueError as e:
    raise app.UsageError(f"Job {label}: {e}") from None
  first = parts[0]
  own = [o for o in first.overrides if o.split("=", 1)[0] not in ("members", "member_values")]
  job = Job(label=label, config=first.config, arg=first.arg,
            overrides=own + ["members=0", f"member_values={values}"])
  job_members(job, list(common))  # (its members checked as the run checks them: no two the same run)
  return job


def members_of(config) -> int:
  """K of a config that trains K members in one program (`config.members`, or the length of
  `config.member_values`' lists: `wt_jax.members.parse`), 0 for a plain run. Raises ValueError for a bad
  spelling."""
  import wt_jax.members as members
  group = members.parse(config)
  return group.size if group else 0


def job_members(job: Job, common: list[str]) -> int:
  """The job's K (`members_of` its config): 0 for a plain run; a bad spelling stops with one line."""
  try:
    return members_of(job_config(job, common))
  except ValueError as e:
    raise app.UsageError(f"Job {job.label}: {e}") from None


IGNORED_IN_MATCH = {"matmul_precision", "class_bounds"}  # the ladder's choice; filled in by the run itself


def record_mismatch(run_config: dict, expected: dict, ladder: list[str], results: dict | None,
                    resumable: bool = False) -> str | None:
  """Why a workdir's record is not the job's run, or None if it is: `run_config` (its run.json's config)
  against `expected` (`job_config(...).to_dict()`); `results`, its results.json (a members run: summary.json),
  None for a run not finished; `resumable`: not finished, with a checkpoint the trainer resumes from.

  Its precision must be a rung of `ladder`: the queue resumes a run on its own rung, or records a finished one
  under it (no trainer knows the ladder). A resumable run's config is left to the trainer, which compares it with
  the folder's run.json at the resume and refuses another run's (`run_record.ConfigChangedError`: the job fails with
  that line). Any other record is compared here, since no trainer resumes it: a finished run is recorded, not
  rerun, and a run without a checkpoint would be started afresh over its record. Its config must match outside
  the keys a resume may change (`run_record.RESUMABLE_KEYS`); a finished run's results must name the same config,
  seed and precision (a summary: the members' seeds): run.json and results.json are written at different
  times, so a folder may hold one of another run."""
  from wt_jax.train import run_record
  precision = run_config.get("matmul_precision")
  if precision not in ladder:
    return f"its run.json has matmul_precision {precision!r}, not one of {ladder}"
  if resumable:
    return None
  changes = {k: v for k, v in run_record.config_changes(run_config, expected).items()
             if k.split(".")[-1] not in run_record.RESUMABLE_KEYS | IGNORED_IN_MATCH}
  if changes:
    shown = ", ".join(f"{k} {a!r} (job: {b!r})" for k, (a, b) in list(changes.items())[:4])
    return f"its run.json has {shown}{', …' if len(changes) > 4 else ''}"
  if results is not None:
    checks = [("config", expected.get("name")), ("seed", expected.get("seed")), ("matmul_precision", precision)]
    if "seeds" in results:  # a members run's summary.json
      import ml_collections
      import wt_jax.members as members
      group = members.parse(ml_collections.ConfigDict(expected))
      checks.append(("seeds", group.seeds if group else None))
    for key, want in checks:
      if key in results and results[key] != want:
        return f"its {'summary' if 'seeds' in results else 'results'}.json has {key} {results[key]!r} (job: {want!r})"
  return None


def steps_of_job(job: Job, common: list[str]) -> int:
  """The job's total train steps (epochs × steps per epoch), from its config and the corpus, read here without
  downloading (cheap: no device work). A corpus the machine lacks stops the driver with one line. A members
  job has the steps of one run: its members share every step (and its batches)."""
  from wt_jax.data import batching, lm_corpora, paths  # (after flag parsing: not needed before)
  config = job_config(job, common)
  config.download = False
  try:
    corpus = lm_corpora.load_corpus(config)
  except (OSError, EOFError, zlib.error, ValueError, KeyError, paths.DataUnavailableError) as e:
    raise SystemExit(f"Job {job.label}: its corpus ({config.dataset}) cannot be read: {e} (a GPU machine has "
                     f"no network: carry it, e.g. in .gpu/data).") from None
  train = corpus.train[:config.train_max_tokens] if config.train_max_tokens else corpus.train
  try:
    per_epoch = len(batching.lm_windows(train, config.batch_size, config.bptt))
  except (ValueError, ZeroDivisionError) as e:
    raise app.UsageError(f"Job {job.label}: no train windows of batch_size {config.batch_size} and bptt "
                         f"{config.bptt}: {e}") from None
  steps = per_epoch * config.num_epochs if not config.max_steps else min(config.max_steps,
                                                                          per_epoch * config.num_epochs)
  if steps < 1:
    raise app.UsageError(f"Job {job.label}: {steps} train steps ({config.num_epochs} epochs of {per_epoch} "
                         f"steps, max_steps {config.max_steps}).")
  return steps
