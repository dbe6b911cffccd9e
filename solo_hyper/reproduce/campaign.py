"""``python -m solo_hyper reproduce TABLE --scale cpu|gpu``: train (or reuse) every run of a paper
table, evaluate each with the comparison protocol (and robust-eval for HCL Table 3), and write
one markdown table: mean ± std over seeds, the paired difference to each row's baseline with its
95% interval, and the paper's number beside each cell.

Every run is validated before the first trains, lives in ``OUT/runs/`` under a name fixed by its
config, row and seed, and is reused when finished (the run identity: ``run.rundir.plan_run``), so
a campaign stopped at any point restarts where it was and a finished one trains nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from solo_hyper.config import ConfigError, closest
from solo_hyper.config.shipped import configs_root, shipped_config
from solo_hyper.evaluation import tables
from solo_hyper.evaluation.compare import (
    Phases,
    check_linear,
    evaluate_rows,
    machine_note,
    notes,
    train_or_reuse,
)
from solo_hyper.evaluation.controls import (
    PIXELS,
    TITLES,
    UNTRAINED,
    evaluate_control,
    gain_table,
    gains,
)
from solo_hyper.evaluation.robust import MARK, is_attack
from solo_hyper.evaluation.seeds import parse_seeds, run_label, seeded_name, verdict
from solo_hyper.evaluation.stats import (
    Interval,
    holm_intervals,
    mean,
    paired_interval,
    sample_std,
)
from solo_hyper.launch.dispatch import Launch, dispatch
from solo_hyper.reproduce import jobs, pairs, paper
from solo_hyper.reproduce.robust_runs import (
    evaluated_rows,
    robust_config,
    robust_control,
    robust_metrics,
    stored_rows,
)
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
from solo_hyper.run.identity import write_text_atomic
from solo_hyper.run.lock import RunLockedError, hold
from solo_hyper.run.rundir import plan_run
from solo_hyper.run.train import Prepared, check_environment, prepare

SCALES = ("cpu", "gpu")
DEFAULT_SEEDS = (0, 1, 2)
LINEAR_METRICS = (("linear_acc1", "linear top-1"), ("knn_top1", "kNN top-1"))
RUN_KEYS = ["linear_acc1", "knn_top1", "linear_protocol", "linear_c", "epochs", "wall_time_s"]


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


def budget(column: Column, cfg: dict | None = None, batches: list[int] = ()) -> str:
    """The budget as the runs have it (their resolved config; ``batches``: every row's batch
    size), then the column's own note."""
    if cfg is None:
        return column.budget
    data, epochs = cfg["data"], int(cfg["max_epochs"])
    batch = cfg["optimizer"]["batch_size"]
    if len(set(batches)) > 1:
        batch = "/".join(str(b) for b in sorted(set(batches))) + " (the row's)"
    subset = data.get("train_subset")
    images = subset or TRAIN_IMAGES.get(data["dataset"])
    split = "the full training split" if not subset else "a training subset the seed draws"
    size = f"{images:,} images" if images else "the training images"
    text = (f"{data['dataset']}, {size} ({split}), {epochs} epoch{'s' * (epochs != 1)} of batch "
            f"{batch}, backbone {cfg['backbone']['name']}")  # fmt: skip
    return text + (f"; {column.budget}" if column.budget else "")


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


def _evaluated(cell: Cell) -> bool:
    target = cell.column.eval_dataset
    return (cell.run_dir / (f"eval-{target}.json" if target else "eval.json")).is_file()


def done(cell: Cell) -> bool:
    """Whether the cell's run is finished, evaluated and (robust tables) robust-evaluated."""
    return cell.status == "finished" and _evaluated(cell) and not _needs_robust(cell)


def estimate(cell: Cell, scale: str) -> float | None:
    """Seconds the cell still needs (CPU scale: the measured throughputs of ``tables``)."""
    evaluated = _evaluated(cell)
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
    if cell.status != "finished" or not evaluated:
        total += CPU_EVAL_S
    if cell.column.robust_config:
        total += CPU_ROBUST_S
    return total


def plan(
    name: str, scale: str, seeds=None, epochs: int | None = None, overrides=(), out: str = "",
    rows: list[str] | None = None, columns: list[str] | None = None, data_root: str | None = None,
    robust_overrides=(), machine: bool = True,
) -> list[Cell]:  # fmt: skip
    """Every cell of the table, validated (configs, seeds, rows, columns, data, the robust
    config's overrides) before any work. ``machine=False`` (a dry run): no check of this
    machine's data and devices, so that a campaign is planned where it will not run."""
    spec = table(name)
    if scale not in SCALES:
        raise ConfigError(f"--scale must be one of {', '.join(SCALES)}, got {scale!r}")
    seed_list = parse_seeds(seeds if seeds is not None else DEFAULT_SEEDS)
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
        for seed, row in ((s, r) for s in seed_list for r in column.rows):
            # seed by seed: a campaign stopped early has whole seeds of every row, not some rows
            if rows is not None and row.key not in rows:
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
            cells.append(Cell(column, row, seed, prep, robust_overrides=tuple(robust_overrides)))
    _check_pairs(spec, scale, cells)
    for cell in cells:
        if machine:
            check_environment(cell.prep.cfg)
        planned = plan_run(cell.prep.cfg, "new")
        cell.status, cell.run_dir = planned.status, planned.run_dir
        cell.estimate_s = estimate(cell, scale)
    return cells


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


