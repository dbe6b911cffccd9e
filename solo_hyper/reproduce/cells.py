"""A paper table's cells, planned: every run of the table (a row of a column, one seed) with its
prepared config, checked before any work (configs, seeds, rows, columns, data, the robust
config's overrides, the pairs' configs), its run directory and status, and how it is evaluated
(``protocol``, ``robust_protocol``): what a campaign's jobs are made of.

Every run lives in ``OUT/runs/`` under a name fixed by its config, row and seed, and is reused when
finished (the run identity: ``run.rundir.plan_run``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from solo_hyper.campaigns.compare import check_linear
from solo_hyper.campaigns.runs import Protocol, RobustProtocol
from solo_hyper.config import ConfigError, closest
from solo_hyper.config.shipped import configs_root, shipped_config
from solo_hyper.evaluation.robust_runs import robust_config
from solo_hyper.evaluation.seeds import parse_seeds, run_label, seeded_name
from solo_hyper.reproduce import pairs
from solo_hyper.reproduce.tables import (
    CPU_EVAL_S,
    CPU_FINETUNE_S,
    CPU_IMAGES_PER_S,
    CPU_ROBUST_S,
    NOT_RUNNABLE,
    TABLES,
    TRAIN_IMAGES,
    Column,
    Row,
    Table,
)
from solo_hyper.run.rundir import plan_run
from solo_hyper.run.train import Prepared, check_environment, prepare

SCALES = ("cpu", "gpu")
DEFAULT_SEEDS = (0, 1, 2)


def table(name: str) -> Table:
    if name in TABLES:
        return TABLES[name]
    known = ", ".join(TABLES)
    if name in NOT_RUNNABLE:
        raise ConfigError(f"{name} cannot be reproduced here: {NOT_RUNNABLE[name]}; the tables "
                          f"are {known}")  # fmt: skip
    raise ConfigError(f"unknown table {name!r}{closest(name, list(TABLES))}; the tables are {known} "
                      "(python -m solo_hyper reproduce --list)")  # fmt: skip


def listing() -> str:
    lines = ["Tables (python -m solo_hyper reproduce TABLE --scale cpu|gpu):"]
    for t in TABLES.values():
        lines.append(f"  {t.name:<18} {t.title}")
        lines.append(f"  {'':<18} claim: {t.claim}")
        for column in t.scales["cpu"]:
            epochs, subset = _epochs(column.overrides), _subset(column.overrides)
            where = f"{subset:,} images" if subset else "the full split"
            note = f"; {column.budget}" if column.budget else ""
            lines.append(f"  {'':<18} cpu {column.name}: {epochs} epoch(s) on {where}{note}")
    lines.append("Not runnable here:")
    lines += [f"  {name:<18} {why}" for name, why in NOT_RUNNABLE.items()]
    return "\n".join(lines)


def _override(overrides, key: str) -> int | None:
    for o in overrides:
        if o.startswith(f"{key}="):
            return int(o.split("=", 1)[1])
    return None


def _epochs(overrides) -> int | None:
    return _override(overrides, "max_epochs")


def _subset(overrides) -> int | None:
    return _override(overrides, "data.train_subset")


@dataclass
class Cell:
    """One run of the table: a row of a column, one seed."""

    column: Column
    row: Row
    seed: int
    prep: Prepared
    status: str = "new"  # new | resume | finished (a campaign never trains an old run on)
    run_dir: Path | None = None  # the directory plan_run chose (<name>-<hash> beside another's)
    estimate_s: float | None = None
    result: dict = field(default_factory=dict)
    untrained: dict = field(default_factory=dict)  # its untrained backbone's numbers (controls)
    robust_overrides: tuple[str, ...] = ()  # --robust-set: the robust config's overrides
    linear: str | None = None  # the linear probe's config (--linear-config, else the column's)
    # its row's twin in the same column and seed: the run its transfer check is crafted on
    twin: Cell | None = field(default=None, repr=False, compare=False)


def linear_config_of(column: Column, given: str | None) -> str | None:
    """The linear config a column's runs are probed with: ``--linear-config`` when given, else
    the column's own (shipped), else None (the dataset's default)."""
    if given is not None:
        return given
    return str(shipped_config(column.linear_config)) if column.linear_config else None


def protocol(cell: Cell, device: str = "auto") -> Protocol:
    """The comparison protocol of the cell's run: its column's linear config, on the column's
    evaluated dataset (a transfer table's target), without the disk map."""
    return Protocol(linear_config_path=cell.linear, device=device, eval_dataset=cell.column.eval_dataset)


def robust_protocol(cell: Cell) -> RobustProtocol | None:
    """The column's robust evaluation under --robust-set (None: a table without one)."""
    if not cell.column.robust_config:
        return None
    return RobustProtocol(cell.column.robust_config, tuple(cell.robust_overrides))


def _run_name(column: Column, row: Row, seed: int) -> str:
    return seeded_name(run_label(row.config) + row.suffix + column.tag, seed)


def _data_overrides(column: Column, data_root: str | None, machine: bool = True) -> list[str]:
    if column.data_dir is None:
        return []
    folder = Path(data_root or "datasets") / column.data_dir
    if machine and not (folder / "train").is_dir():
        raise ConfigError(
            f"{column.name} needs its dataset at {folder}/train and {folder}/val (ImageFolder "
            "trees); give the folder holding it with --data-root, or choose the columns that are "
            "on this machine with --columns"
        )
    return [f"data.train_path={folder / 'train'}", f"data.val_path={folder / 'val'}"]



def done(cell: Cell) -> bool:
    """Whether the cell's run is finished, evaluated and (robust tables) robust-evaluated, each
    with exactly the campaign's protocol."""
    if cell.status != "finished":
        return False
    robust = robust_protocol(cell)
    return protocol(cell).stored(cell.run_dir) is not None and (
        robust is None or robust.stored(cell.run_dir, cell.row.finetune, twin_dir(cell)) is not None)


def twin_dir(cell: Cell) -> Path | None:
    """The run the cell's transfer check is crafted on (its twin's), None without one."""
    return None if cell.twin is None else cell.twin.run_dir


def estimate(cell: Cell, scale: str) -> float | None:
    """Seconds the cell still needs (CPU scale: the measured throughputs of ``tables``)."""
    if done(cell):
        return 0.0
    if scale != "cpu":
        return None
    if cell.row.finetune:  # its runs are the base row's: only the fine-tuning is its own
        return CPU_FINETUNE_S
    cfg = cell.prep.cfg
    total = 0.0
    if cell.status != "finished":
        data = cfg["data"]
        images = data.get("train_subset") or TRAIN_IMAGES.get(data["dataset"], 50000)
        speed = CPU_IMAGES_PER_S.get(cfg["method"], 500.0)
        total += int(cfg["max_epochs"]) * images / speed
    if cell.status != "finished" or protocol(cell).stored(cell.run_dir) is None:
        total += CPU_EVAL_S
    if cell.column.robust_config:
        total += CPU_ROBUST_S
    return total


def plan(
    name: str, scale: str, seeds=None, epochs: int | None = None, overrides=(), out: str = "",
    rows: list[str] | None = None, columns: list[str] | None = None, data_root: str | None = None,
    robust_overrides=(), machine: bool = True, linear_config: str | None = None,
) -> list[Cell]:  # fmt: skip
    """Every cell of the table, validated (configs, seeds, rows, columns, data, the robust
    config's overrides) before any work. ``machine=False`` (a dry run): no check of this
    machine's data and devices, so that a campaign is planned where it will not run;
    ``linear_config``: --linear-config (else each column's own)."""
    spec = table(name)
    if scale not in SCALES:
        raise ConfigError(f"--scale must be one of {', '.join(SCALES)}, got {scale!r}")
    given = parse_seeds(seeds) if seeds is not None else None
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1):
        raise ConfigError(f"--epochs must be an integer >= 1, got {epochs!r}")
    if any(str(o).split("=", 1)[0] == "seed" for o in overrides):
        raise ConfigError("give the seeds with --seeds, not --set seed=...")
    chosen = spec.scales[scale]
    if columns is not None:
        names = [c.name for c in chosen]
        for c in columns:
            if c not in names:
                raise ConfigError(f"--columns: {name} has no column {c!r} at scale {scale}"
                                  f"{closest(c, names)}; its columns are {', '.join(names)}")  # fmt: skip
        chosen = tuple(c for c in chosen if c.name in columns)
    if rows is not None:
        keys = list(dict.fromkeys(r.key for c in chosen for r in c.rows))
        for r in rows:
            if r not in keys:
                raise ConfigError(f"--rows: {name} has no row {r!r}{closest(r, keys)}; its rows "
                                  f"are {', '.join(keys)}")  # fmt: skip
    _check_robust_overrides(name, chosen, tuple(robust_overrides))
    runs_dir = Path(out) / "runs"
    cells = []
    for column in chosen:
        extra_data = _data_overrides(column, data_root, machine)
        seed_list = list(dict.fromkeys(s for r in column.rows for s in row_seeds(r, given)))
        for seed, row in ((s, r) for s in sorted(seed_list) for r in column.rows):
            # seed by seed: a campaign stopped early has whole seeds of every row, not some rows
            if (rows is not None and row.key not in rows) or seed not in row_seeds(row, given):
                continue
            config = shipped_config(row.config)
            if not config.is_file():
                raise ConfigError(f"{row.config} is missing: reproduce reads the shipped configs "
                                  f"({configs_root()})")  # fmt: skip
            extra = [*column.overrides, *row.overrides, *extra_data, *overrides]
            if epochs is not None:
                extra.append(f"max_epochs={epochs}")
            extra += [f"checkpoint.dir={runs_dir}", f"name={_run_name(column, row, seed)}",
                      f"seed={seed}"]  # fmt: skip
            try:
                prep = prepare(str(config), extra)
            except ConfigError as err:
                raise ConfigError(f"{name}, row {row.key}: {err}") from None
            cells.append(Cell(column, row, seed, prep, robust_overrides=tuple(robust_overrides),
                              linear=linear_config_of(column, linear_config)))  # fmt: skip
    _check_pairs(spec, scale, cells)
    for cell in cells:
        cell.twin = next((c for c in cells if c.column is cell.column and c.seed == cell.seed
                          and c.row.key == cell.row.twin), None)  # fmt: skip
    for cell in cells:
        if machine:
            check_environment(cell.prep.cfg)
        planned = plan_run(cell.prep.cfg, "new")
        cell.status, cell.run_dir = planned.status, planned.run_dir
        cell.estimate_s = estimate(cell, scale)
    return cells


