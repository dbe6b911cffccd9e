"""The evaluation steps of a campaign's jobs: what a job does with its run (or control) once the
run is trained, each cached in the directory, so that the campaign afterwards only reads.

Any executor calls a step as ``step(row, quiet)`` (``launch.jobs.run_job``: ``row`` holds the
directory as ``run_dir``; ``quiet``: no progress bars) and gets the row back; a campaign hands
the steps to its jobs as ``functools.partial``s of these functions, which travel to worker
processes and cluster jobs by pickle.
"""

from __future__ import annotations

import sys
from pathlib import Path

from solo_hyper.evaluation.protocol import evaluate_run
from solo_hyper.evaluation.robust_runs import evaluated_rows


def evaluated(row: dict, quiet: bool, **options) -> dict:
    """The comparison protocol's numbers (``evaluate_run``'s ``options``), cached in the
    directory's eval.json."""
    evaluate_run(row["run_dir"], quiet=quiet, phase_lines=True, **options)
    return row


def robust_evaluated(row: dict, quiet: bool, config: str, overrides: tuple[str, ...], finetune: bool,
                     twin: str | None = None) -> dict:  # fmt: skip
    """robust-eval (``finetune``: finetune-adv) with the robust ``config`` and ``overrides``,
    stored in the directory's robust/; ``twin``: the Euclidean twin's run the diagnostics'
    transfer attack is crafted on (its job ended first)."""
    evaluated_rows(Path(row["run_dir"]), config, overrides, finetune, quiet,
                   None if twin is None else Path(twin))  # fmt: skip
    return row


def announced(row: dict, quiet: bool, line: str) -> dict:
    """A line on stderr as the job starts its work (a control's: what it evaluates, where)."""
    print(line, file=sys.stderr, flush=True)
    return row


__all__ = ["announced", "evaluated", "robust_evaluated"]
