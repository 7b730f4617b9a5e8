"""A GPU window's runs: a priority list of training runs fitted into the device time a lent machine gives.

- run_queue: the driver (`python -m experiments.gpu.run_queue`): starts, judges, stops and records the jobs
- jobs: what a job is (its spelling, config, corpus and steps) and whether a finished folder is its run
- provenance: the commit and machine the records name (`--stamp` before the tree travels; `env.json`)
- jobs_next.txt, jobs_grouped.txt: the next windows' job lists
- prepare.sh (here, before a call), window.sh (on the machine: the driver), bench.sh (on the machine: the
  measurements), setup.sh (sourced by both: wheels, corpora, the stamped commit)
"""
