"""One-command sweeps of any dotted config key, each run evaluated with the comparison protocol.

``python -m solo_hyper sweep PRESET|dotted.key --configs A.yaml [B.yaml ...] [--values v1 v2 ...]
--epochs N --out DIR [--set k=v ...] [--linear-epochs N]``

Presets (key and default values):
- ``curvature``: method_kwargs.curvature, c = 0.1 ... 1.0 (HCL's Table 4 / Fig. 3);
- ``normalize``: method_kwargs.normalize, on / off before expmap0 (HCL's ablation, section 4.4);
- ``lambda2``: method_kwargs.lambda2, EBCLR's weight of the generative term (its Fig. 3a);
- ``rho``: method_kwargs.rho, EBCLR's replay-buffer restart ratio (floor(B rho) restarts a step);
- ``batch_size``: optimizer.batch_size 16 / 64 / 128 (EBCLR against SimCLR: pass both configs);
- ``temperature``: method_kwargs.temperature.
Every (config, value) cell is validated before the first one trains; finished cells are reused.
Writes ``DIR/sweep-<key>.md``, ``.csv`` and ``.png`` (offline linear and kNN top-1 against the
value) and ``DIR/curves.png`` (the per-step training curves of every cell).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from solo_hyper.campaigns.compare import (
    check_linear,
    control_plan,
    run_jobs,
    run_name,
    stderr_line,
    with_controls,
    write_tables,
)
from solo_hyper.campaigns.runs import Protocol, evaluated_row, finished_row
from solo_hyper.config import ConfigError, closest
from solo_hyper.evaluation.plots import sweep_plot, training_curves
from solo_hyper.launch.dispatch import Launch, Progress, dispatch
from solo_hyper.run.lock import holding
from solo_hyper.run.train import Prepared, prepare
from solo_hyper.solo import adapter

PRESETS: dict[str, tuple[str, list[Any]]] = {
    "curvature": ("method_kwargs.curvature", [round(0.1 * i, 1) for i in range(1, 11)]),
    "normalize": ("method_kwargs.normalize", [True, False]),
    "lambda2": ("method_kwargs.lambda2", [0.0, 0.01, 0.1, 1.0]),
    "rho": ("method_kwargs.rho", [0.2, 0.4, 0.6, 0.8]),
    "batch_size": ("optimizer.batch_size", [16, 64, 128]),
    "temperature": ("method_kwargs.temperature", [0.05, 0.1, 0.2, 0.5]),
}
COLUMNS = [
    ("config", "config"),
    ("value", "value"),
    ("method", "method"),
    ("epochs", "epochs"),
    ("linear_acc1", "linear top-1"),
    ("knn_top1", "kNN top-1"),
    ("knn_coarse_top1", "kNN coarse top-1"),
    ("relative_delta", "delta_rel"),
    ("wall_time_s", "wall time (s)"),
    ("images_per_s", "images/s"),
]


def resolve_sweep(target: str, values: list[str] | None) -> tuple[str, list[Any]]:
    """(dotted key, parsed values) of a preset name or a dotted key (values parsed as YAML)."""
    if target in PRESETS:
        key, default = PRESETS[target]
    elif "." in target:
        key, default = target, None
    else:
        raise ConfigError(
            f"unknown sweep {target!r}{closest(target, PRESETS)}: give a preset "
            f"({', '.join(PRESETS)}) or a dotted config key such as method_kwargs.temperature"
        )
    parsed = [yaml.safe_load(v) if isinstance(v, str) else v for v in values] if values else default
    if not parsed:
        raise ConfigError(f"sweep over {key}: give the values with --values v1 v2 ...")
    if len({repr(v) for v in parsed}) != len(parsed):
        raise ConfigError(f"sweep over {key}: the values {parsed} repeat one")
    return key, parsed


def cell_name(config: str, key: str, value: Any) -> str:
    """'fashionmnist-hcl-curvature=0.5' (a run directory name: no path separators)."""
    return f"{run_name(config)}-{key.split('.')[-1]}={value}".replace("/", "_")


def plan(
    target: str, configs: list[str], out_dir: str, values: list[str] | None = None,
    epochs: int | None = None, overrides: list[str] = (),
) -> tuple[str, list[tuple[str, Any, Prepared]]]:  # fmt: skip
    """The swept key and every (config, value) cell as (run name, value, prepared run), each
    config checked with its value before anything trains."""
    key, parsed = resolve_sweep(target, values)
    cells = []
    for config in configs:
        for value in parsed:
            extra = [f"checkpoint.dir={out_dir}", f"name={cell_name(config, key, value)}", *overrides]
            extra.append(f"{key}={json.dumps(value)}")  # JSON is YAML
            if epochs is not None:
                extra.append(f"max_epochs={epochs}")
            try:
                prep = prepare(config, extra)
            except ConfigError as err:
                raise ConfigError(f"{config} with {key}={value}: {err}") from None
            cells.append((run_name(config), value, prep))
    return key, cells


@holding("out_dir", "sweep output")
def sweep(
    target: str, configs: list[str], out_dir: str, values: list[str] | None = None,
    epochs: int | None = None, overrides: list[str] = (), quiet: bool = False,
    linear_epochs: int | None = None, linear_config_path: str | None = None, device: str = "auto",
    controls: bool = True, eval_budget: str = "full", launch: Launch | None = None,
    log: Callable[[str], None] = stderr_line,
) -> list[dict]:  # fmt: skip
    """Trains (or reuses) and evaluates every (config, value) cell (on ``eval_budget``'s sets,
    ``protocol.EVAL_BUDGETS``), with each cell's untrained backbone and the raw pixels beside
    (``controls``); writes the table and plot. ``launch``: as ``compare``'s."""
    key, cells = plan(target, configs, out_dir, values, epochs, overrides)
    out = Path(out_dir)
    preps = [prep for _, _, prep in cells]
    check_linear(preps, linear_epochs, linear_config_path, None, eval_budget)
    protocol = Protocol(linear_epochs, linear_config_path, False, device, None, eval_budget)
    titles = [f"{config} {key}={value} seed {int(prep.cfg['seed'])}" for config, value, prep in cells]
    wanted = control_plan(preps, out, protocol) if controls else None
    dispatch([*run_jobs(preps, protocol, titles), *(wanted.jobs if wanted else [])],
             launch or Launch(), out, log, Progress("sweep", quiet))  # fmt: skip
    rows = [{**evaluated_row(finished_row(prep), protocol), "config": config, "value": value}
            for config, value, prep in cells]  # fmt: skip
    stem = f"sweep-{key.split('.')[-1]}"
    extra = ""
    if wanted is not None:  # each cell's gain is over its own untrained backbone
        extra, _ = with_controls(rows, wanted,
                                 label=lambda r: f"{r['config']} {key.split('.')[-1]}={r['value']}")  # fmt: skip
    write_tables(rows, out, stem, COLUMNS, extra)
    sweep_plot(
        rows, key, [("linear_acc1", "offline linear top-1"), ("knn_top1", "offline kNN top-1"),
                    ("knn_coarse_top1", "offline kNN coarse top-1")], out / f"{stem}.png",
    )  # fmt: skip
    groups = {f"{r['config']} {key.split('.')[-1]}={r['value']}": [Path(r["run_dir"])] for r in rows}
    training_curves(groups, out / "curves.png", 1.0 if adapter.KNN_PERCENT else 100.0)
    return rows
