"""Inan et al. (2017) Section 6.2 / Figure 1: sweep the augmented loss's proportion β and temperature τ on a
small untied LSTM LM (configs/inan_sec62.py) and plot the subspace distance between the output projection
and the input embedding.

    python -m experiments.studies.inan_sweep --workdir=runs/inan_sec62_paper   # the paper's recipe (defaults)
    python -m experiments.studies.inan_sweep --workdir=runs/inan_sec62_paper --proportions=0,0.5,1 --temperatures=5,20
    # a weaker weighting for comparison (results/inan_sec62/): KL weighted β·τ, β at τ = 20, τ at β = 0.5,
    # L's rows free
    python -m experiments.studies.inan_sweep --workdir=runs/inan_sec62 --kl_scale=tau --fixed_tau=20 \
        --fixed_proportion=0.5 --config.words.row_norm=0

The paper's recipe (Inan et al. Section 6.2, eq. (18)): loss (1 − β)·CE + β·τ²·|V|·KL, β swept at τ = 10 and
τ swept with the AL alone (β = 1), the rows of L held at norm 1 (`configs/inan_sec62.py`). The paper averages
10 runs per point; a command trains its points at `--config.seed`, and another seed's command on the same
workdir adds <point>_seed<k>/ beside them: the table then reads each point's mean ± sd over its seeds.

Every point is a resumable run in <workdir>/beta<β>_tau<τ>/ (finished points are not retrained). Writes
<workdir>/sweep.json (the rows of every point measured in the workdir, this command's and earlier ones'),
sweep.md and figure1.png (the points of this command's KL weighting, `wt_jax.analysis.al_sweep`).
"""
import json
import logging
import sys
from pathlib import Path

from absl import app, flags
from ml_collections import config_flags

from experiments import check_folder, quiet_library_logs, run_main
from wt_jax.analysis import al_sweep
from wt_jax.data import ptb
from wt_jax.train import trainer

log = logging.getLogger(__name__)

_CONFIG = config_flags.DEFINE_config_file("config", "configs/inan_sec62.py", "The base config of every point.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the points' runs and the sweep's outputs.")
_PROPORTIONS = flags.DEFINE_list("proportions", ["0", "0.25", "0.5", "0.75", "1"],
                                 "AL proportions β for the first sweep (at --fixed_tau).")
_TEMPERATURES = flags.DEFINE_list("temperatures", ["1", "2", "5", "10", "20", "40"],
                                  "Temperatures τ for the second sweep (at --fixed_proportion).")
_FIXED_TAU = flags.DEFINE_float("fixed_tau", 10.0, "τ of the proportion sweep (Inan Figure 1a: 10).")
_FIXED_PROPORTION = flags.DEFINE_float("fixed_proportion", 1.0,
                                       "β of the temperature sweep (Inan Figure 1b: 1, the AL alone).")
_KL_SCALE = flags.DEFINE_enum("kl_scale", "tau2v", list(al_sweep.KL_SCALES),
                              "The KL term's weight: β·τ²·|V| (tau2v: Inan eq. (18), which makes the KL's high-τ "
                              "logit gradient (W·h − Lᵀu)/(τ²|V|) of unit size), β·τ (tau: Table 1's α = γτ) or "
                              "β·τ² (tau2: distillation's scaling). Points are named beta<β>_tau<τ>_kl<scale>, "
                              "except tau's (beta<β>_tau<τ>).")
_FREQUENT = flags.DEFINE_integer("frequent_words", 1000, "Also measure the distances over the span's N most "
                                 "frequent words (where training moved W furthest from its initial value).")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  check_folder(_WORKDIR.value, "--workdir")
  quiet_library_logs()
  config = _CONFIG.value
  try:
    points = al_sweep.grid([float(b) for b in _PROPORTIONS.value], [float(t) for t in _TEMPERATURES.value],
                           _FIXED_TAU.value, _FIXED_PROPORTION.value, _KL_SCALE.value, config.vocab_size)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  if config.dataset != "ptb":
    raise app.UsageError(f"The Section-6.2 sweep runs on PTB, not {config.dataset!r}.")
  workdir = Path(_WORKDIR.value)
  try:
    corpus = ptb.load(config.data_dir or None, download=config.download)
    al_sweep.run(config, corpus, workdir, points, _FREQUENT.value)
  except trainer.STOPS as e:  # no corpus, a busy or mismatched point's workdir, divergence, SIGTERM: one line
    sys.exit(str(e))
  # The table and figure: every point of the workdir's sweep (sweep.json: this command's and those an earlier
  # one measured) with this command's KL weighting.
  rows = [r for r in json.loads((workdir / al_sweep.SWEEP_FILE).read_text())
          if al_sweep.kl_scale_of(r) == _KL_SCALE.value]
  md = al_sweep.table(rows)
  (workdir / "sweep.md").write_text(md + "\n")
  al_sweep.plot(rows, workdir / "figure1.png", _FIXED_TAU.value, _FIXED_PROPORTION.value)
  log.info("wrote %s", workdir / "figure1.png")
  print(md)


if __name__ == "__main__":
  run_main(main)
