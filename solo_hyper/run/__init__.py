"""A pretraining run: config -> Lightning fit (train.py), its checkpoints (checkpoints.py) and
run-safety callbacks (guards.py)."""