def _needs_robust(cell: Cell) -> bool:
    if not cell.column.robust_config:
        return False
    return stored_rows(cell.run_dir, cell.column.robust_config, cell.robust_overrides,
                       cell.row.finetune) is None  # fmt: skip


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown (no measured throughput at this scale)"
    minutes = seconds / 60
    if minutes < 10:  # one decimal: two runs of "2 min" each would add up to "3 min" otherwise
        return f"{minutes:.1f} min"
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def launch_text(scale: str, cells: list[Cell], launch: Launch) -> str:
    """A dry run's job plan and GPU-hours (``reproduce.jobs.launch_text``)."""
    return jobs.launch_text(scale, cells, launch, done, TRAIN_IMAGES)


def dry_run_text(name: str, scale: str, cells: list[Cell], out: str, controls: bool = True) -> str:
    lines = [f"{name} --scale {scale}: {len(cells)} runs into {out}/runs"]
    for c in cells:
        lines.append(f"  [{c.status:>8}] {c.run_dir.name:<48} {c.row.title} ({c.column.name}),"
                     f" est. {_duration(c.estimate_s)}")  # fmt: skip
    todo = [c.estimate_s for c in cells]
    total = None if any(e is None for e in todo) else sum(todo)
    done = sum(c.status == "finished" and not _needs_robust(c) for c in cells)
    lines.append(f"{done}/{len(cells)} finished; estimated time left: {_duration(total)}")
    if controls and cells:
        networks, inputs, seconds = control_estimate(cells, scale)
        lines.append(f"controls: {networks} untrained network(s) and {inputs} raw-pixel input(s), "
                     f"each evaluated once and cached: est. at most {_duration(seconds)} more "
                     "(--no-controls leaves them out)")  # fmt: skip
    return "\n".join(lines)


def control_estimate(cells: list[Cell], scale: str) -> tuple[int, int, float | None]:
    """(untrained networks, raw-pixel inputs, CPU seconds at most) the campaign's controls cost:
    one network per seed, backbone, input normalisation and evaluated dataset (equal networks
    share one), one pixel input per column's evaluation, each evaluated as the runs are
    (robust tables: robust-eval, and finetune-adv where a fine-tuned row uses the network)."""
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

    def cost(protocols: set[bool]) -> float:
        if not robust:
            return CPU_EVAL_S
        return CPU_ROBUST_S * (False in protocols) + CPU_FINETUNE_S * (True in protocols)

    seconds = sum(cost(p) for p in networks.values()) + sum(cost(p) for p in inputs.values())
    return len(networks), len(inputs), seconds


class Tracker:
    """Runs done / total and the time left, the estimate scaled by how long the runs of this
    invocation took against their estimates."""

    def __init__(self, cells: list[Cell], log: Callable[[str], None]) -> None:
        self.cells, self.log, self.done = cells, log, 0
        self.spent, self.estimated = 0.0, 0.0

    def finished(self, cell: Cell, seconds: float) -> None:
        self.done += 1
        if cell.estimate_s:
            self.spent, self.estimated = self.spent + seconds, self.estimated + cell.estimate_s
        left = [c.estimate_s for c in self.cells[self.done:]]
        ratio = self.spent / self.estimated if self.estimated else 1.0
        eta = None if any(e is None for e in left) else sum(left) * ratio
        self.log(f"[reproduce] {self.done}/{len(self.cells)} runs done ({cell.prep.cfg['name']}, "
                 f"{seconds:.0f} s); estimated time left {_duration(eta)}")  # fmt: skip


def _robust(cell: Cell, run_dir: Path, quiet: bool, twin: Path | None = None) -> list[dict]:
    return evaluated_rows(run_dir, cell.column.robust_config, cell.robust_overrides,
                          cell.row.finetune, quiet, twin)  # fmt: skip


def _twin_run(cell: Cell, cells: list[Cell]) -> Path | None:
    """The run of the cell's Euclidean twin (same column and seed), once robust-evaluated."""
    for c in cells:
        if (c.column is cell.column and c.seed == cell.seed and c.row.key == cell.row.twin
                and c.result and (Path(c.result["run_dir"]) / "robust" / "robust_eval.pt").is_file()):  # fmt: skip
            return Path(c.result["run_dir"])
    return None


def robust_key(key: str) -> bool:
    """A robust accuracy of a reproduce row: 'LE A_nat', 'r-LE PGD-20 8/255', 'AT AA 8/255'."""
    protocol, _, metric = key.partition(" ")
    return protocol in ("LE", "r-LE", "AT") and (metric == "A_nat" or is_attack(metric))


def _robust_column(key: str) -> bool:
    """A robust accuracy, a model's gradient-masking verdict ('r-LE masking') or its attack
    strength ('r-LE strength')."""
    protocol, _, note = key.partition(" ")
    return robust_key(key) or (protocol in ("LE", "r-LE", "AT") and note in ("masking", "strength"))


