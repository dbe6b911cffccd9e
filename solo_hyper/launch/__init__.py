"""Campaigns on every device given: local worker processes (``--jobs``) and cluster jobs
(``--executor slurm|local`` through submitit), with the GPU-hours a campaign would take."""
