"""Runnable entry points: `python -m experiments.<name> --config=configs/<file>.py`."""