def _images_text(cells: list[Cell]) -> str:
    """'A_nat and PGD on 2000 test images, AA on the first 1000' from the runs' counts."""
    found = [c.result["robust_images"] for c in cells if c.result and c.result.get("robust_images")]
    if not found:
        return ""
    counts = found[0]
    others = sorted({n for k, n in counts.items() if not k.startswith("AA")})
    aa = sorted({n for k, n in counts.items() if k.startswith("AA")})
    if not aa or aa == others:
        return f" Every column on the same {', '.join(map(str, others))} test images per run."
    text = f" A_nat and PGD on {', '.join(map(str, others))} test images per run"
    return text + f", AutoAttack on the first {', '.join(map(str, aa))} of them."


def reproduce(name: str, scale: str, out: str, **options) -> Path:
    """Trains, evaluates and tabulates one table (``run_table``'s options); returns the markdown
    table's path. One writer per table file (``OUT/.locks/<its name>``): two terminals may run two
    tables (or two row or seed sets of one) into one OUT, and a run both need is trained by one while the
    other waits."""
    tag = _file_tag(options.get("epochs"), options.get("rows"), options.get("columns"),
                    options.get("overrides", ()), options.get("seeds"),
                    options.get("robust_overrides", ()))  # fmt: skip
    with hold(Path(out) / ".locks" / f"{name}-{scale}{tag}", f"reproduce {name} --scale {scale}"):
        return run_table(name, scale, out, **options)


def _train(cell: Cell, quiet: bool, log: Callable[[str], None], poll_s: float = 30.0) -> dict:
    """Trains or reuses the cell's run; waits while another process holds that run."""
    told = False
    while True:
        try:
            return train_or_reuse(cell.prep, quiet)
        except RunLockedError as err:
            if not told:
                log(f"[reproduce] waiting: {err}".split(". Nothing was done")[0])
                told = True
            time.sleep(poll_s)


def run_table(
    name: str, scale: str, out: str, seeds=None, epochs: int | None = None, overrides=(),
    rows: list[str] | None = None, columns: list[str] | None = None, data_root: str | None = None,
    linear_config: str | None = None, device: str = "auto", quiet: bool = True,
    log: Callable[[str], None] = print, controls: bool = True, robust_overrides=(),
    launch: Launch | None = None,
) -> Path:  # fmt: skip
    """``reproduce`` without the table's lock. ``controls``: each run's untrained backbone and
    the raw pixels of each column, evaluated as the runs (robust tables: by the run's robust
    protocol, ``robust_runs.robust_control``). ``robust_overrides``: --robust-set. ``launch``:
    the runs as parallel jobs first (``--jobs``, ``--executor``); the loop below then reuses
    them and evaluates the controls in this process."""
    cells = plan(name, scale, seeds, epochs, overrides, out, rows, columns, data_root,
                 robust_overrides)  # fmt: skip
    robust = TABLES[name].robust
    for column in dict.fromkeys(c.column for c in cells):
        check_linear([c.prep for c in cells if c.column is column], None, linear_config,
                     column.eval_dataset)  # fmt: skip
    log(dry_run_text(name, scale, cells, out, controls))
    dispatch(jobs.cell_jobs(cells, linear_config, device, done), launch or Launch(), Path(out), log)
    tracker = Tracker(cells, log)
    phases = Phases("reproduce", len(cells), log)
    for i, cell in enumerate(cells, 1):
        start = time.perf_counter()
        label = f"{cell.row.key} ({cell.column.name})"
        phases(i, label, cell.seed, "pretraining")
        row = _train(cell, quiet, log)
        linear = linear_config or (
            str(shipped_config(cell.column.linear_config)) if cell.column.linear_config else None
        )
        phases(i, label, cell.seed, "evaluating")
        row = evaluate_rows([row], linear_config_path=linear, device=device, quiet=quiet,
                            eval_dataset=cell.column.eval_dataset)[0]  # fmt: skip
        if cell.column.robust_config:
            twin = _twin_run(cell, cells) if cell.row.twin else None
            row.update(robust_metrics(_robust(cell, Path(row["run_dir"]), quiet, twin)))
        cell.result = row
        if controls and robust:
            cell.untrained = robust_control(cell.prep, UNTRAINED, Path(out), cell.column.robust_config,
                                            cell.robust_overrides, [cell.row.finetune], quiet)  # fmt: skip
        elif controls:  # transfer: on the target, as the run
            cell.untrained = evaluate_control(cell.prep, UNTRAINED, Path(out), None, linear,
                                              device, quiet, cell.column.eval_dataset)  # fmt: skip
        tracker.finished(cell, time.perf_counter() - start)
    pixels = {}
    for column in dict.fromkeys(c.column for c in cells) if controls else ():
        group = [c for c in cells if c.column is column]
        if robust:  # the raw pixels through every protocol the column's rows use
            pixels[column.name] = robust_control(
                group[0].prep, PIXELS, Path(out), column.robust_config, group[0].robust_overrides,
                sorted({c.row.finetune for c in group}), quiet)  # fmt: skip
            continue
        linear = linear_config or (
            str(shipped_config(column.linear_config)) if column.linear_config else None)
        pixels[column.name] = evaluate_control(group[0].prep, PIXELS, Path(out), None, linear,
                                               device, quiet, column.eval_dataset)  # fmt: skip
    tag = _file_tag(epochs, rows, columns, overrides, seeds, robust_overrides)
    path = Path(out) / f"{name}-{scale}{tag}.md"
    write_text_atomic(path, markdown(TABLES[name], scale, cells, paper.load(), pixels))
    write_text_atomic(path.with_suffix(".csv"), tables.csv_text(
        [{"column": c.column.name, "row": c.row.key, "seed": c.seed, "run": c.result["run_dir"],
          **{k: v for k, v in c.result.items() if k in RUN_KEYS or _robust_column(k)}}
         for c in cells], ["column", "row", "seed", "run", *RUN_KEYS,
                           *dict.fromkeys(k for c in cells for k in c.result if _robust_column(k))]))  # fmt: skip
    log(f"written: {path}")
    return path


