"""A pretraining run: config -> Lightning fit (train.py); what a run is and how its files are
written (identity.py); its directory's state before any work (rundir.py); its checkpoints
(checkpoints.py, retention.py), loggers (loggers.py), run-safety callbacks (guards.py) and its
throughput (throughput.py)."""
