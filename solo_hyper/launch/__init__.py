"""Jobs and where they run: one after another in the campaign's own process (``sequential``, the
default), local worker processes (``pool``, ``--jobs``) or cluster jobs (``cluster``,
``--executor slurm|local`` through submitit); ``dispatch`` picks one. Every executor runs a job
the same way (``jobs.run_job``). This layer sits on ``run`` and imports nothing of
``evaluation``, ``campaigns`` or ``reproduce``: what a job evaluates comes in its steps."""