def _file_safe(name: str) -> str:
    """A column's name as a file name part: ``MNIST short`` -> ``MNIST_short``, ``MNIST->FMNIST``
    -> ``MNIST-to-FMNIST`` (no spaces or shell metacharacters in the table's path)."""
    return re.sub(r"[^A-Za-z0-9+._-]", "_", name.replace("->", "-to-"))


def _file_tag(epochs, rows, columns, overrides, seeds=None, robust_overrides=()) -> str:
    """A narrowed or shrunk campaign writes its own table (and holds its own lock), never over the
    full one: ``--seeds 0`` must not replace the three-seed table with a one-seed one."""
    tag = f"-e{epochs}" if epochs is not None else ""
    chosen = tuple(parse_seeds(seeds)) if seeds is not None else DEFAULT_SEEDS
    tag += ("-seeds-" + "+".join(map(str, chosen)) if chosen != DEFAULT_SEEDS else "")
    tag += ("-rows-" + "+".join(rows) if rows else "")
    tag += ("-columns-" + "+".join(map(_file_safe, columns)) if columns else "")
    if overrides:
        tag += "-set" + hashlib.sha256(" ".join(overrides).encode()).hexdigest()[:6]
    if robust_overrides:
        tag += "-robust" + hashlib.sha256(" ".join(robust_overrides).encode()).hexdigest()[:6]
    return tag


# ----------------------------------------------------------------------------- the table