def row_seeds(row: Row, given: list[int] | None = None) -> list[int]:
    """The seeds a row trains: ``given`` (--seeds) when set, else the row's own count from the
    table's definition (``Row.seeds``: RoCL and RHCL five, the primary claim's pair), else
    DEFAULT_SEEDS."""
    if given is not None:
        return list(given)
    return list(range(row.seeds)) if row.seeds else list(DEFAULT_SEEDS)


def check_evaluations(cells: list[Cell]) -> None:
    """Each column's linear evaluation (its config, the transfer target's data) checked on this
    machine before the first run trains."""
    for column in dict.fromkeys(c.column for c in cells):
        group = [c for c in cells if c.column is column]
        check_linear([c.prep for c in group], None, group[0].linear, column.eval_dataset)


def _check_robust_overrides(name: str, columns, overrides: tuple[str, ...]) -> None:
    """--robust-set: only for a table with a robust evaluation, every key checked against each
    column's robust config (a ConfigError names the bad one) before any run."""
    if not overrides:
        return
    configs = list(dict.fromkeys(c.robust_config for c in columns if c.robust_config))
    if not configs:
        robust = ", ".join(t.name for t in TABLES.values() if t.robust)
        raise ConfigError(f"--robust-set: {name} has no robust evaluation (the tables with one: "
                          f"{robust}); give the overrides of its runs with --set")  # fmt: skip
    for config in configs:
        try:
            robust_config(config, overrides)
        except ConfigError as err:
            raise ConfigError(f"--robust-set: {err}") from None


def _check_pairs(spec: Table, scale: str, cells: list[Cell]) -> None:
    """Every pair the table prints compares configs that differ only in what its claim is about."""
    configs: dict[tuple[str, str], dict] = {}
    for cell in cells:
        configs.setdefault((cell.column.name, cell.row.key), cell.prep.cfg)
    problems = pairs.unclean(spec, scale, lambda column, row: configs.get((column.name, row.key)))
    if problems:
        raise ConfigError(
            f"{spec.name}: {'; '.join(problems)}. A verdict compares configs that differ only in "
            "what its claim is about: align the two configs, or name the difference in the "
            "claim's keys (solo_hyper/reproduce/tables.py) and in docs/fairness.md"
        )


__all__ = ["DEFAULT_SEEDS", "SCALES", "Cell", "check_evaluations", "done", "estimate", "linear_config_of", "listing", "plan", "row_seeds",
           "protocol", "robust_protocol", "table", "twin_dir"]  # fmt: skip
