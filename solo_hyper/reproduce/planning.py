"""What a reproduce campaign will cost, said before (and while) it runs: the dry run's runs with
their estimated time, the controls' count and cost, the jobs a ``--jobs`` or ``--executor``
campaign would start with their resources and (GPU scale) estimated GPU-hours, and the time
left as jobs end. Nothing here starts or submits anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from solo_hyper.launch.dispatch import Launch
from solo_hyper.launch.jobs import Job, waves
from solo_hyper.launch.pool import slots
from solo_hyper.reproduce.cells import Cell, done
from solo_hyper.reproduce.jobs import cell_jobs, job_names
from solo_hyper.reproduce.tables import CPU_EVAL_S, CPU_FINETUNE_S, CPU_ROBUST_S, TRAIN_IMAGES


def duration(seconds: float | None) -> str:
    """'2.5 min', '42 min', '3.1 h', or that no estimate exists (None)."""
    if seconds is None:
        return "unknown (no measured throughput at this scale)"
    minutes = seconds / 60
    if minutes < 10:  # one decimal: two runs of "2 min" each would add up to "3 min" otherwise
        return f"{minutes:.1f} min"
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def dry_run_text(name: str, scale: str, cells: list[Cell], out: str, controls: bool = True) -> str:
    """Every run with its status and estimated time, how many are done, the time left, and
    (``controls``) what the controls will cost."""
    lines = [f"{name} --scale {scale}: {len(cells)} runs into {out}/runs", seeds_text(cells)]
    for c in cells:
        lines.append(f"  [{c.status:>8}] {c.run_dir.name:<48} {c.row.title} ({c.column.name}),"
                     f" est. {duration(c.estimate_s)}")  # fmt: skip
    todo = [c.estimate_s for c in cells]
    total = None if any(e is None for e in todo) else sum(todo)
    finished = sum(done(c) for c in cells)
    lines.append(f"{finished}/{len(cells)} finished; estimated time left: {duration(total)}")
    if controls and cells:
        networks, inputs, seconds = control_estimate(cells, scale)
        lines.append(f"controls: {networks} untrained network(s) and {inputs} raw-pixel input(s), "
                     f"each evaluated once and cached: est. at most {duration(seconds)} more "
                     "(--no-controls leaves them out)")  # fmt: skip
    return "\n".join(lines)


def seeds_text(cells: list[Cell]) -> str:
    """'seeds 0 1 2: SimCLR / HCL; seeds 0 1 2 3 4: RoCL / RHCL' (rows with the same seeds
    together)."""
    by_seeds: dict[tuple[int, ...], list[str]] = {}
    for row in dict.fromkeys(c.row for c in cells):
        seeds = tuple(sorted({c.seed for c in cells if c.row is row}))
        by_seeds.setdefault(seeds, []).append(row.title)
    return "; ".join(f"seeds {' '.join(map(str, seeds))}: {' / '.join(titles)}"
                     for seeds, titles in by_seeds.items())  # fmt: skip


def control_cost(robust: bool, protocols: set[bool]) -> float:
    """CPU seconds of one control: the comparison protocol, or robust-eval (False in
    ``protocols``) and finetune-adv (True)."""
    if not robust:
        return CPU_EVAL_S
    return CPU_ROBUST_S * (False in protocols) + CPU_FINETUNE_S * (True in protocols)


def control_estimate(cells: list[Cell], scale: str) -> tuple[int, int, float | None]:
    """(untrained networks, raw-pixel inputs, CPU seconds at most) the campaign's controls cost:
    one network per seed, backbone, input normalisation and evaluated dataset (equal networks
    share one), one pixel input per column's evaluation, each evaluated as the runs are
    (robust tables: robust-eval, and finetune-adv where a fine-tuned row uses the network).
    Counted from the configs alone: no network is built."""
    networks: dict[tuple, set[bool]] = {}
    inputs: dict[tuple, set[bool]] = {}
    for c in cells:
        data = c.prep.cfg["data"]
        seen = (json.dumps(c.prep.cfg["backbone"], sort_keys=True, default=str), data["dataset"],
                str(data.get("mean")), str(data.get("std")), c.column.eval_dataset)  # fmt: skip
        networks.setdefault((c.seed, *seen), set()).add(c.row.finetune)
    for column in dict.fromkeys(c.column for c in cells):
        group = [c for c in cells if c.column is column]
        data = group[0].prep.cfg["data"]
        key = (data["dataset"], str(data.get("mean")), str(data.get("std")), column.eval_dataset)
        inputs.setdefault(key, set()).update(c.row.finetune for c in group)
    if scale != "cpu":
        return len(networks), len(inputs), None
    robust = any(c.column.robust_config for c in cells)
    seconds = sum(control_cost(robust, p) for p in [*networks.values(), *inputs.values()])
    return len(networks), len(inputs), seconds


def launch_text(scale: str, cells: list[Cell], launch: Launch) -> str:
    """A dry run's plan of the runs' jobs: how many, where and with what each runs, and (GPU
    scale) the GPU-hours of their pretraining, estimated (``gpu_hours``). Nothing is submitted
    or started."""
    from solo_hyper.reproduce.gpu_hours import gpu_hours

    jobs = cell_jobs(cells)
    lines = []
    if launch.executor is not None:
        arrays = len(waves(jobs))
        how = "one job array" if arrays <= 1 else f"{arrays} job arrays, each after the jobs it waits for"
        lines.append(f"--executor {launch.executor}: {len(jobs)} job(s) to submit as {how} (each "
                     f"control a job besides), each with {launch.cluster.describe()}; logs beside "
                     "each run (<run>.job.json names them); nothing was submitted")  # fmt: skip
    elif launch.jobs > 1:
        plan = slots(launch.jobs)
        lines.append(f"--jobs {launch.jobs}: {len(jobs)} job(s) (each control a job besides), "
                     f"{len(plan)} at a time, each on {plan[0].describe()} (logs: <run>.log "
                     "beside each run); nothing was started")  # fmt: skip
    if scale == "gpu":
        runs = {c.run_dir: c.prep for c in cells if not done(c) and not c.row.finetune}
        lines += gpu_hours(list(runs.values()), TRAIN_IMAGES)[1]
    return "\n".join(lines)


def job_estimates(cells: list[Cell], scale: str, evaluations: dict[str, list[tuple]]) -> dict[str, float | None]:
    """Each job's estimated seconds, by name: a cell's (``cells.estimate``), a control's by
    what it evaluates (``evaluations``: ``campaigns.controls.Plan.evaluations``)."""
    names = job_names(cells)
    out: dict[str, float | None] = {names[id(c)]: c.estimate_s for c in cells}
    for name, asked in evaluations.items():
        robust = {e[1] for e in asked if len(e) == 2}
        out[name] = control_cost(bool(robust), robust) if scale == "cpu" else None
    return out


class Tracker:
    """Jobs done / total and the time left, the estimate scaled by how long the jobs of this
    invocation took against their estimates (the campaign's own process runs them)."""

    def __init__(self, jobs: list[Job], estimates: dict[str, float | None], log: Callable[[str], None]) -> None:
        self.names, self.estimates, self.log = [j.name for j in jobs], estimates, log
        self.ended: set[str] = set()
        self.spent, self.estimated = 0.0, 0.0

    def finished(self, job: Job, seconds: float) -> None:
        self.ended.add(job.name)
        estimate = self.estimates.get(job.name)
        if estimate:
            self.spent, self.estimated = self.spent + seconds, self.estimated + estimate
        left = [self.estimates.get(n) for n in self.names if n not in self.ended]
        ratio = self.spent / self.estimated if self.estimated else 1.0
        eta = None if any(e is None for e in left) else sum(left) * ratio
        self.log(f"[reproduce] {len(self.ended)}/{len(self.names)} jobs done ({job.name}, "
                 f"{seconds:.0f} s); estimated time left {duration(eta)}")  # fmt: skip


__all__ = ["Tracker", "control_estimate", "dry_run_text", "duration", "job_estimates", "launch_text"]