def _stat(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{mean(values):.2f} ± {sample_std(values):.2f}"


def _metrics(spec: Table, cells: list[Cell]) -> list[tuple[str, str, str | None]]:
    """(result key, title, paper metric) of the table's columns."""
    if not spec.robust:
        return [(LINEAR_METRICS[0][0], LINEAR_METRICS[0][1], None),
                (LINEAR_METRICS[1][0], LINEAR_METRICS[1][1], "-")]  # fmt: skip
    keys = list(dict.fromkeys(k for c in cells for k in c.result if robust_key(k)))
    # by protocol, each protocol's attacks in robust-eval's order (its config's: 8/255 first)
    keys.sort(key=lambda k: ["LE", "r-LE", "AT"].index(k.split(" ")[0]))
    out = []
    for k in keys:
        protocol, metric = k.split(" ", 1)
        paper = None if protocol in ("LE", "AT") else "-"
        if paper is None:
            paper = "A_nat" if metric == "A_nat" else ("PGD" if k == _first_attack(keys, protocol) else "-")
        out.append((k, k, paper))
    return out


def _first_attack(keys: list[str], protocol: str) -> str | None:
    attacks = [k for k in keys if k.startswith(protocol + " PGD-")]
    return attacks[0] if attacks else None


PaperValues = dict[tuple[str, str, str], float]  # (column, row, result key) -> the paper's number


def markdown(
    spec: Table, scale: str, cells: list[Cell], numbers: dict[str, dict],
    pixels: dict[str, dict] | None = None,
) -> str:  # fmt: skip
    """The table's markdown; ``numbers``: every paper number (``paper.load()``); the controls:
    each cell's ``untrained`` numbers and ``pixels`` (column name -> the raw-pixel control)."""
    parts = [f"# {spec.title}", "", f"Claim ({spec.paper}): {spec.claim}.", ""]
    values: PaperValues = {}
    setting_notes: dict[str, str] = {}
    for column in dict.fromkeys(c.column for c in cells):
        group = [c for c in cells if c.column is column]
        parts += [f"## {column.name} (scale {scale}; the paper's numbers: its {column.paper_column} "
                  "column)", "", f"Budget: {budget(column, group[0].prep.cfg, [c.prep.cfg['optimizer']['batch_size'] for c in group])}; "  # fmt: skip
                  f"seeds {' '.join(str(s) for s in dict.fromkeys(c.seed for c in group))}.", ""]
        metrics = [m for m in _metrics(spec, group) if any(m[0] in c.result for c in group)]
        parts.append("| row | " + " | ".join(title for _, title, _ in metrics) + " |")
        parts.append("|---|" + "---|" * len(metrics))
        for row in dict.fromkeys(c.row for c in group):
            mine = [c for c in group if c.row is row]
            cfg = mine[0].prep.cfg if mine[0].prep is not None else None
            cells_text = []
            for key, _, metric in metrics:
                measured = [float(c.result[key]) for c in mine if isinstance(c.result.get(key), (int, float))]
                if not measured:
                    cells_text.append("-")
                    continue
                protocol = key.split(" ")[0] if spec.robust else None
                skip = metric == "-" or (spec.robust and (protocol == "AT") != row.finetune)
                own, shown = (None, None) if skip else paper.resolve(
                    numbers, spec.name, row.key, column.paper_column, metric, cfg)
                mark = MARK if spec.robust and _masked([c.result for c in mine], key) else ""
                cells_text.append(_stat(measured) + mark + paper.beside(own, shown))
                if shown is not None and shown.value is not None:
                    values[(column.name, row.key, key)] = shown.value
                if own is not None and shown is not own and cfg is not None:
                    setting_notes[row.title] = paper.setting_note(row.title, own, shown, cfg)
            parts.append(f"| {row.title} | " + " | ".join(cells_text) + " |")
        for key, title in spec.untrained:
            if any(r.key == key for r in column.rows):  # trained at this scale
                continue
            beside = paper.beside(*paper.resolve(numbers, spec.name, key, column.paper_column,
                                                 None if not spec.robust else "A_nat", None))
            parts.append(f"| {title} | not trained here{beside} |" + " |" * (len(metrics) - 1))
        parts += _control_rows(group, metrics, (pixels or {}).get(column.name))
        parts += ["", *_pairs_text(group, metrics, values), *_best_text(spec, group, metrics, values)]
        parts += _gain_text(group, metrics if spec.robust else None)
        note = ((pixels or {}).get(column.name) or {}).get("note")
        parts += [note, ""] if note else []
    parts += _across_text(spec, cells, values)
    parts += _claims_legend(spec, scale, cells)
    entry = numbers.get(spec.name)
    if entry is not None:
        parts += [f"Paper numbers: {entry['source'].strip()} (solo_hyper/reproduce/paper_numbers.yaml), "
                  "each beside the runs that have its setting; 'paper' in a pair is the paper's "
                  "own difference at the runs' settings.", ""]  # fmt: skip
    if setting_notes:
        parts += ["Settings the paper's table differs in:", "", *setting_notes.values(), ""]
    rows = [c.result for c in cells if c.result]
    if rows and not spec.robust:
        parts += [notes(rows, [(k, t) for k, t in LINEAR_METRICS]), ""]
    if spec.robust:
        parts += _diagnostics_text(cells, pixels)
        parts += ["LE: linear head on clean features; r-LE: head trained on PGD-10 examples; AT: "
                  "encoder and head fine-tuned adversarially (Madry et al.); A_nat clean accuracy, "
                  "PGD-20 white-box l_inf accuracy at each eps, AA AutoAttack's (Croce & Hein, "
                  "standard version: the point-wise worst case over APGD-CE, APGD-T, FAB-T and "
                  "Square) (robust-eval's protocol, "
                  f"{_robust_protocol_text(cells[0])})." + _images_text(cells), ""]
        if any(c.untrained for c in cells):
            parts += ["Controls of a robust table: each row's network at initialisation and the "
                      "raw pixels, put through the row's own robust protocol (LE and r-LE heads "
                      "by robust-eval; for AT, the same adversarial fine-tuning from "
                      "initialisation), `reproduce/robust_runs.py`.", ""]  # fmt: skip
    parts += ["Runs: " + ", ".join(sorted({Path(c.result['run_dir']).name for c in cells if c.result})), "",
              f"Code (the commit each run was trained at): {', '.join(_commits(cells))}. "
              + machine_note(rows), ""]  # fmt: skip
    return "\n".join(parts)


def _robust_protocol_text(cell: Cell) -> str:
    overrides = " ".join(cell.robust_overrides)
    return cell.column.robust_config + (f" with --robust-set {overrides}" if overrides else "")


def _backbone_text(cell: Cell) -> str:
    """The row's backbone as its config has it, e.g. ``small_cnn (batch_norm=False, width=32)``."""
    backbone = (cell.prep.cfg.get("backbone") or {}) if cell.prep is not None else {}
    kwargs = ", ".join(f"{k}={v}" for k, v in sorted((backbone.get("kwargs") or {}).items()))
    return str(backbone.get("name", "?")) + (f" ({kwargs})" if kwargs else "")


def _control_rows(group: list[Cell], metrics, pixels: dict | None) -> list[str]:
    """The controls' lines of a column's table: the untrained backbones (mean ± std over the
    distinct networks), one line per backbone and input where the rows differ in them (EBCLR's
    BatchNorm-free network beside its baselines', RoCL's un-normalised pixels beside SimCLR's),
    and the raw pixels; a control the diagnostics flagged is marked as a row is."""
    lines = []
    for title, results in _controls(group, pixels):
        lines.append(f"| control: {title} | " + " | ".join(
            _stat([float(r[k]) for r in results if isinstance(r.get(k), (int, float))])
            + (MARK if _masked(results, k) else "") for k, _, _ in metrics) + " |")  # fmt: skip
    return lines


def _controls(group: list[Cell], pixels: dict | None) -> list[tuple[str, list[dict]]]:
    """Each control line's title and results: every distinct untrained network per backbone
    and input, then the raw pixels."""
    by_network: dict[str, dict[str, dict]] = {}
    texts = {c.row: (_backbone_text(c), _input_text(c)) for c in group}
    vary = [len({t[i] for t in texts.values()}) > 1 for i in (0, 1)]
    for c in group:
        if c.untrained:  # a fine-tuned row's control is its base row's network, other protocol
            text = ", ".join(t for t, v in zip(texts[c.row], vary, strict=True) if v)
            by_network.setdefault(text, {}).setdefault(c.untrained["run_dir"], {}).update(c.untrained)
    found = [(TITLES[UNTRAINED] + (f", {text}" if text else ""), list(distinct.values()))
             for text, distinct in by_network.items()]  # fmt: skip
    return found + ([(TITLES[PIXELS], [pixels])] if pixels is not None else [])


def _input_text(cell: Cell) -> str:
    """'un-normalised input' where the run's data.mean/std leave the pixels as they are."""
    data = (cell.prep.cfg.get("data") or {}) if cell.prep is not None else {}
    plain = (all(float(m) == 0.0 for m in data.get("mean") or (1,))
             and all(float(s) == 1.0 for s in data.get("std") or (0,)))  # fmt: skip
    return "un-normalised input" if plain else "normalised input"


def _gain_text(group: list[Cell], metrics=None) -> list[str]:
    """Each row's gain over its own untrained backbone, paired over seeds (``metrics``: the
    table's (key, title, paper) columns; default: the linear probe and kNN)."""
    with_control = [c for c in group if c.untrained]
    chosen = None if metrics is None else [(key, title) for key, title, _ in metrics]
    found = gains([{"config": c.row.title, **c.result} for c in with_control],
                  [c.untrained for c in with_control], metrics=chosen)  # fmt: skip
    if not found:
        return []
    lines = ["Gain over the untrained backbone (each run minus its own network at initialisation, "
             "seeded as the run; both evaluated alike, `evaluation/controls.py`; 95% Student-t "
             "interval):", "", *gain_table(found, "row")]  # fmt: skip
    return [*lines, ""]


def _masked(results: list[dict], key: str) -> bool:
    """Whether ``key`` is an attack column of a model (a row's seeds, a control's networks) the
    diagnostics flagged in any of ``results``."""
    protocol, _, metric = key.partition(" ")
    return is_attack(metric) and any(
        str(r.get(f"{protocol} masking", "")).startswith("FLAGGED") for r in results)


def _diagnostics_text(cells: list[Cell], pixels: dict[str, dict] | None = None) -> list[str]:
    """Each model's gradient-masking verdict over the seeds (robust-eval's diagnostics.md), then
    each control's over its networks."""
    lines = []
    for row in dict.fromkeys(c.row for c in cells):
        mine = [c for c in cells if c.row is row and c.result]
        for protocol in ("LE", "r-LE", "AT"):
            verdicts = [(c.seed, c.result.get(f"{protocol} masking")) for c in mine]
            verdicts = [(seed, v) for seed, v in verdicts if v]
            if not verdicts:
                continue
            bad = [f"seed {seed}: {v}" for seed, v in verdicts if v.startswith("FLAGGED")]
            seeds = " ".join(str(seed) for seed, _ in verdicts)
            strength = [f"seed {c.seed}: {c.result[f'{protocol} strength']}" for c in mine
                        if c.result.get(f"{protocol} strength")]  # fmt: skip
            lines.append(f"- {row.title} ({protocol}): " + ("; ".join(bad) if bad else
                         f"passed (seeds {seeds})") + (f"; stronger attacks than PGD-20: "
                         f"{'; '.join(strength)}" if strength else ""))  # fmt: skip
    for column in dict.fromkeys(c.column for c in cells):
        group = [c for c in cells if c.column is column]
        for title, results in _controls(group, (pixels or {}).get(column.name)):
            for protocol in ("LE", "r-LE", "AT"):
                verdicts = [str(r[f"{protocol} masking"]) for r in results if r.get(f"{protocol} masking")]
                if verdicts:
                    lines.append(f"- control: {title} ({protocol}): {_control_verdict(verdicts)}")
    if not lines:
        return []
    return ["Gradient-masking diagnostics (each run's robust/diagnostics.md, docs/robustness.md: "
            "Square at 5,000 queries vs white-box, PGD at the unbounded eps 0.5 vs chance, "
            "accuracy monotone in eps, transfer from the Euclidean twin, input-gradient norms); "
            f"{MARK} marks the robust columns of a model flagged in any seed. Then the drop "
            "from PGD-20 to PGD-200, to PGD-20 x10 restarts and to AutoAttack, each on its own:",
            "", *lines, ""]  # fmt: skip


def _control_verdict(verdicts: list[str]) -> str:
    """A control's verdict over its networks: the flags and how many networks had them, or
    'passed (N networks)'."""
    bad = [v for v in verdicts if v.startswith("FLAGGED")]
    n = len(verdicts)
    if not bad:
        return f"passed ({n} network{'s' * (n > 1)})"
    return "; ".join(bad) + (f" ({len(bad)} of {n} networks)" if n > 1 else "")


def _claims_legend(spec: Table, scale: str, cells: list[Cell]) -> list[str]:
    """What each printed pair's two configs differ in (checked by ``plan`` before any run)."""
    present = {(c.column.name, c.row.key) for c in cells}
    lines = [f"the best {p.about} against every other: {p.about}" if p.best else f"{p.title}: {p.about}"
             for p in pairs.table_pairs(spec, scale)
             if {(p.column_a.name, p.row_a.key), (p.column_b.name, p.row_b.key)} <= present]  # fmt: skip
    if not lines:
        return []
    return ["Each pair's two configs differ only in what its claim is about (checked before any "
            "run; docs/fairness.md): " + "; ".join(dict.fromkeys(lines)) + ".", ""]  # fmt: skip


def _commits(cells: list[Cell]) -> list[str]:
    found = []
    for c in cells:
        info = Path(c.result.get("run_dir", "")) / "run.json"
        commit = json.loads(info.read_text()).get("code", {}).get("git_commit") if info.is_file() else None
        found.append((commit or "unknown")[:7])
    return list(dict.fromkeys(found))


def _compared_keys(row: Row, key: str, title: str) -> list[tuple[str, str]]:
    """(baseline's result key, metric title) each of ``row``'s results is paired with: the same
    key, except a fine-tuned row's AT accuracy, which stands against the baseline's linear
    evaluations at the same attack (the paper's "AT improves RHCL further")."""
    if not (row.finetune and key.startswith("AT ")):
        return [(key, title)]
    attack = key[len("AT "):]
    return [(f"{p} {attack}", f"{key} vs {p}") for p in ("LE", "r-LE")]


@dataclass
class _Comparison:
    """One printed pair on one metric: A's and B's values over the seeds both measured."""

    name_a: str
    name_b: str
    title: str
    a: list[float]
    b: list[float]
    paper_a: float | None = None
    paper_b: float | None = None
    family: str = ""  # one claim over several pairs: Holm-adjusted together


def _comparison(a: dict, b: dict, key_a: str, key_b: str, name_a: str, name_b: str, title: str,
                paper_a: float | None = None, paper_b: float | None = None,
                family: str = "") -> _Comparison | None:
    """A's ``key_a`` against B's ``key_b`` over the seeds both measured (``a`` and ``b`` map
    seed -> result), or None when no seed has both."""
    seeds = [s for s in a if s in b and isinstance(a[s].get(key_a), (int, float))
             and isinstance(b[s].get(key_b), (int, float))]  # fmt: skip
    if not seeds:
        return None
    return _Comparison(name_a, name_b, title, [float(a[s][key_a]) for s in seeds],
                       [float(b[s][key_b]) for s in seeds], paper_a, paper_b, family)  # fmt: skip


def _intervals(comparisons: list[_Comparison]) -> list[Interval]:
    """Each comparison's interval: 95% alone, Holm-adjusted within its family and metric."""
    out: list[Interval | None] = [None] * len(comparisons)
    families: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(comparisons):
        if c.family:
            families.setdefault((c.family, c.title), []).append(i)
        else:
            out[i] = paired_interval(c.a, c.b)
    for members in families.values():
        for i, iv in zip(members, holm_intervals([(comparisons[i].a, comparisons[i].b) for i in members])):
            out[i] = iv
    return out  # type: ignore[return-value]


def _lines(comparisons: list[_Comparison]) -> list[str]:
    """The pair table's lines, then one verdict per claim over several pairs."""
    intervals, lines = _intervals(comparisons), []
    for c, iv in zip(comparisons, intervals):
        ci = "-" if iv.low is None else f"[{iv.low:+.2f}, {iv.high:+.2f}]"
        if c.family:
            ci += f" Holm {sum(x.family == c.family and x.title == c.title for x in comparisons)}"
        gap = "-" if c.paper_a is None or c.paper_b is None else f"{c.paper_a - c.paper_b:+.2f}"
        lines.append(f"| {c.name_a} - {c.name_b} | {c.title} | {len(c.a)} | {iv.mean:+.2f} | {ci} | "
                     f"{verdict(iv, c.name_a, c.name_b)} | {gap} |")  # fmt: skip
    return lines


def _family_verdicts(comparisons: list[_Comparison]) -> list[str]:
    """'claim (metric): holds against every pair' only when every Holm-adjusted interval of the
    claim's pairs excludes 0 with A ahead; else which pairs are within noise or reversed."""
    intervals, out = _intervals(comparisons), []
    keys = dict.fromkeys((c.family, c.title) for c in comparisons if c.family)
    for family, title in keys:
        members = [(c, iv) for c, iv in zip(comparisons, intervals) if (c.family, c.title) == (family, title)]
        if any(iv.within_noise is None for _, iv in members):
            out.append(f"- {family} ({title}): needs >= 2 seeds in every pair.")
            continue
        noise = [c.name_b for c, iv in members if iv.within_noise]
        reversed_ = [c.name_b for c, iv in members if not iv.within_noise and iv.mean < 0]
        if not noise and not reversed_:
            out.append(f"- {family} ({title}): **holds against every pair** ({len(members)}, "
                       "Holm-adjusted).")  # fmt: skip
            continue
        parts = [f"within noise against {', '.join(noise)}"] if noise else []
        parts += [f"reversed against {', '.join(reversed_)}"] if reversed_ else []
        out.append(f"- {family} ({title}): **not resolved**: {'; '.join(parts)} (Holm-adjusted "
                   f"over {len(members)} pairs).")  # fmt: skip
    return out


def _results(cells: list[Cell], column: str, row: str) -> dict[int, dict]:
    return {c.seed: c.result for c in cells if c.column.name == column and c.row.key == row}


PAIR_HEADER = "| pair (A - B) | metric | seeds | mean | 95% interval | verdict | paper |"
PAIR_RULE = "|---|---|---|---|---|---|---|"
HOLM_NOTE = ("'Holm m': the interval is Holm-adjusted over the m pairs of one claim (family-wise "
             "95%: the pair with the k-th smallest p-value at 1 - 0.05/(m - k + 1), stepping down "
             "as Holm's procedure), so it excludes 0 exactly when Holm rejects; a claim over "
             "several pairs holds only when every one of them does.")  # fmt: skip


def _table(intro: str, comparisons: list[_Comparison]) -> list[str]:
    if not comparisons:
        return []
    out = [intro, "", PAIR_HEADER, PAIR_RULE, *_lines(comparisons), ""]
    verdicts = _family_verdicts(comparisons)
    if verdicts:
        out += [*verdicts, "", HOLM_NOTE, ""]
    return out


def _across_text(spec: Table, cells: list[Cell], values: PaperValues | None = None) -> list[str]:
    """The table's pairs across two columns (same seed, the table's metrics)."""
    values = values or {}
    comparisons = []
    for pair in spec.across:
        col_a, row_a, col_b, row_b = pair.column_a, pair.row_a, pair.column_b, pair.row_b
        first_a, first_b = (next((c for c in cells if c.column.name == col and c.row.key == key), None)
                            for col, key in ((col_a, row_a), (col_b, row_b)))  # fmt: skip
        if first_a is None or first_b is None:
            continue
        a, b = _results(cells, col_a, row_a), _results(cells, col_b, row_b)
        name_a, name_b = f"{first_a.row.title} ({col_a})", f"{first_b.row.title} ({col_b})"
        for key, title, _ in _metrics(spec, [first_a, first_b]):
            comparisons.append(_comparison(a, b, key, key, name_a, name_b, title,
                                           values.get((col_a, row_a, key)),
                                           values.get((col_b, row_b, key)), pair.family))  # fmt: skip
    comparisons = [c for c in comparisons if c is not None]
    if not comparisons:
        return []
    return ["## Across columns", "", *_table("Paired over the seeds both ran (95% Student-t "
                                             "interval):", comparisons)]  # fmt: skip


def _pairs_text(group: list[Cell], metrics, values: PaperValues | None = None) -> list[str]:
    values = values or {}
    comparisons = []
    group_rows = list(dict.fromkeys(c.row for c in group))
    column = group[0].column.name
    for row in group_rows:
        a = {c.seed: c.result for c in group if c.row is row}
        for claim in row.claims:
            base = next((r for r in group_rows if r.key == claim.baseline), None)
            if base is None:
                continue
            b = {c.seed: c.result for c in group if c.row is base}
            for key, metric, _ in metrics:
                for base_key, title in _compared_keys(row, key, metric):
                    comparisons.append(_comparison(
                        a, b, key, base_key, row.title, base.title, title,
                        values.get((column, row.key, key)), values.get((column, base.key, base_key)),
                        claim.family))  # fmt: skip
    return _table("Paired differences over the seeds both ran (95% Student-t interval; 'within "
                  "noise' when it holds 0):", [c for c in comparisons if c is not None])  # fmt: skip


def _best_text(spec: Table, group: list[Cell], metrics, values: PaperValues) -> list[str]:
    """The table's Best claim: the highest mean against every other row, Holm-adjusted; "best"
    only when resolved against all of them."""
    best = spec.best
    rows = [r for r in dict.fromkeys(c.row for c in group) if best is not None and r.key in best.rows]
    if len(rows) < 2:
        return []
    column = group[0].column.name
    results = {r.key: {c.seed: c.result for c in group if c.row is r} for r in rows}
    out = [f"Which {best.about} is best: the highest mean against "
           "every other row (Holm-adjusted over those pairs); best only when resolved against "
           f"all of them. The paper's best: {next((r.title for r in rows if r.key == best.claimed), best.claimed)}.",
           "", PAIR_HEADER, PAIR_RULE]  # fmt: skip
    sentences = []
    for key, title, _ in metrics:
        means = {r.key: mean(v) for r in rows
                 if (v := [float(x[key]) for x in results[r.key].values()
                           if isinstance(x.get(key), (int, float))])}  # fmt: skip
        if len(means) < 2:
            continue
        top = next(r for r in rows if r.key == max(means, key=means.get))
        family = f"{top.title} is the best {best.about}"
        comparisons = [c for c in (
            _comparison(results[top.key], results[r.key], key, key, top.title, r.title, title,
                        values.get((column, top.key, key)), values.get((column, r.key, key)), family)
            for r in rows if r is not top and r.key in means) if c is not None]  # fmt: skip
        out += _lines(comparisons)
        intervals = _intervals(comparisons)
        tied = [c.name_b for c, iv in zip(comparisons, intervals) if iv.within_noise is not False]
        if not tied:
            sentences.append(f"- {title}: **{top.title} is best**, resolved against every other "
                             f"row ({len(comparisons)} pairs, Holm-adjusted).")  # fmt: skip
        else:
            sentences.append(f"- {title}: **no best resolved**: {top.title} has the highest mean "
                             f"({means[top.key]:.2f}) but is within noise of {', '.join(tied)} "
                             "(Holm-adjusted).")  # fmt: skip
    if not sentences:
        return []
    return [*out, "", *sentences, "", HOLM_NOTE, ""]


__all__ = ["dry_run_text", "launch_text", "listing", "plan", "reproduce", "table"]
