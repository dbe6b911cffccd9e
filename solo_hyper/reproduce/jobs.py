"""A reproduce campaign's cells as jobs (``launch``): each trains its run, evaluates it with its
column's protocol and, in a robust table, robust-evaluates it; the campaign's own pass then reuses
all of it, evaluates the controls (in the campaign's process: shared controls are computed once,
never by two jobs at a time) and tabulates.

A fine-tuned row (RHCL+AT) shares its base row's run: its job starts once the base row's job has
ended. A row with a Euclidean twin (RHCL's RoCL) starts once the twin's job has ended, so that
its gradient-masking diagnostics craft the transfer attack on the twin; where the twin is not
robust-evaluated by then (a cluster job array runs them at once), the campaign's own pass
finishes that robust evaluation.
"""

from __future__ import annotations

import functools
from pathlib import Path

from solo_hyper.config.shipped import shipped_config
from solo_hyper.launch.jobs import Job, evaluated
from solo_hyper.reproduce.robust_runs import evaluated_rows


def robust_step(row: dict, config: str, overrides: tuple[str, ...], finetune: bool,
                twin: str | None) -> dict:  # fmt: skip
    """A job step: robust-eval (finetune-adv) of the run, stored in its directory. A run with a
    twin is evaluated only once the twin has its own evaluation (its diagnostics attack from the
    twin); else the campaign's own pass evaluates it, after the twin."""
    if twin is not None and not (Path(twin) / "robust" / "robust_eval.pt").is_file():
        return row
    evaluated_rows(Path(row["run_dir"]), config, overrides, finetune, True,
                   None if twin is None else Path(twin))  # fmt: skip
    return row


def job_names(cells: list) -> dict[int, str]:
    """Each cell's job name: its run's, and for a second cell of the same run (a fine-tuned row,
    another column's evaluation) with what tells it apart."""
    names: dict[int, str] = {}
    for cell in cells:
        name = cell.run_dir.name + ("-finetune" if cell.row.finetune else "")
        taken = set(names.values())
        names[id(cell)] = name if name not in taken else f"{name}-{_file_part(cell.column.name)}"
    return names


def _file_part(text: str) -> str:
    return "".join(c if c.isalnum() or c in "+.-" else "_" for c in text)


def cell_jobs(cells: list, linear_config: str | None, device: str, done) -> list[Job]:
    """The jobs of the cells ``done`` says are not finished (trained, evaluated, robust-evaluated);
    a job whose run another job also trains or evaluates starts once that one has ended."""
    jobs, names = [], job_names(cells)
    for index, cell in enumerate(cells):
        if done(cell):
            continue
        linear = linear_config or (
            str(shipped_config(cell.column.linear_config)) if cell.column.linear_config else None)
        steps = [functools.partial(evaluated, linear_config_path=linear, disk=False, device=device,
                                   eval_dataset=cell.column.eval_dataset)]  # fmt: skip
        after = [names[id(c)] for c in cells[:index] if c.run_dir == cell.run_dir]
        twin = None
        if cell.column.robust_config:
            twins = [c for c in cells if c.column is cell.column and c.seed == cell.seed
                     and c.row.key == cell.row.twin]  # fmt: skip
            twin = str(twins[0].run_dir) if twins else None
            after += [names[id(c)] for c in twins]
            steps.append(functools.partial(robust_step, config=cell.column.robust_config,
                                           overrides=tuple(cell.robust_overrides),
                                           finetune=cell.row.finetune, twin=twin))  # fmt: skip
        jobs.append(Job(names[id(cell)], cell.run_dir, cell.prep.cfg, tuple(steps), tuple(after)))
    return jobs


def launch_text(scale: str, cells: list, launch, done, train_images: dict[str, int]) -> str:
    """A dry run's plan of the jobs: how many, where and with what each runs, and (GPU scale) the
    GPU-hours of their pretraining, estimated. Nothing is submitted or started."""
    from solo_hyper.launch.estimate import gpu_hours
    from solo_hyper.launch.pool import slots

    jobs = cell_jobs(cells, None, "auto", done)
    lines = []
    if launch.executor is not None:
        lines.append(f"--executor {launch.executor}: {len(jobs)} job(s) to submit as one job "
                     f"array, each with {launch.cluster.describe()}; logs beside each run "
                     "(<run>.job.json names them); nothing was submitted")  # fmt: skip
    elif launch.jobs > 1:
        plan = slots(launch.jobs)
        lines.append(f"--jobs {launch.jobs}: {len(jobs)} job(s), {len(plan)} at a time, each on "
                     f"{plan[0].describe()} (logs: <run>.log beside each run); nothing was "
                     "started")  # fmt: skip
    if scale == "gpu":
        runs = {c.run_dir: c.prep for c in cells if not done(c) and not c.row.finetune}
        lines += gpu_hours(list(runs.values()), train_images)[1]
    return "\n".join(lines)


__all__ = ["cell_jobs", "launch_text", "robust_step"]
