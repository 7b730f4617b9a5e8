"""Study drivers: the scripts that train a study's runs one after another (`bash experiments/studies/<study>.sh`)
and Inan et al.'s Section 6.2 sweep (`python -m experiments.studies.inan_sweep`). Each study's page under results/
names the driver that made its runs."""
