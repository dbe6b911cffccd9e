"""A run directory before any work: new, resume, finished, extend, or another config's (refused).

``plan_run`` decides from ``config.yaml``/``result.json``/checkpoints without writing anything;
``open_run`` then creates or reopens the directory (``config.yaml``, ``run.json``).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from solo_hyper.config import ConfigError, loggers
from solo_hyper.run.checkpoints import newest_checkpoint, resolve_checkpoint
from solo_hyper.run.identity import (
    code_version,
    config_diff,
    config_hash,
    read_run_config,
    write_json_atomic,
    write_yaml_atomic,
)


class RunConfigMismatch(ConfigError):
    """The run directory holds a run of another config."""


@dataclass
class RunPlan:
    """What ``pretrain`` will do with a run directory, decided before any data loads."""

    run_dir: Path
    status: str  # "new" | "resume" | "finished" | "extend" (more epochs for the same run)
    config_hash: str
    resume: Path | None = None
    result: dict | None = None
    previous: dict | None = None  # "extend": the config the run was trained with so far


def run_directory(cfg: dict, suffix: str = "") -> Path:
    return Path(cfg["checkpoint"]["dir"]) / ((cfg["name"] or cfg["method"]) + suffix)


def mismatch_message(run_dir: Path, stored: dict, cfg: dict) -> str:
    rows = config_diff(stored, cfg)
    lines = [f"  {key}: {old!r} -> {new!r}" for key, old, new in rows[:20]]
    if len(rows) > 20:
        lines.append(f"  ... and {len(rows) - 20} more")
    name = cfg["name"] or cfg["method"]
    return (
        f"{run_dir} holds a run of another config (hash {config_hash(stored)}; this config: "
        f"{config_hash(cfg)}); the keys that differ (old -> new):\n" + "\n".join(lines) + "\n"
        f"Nothing was changed. To train this config as a new run, give it another name "
        f"(name={name}-2) or checkpoint.dir, or pass --new-run (a run directory named after the "
        "config hash); to continue the old run, use its config (config.yaml in the run directory)."
    )


def longer_budget(stored: dict, cfg: dict) -> bool:
    """Whether ``cfg`` is the stored run's config with only a larger ``max_epochs``: the one
    change that continues a run (solo-learn's way of training on) instead of making a new one."""
    keys = [key for key, _, _ in config_diff(stored, cfg)]
    return keys == ["max_epochs"] and int(cfg["max_epochs"]) > int(stored["max_epochs"])


def plan_run(cfg: dict, on_mismatch: str = "error") -> RunPlan:
    """Decides new / resume / finished for the run directory of ``cfg`` (nothing is written).

    ``on_mismatch``: "error" refuses a directory holding another config's run, except a larger
    ``max_epochs``, which trains that run on ("extend", pretrain's solo-learn way); "new" uses the
    directory ``<name>-<config hash>`` instead (compare, sweep, reproduce and ``--new-run``), a
    larger ``max_epochs`` included: a table's cell must be its budget trained from the start, and a
    run trained on is not (its first epochs followed the shorter run's learning-rate schedule).
    """
    digest = config_hash(cfg)
    run_dir = run_directory(cfg)
    stored = read_run_config(run_dir)
    extendable = on_mismatch == "error" and stored is not None and config_hash(stored) != digest
    if extendable and longer_budget(stored, cfg):
        resume = newest_checkpoint(run_dir, cfg["method"]) if cfg["auto_resume"]["enabled"] else None
        if resume is not None:
            return RunPlan(run_dir, "extend", digest, resume=resume, previous=stored)
    if stored is not None and config_hash(stored) != digest:
        if on_mismatch != "new":
            raise RunConfigMismatch(mismatch_message(run_dir, stored, cfg))
        run_dir = run_directory(cfg, f"-{digest[:8]}")
        stored = read_run_config(run_dir)
        if stored is not None and config_hash(stored) != digest:  # pragma: no cover - collision
            raise RunConfigMismatch(mismatch_message(run_dir, stored, cfg))
    result_path = run_dir / "result.json"
    if stored is not None and result_path.is_file():
        try:
            result = json.loads(result_path.read_text())
        except ValueError:  # a result.json of an older version with NaN in it
            result = None
        if result and result.get("finished") and result.get("config_hash") == digest:
            return RunPlan(run_dir, "finished", digest, result=result)
        if result and "config_hash" not in result and result.get("epochs") == cfg["max_epochs"]:
            # written by an older version (no hash): config.yaml matched, the run had finished
            return RunPlan(run_dir, "finished", digest, result=result)
    resume = None
    if cfg["auto_resume"]["enabled"]:
        resume = newest_checkpoint(run_dir, cfg["method"])
    elif newest_checkpoint(run_dir, verify=False) is not None:
        raise ConfigError(
            f"{run_dir} holds checkpoints of an unfinished run and auto_resume.enabled=false "
            "would train over them from the start; set auto_resume.enabled=true to continue it, "
            "or give the new run another name"
        )
    if resume is None and cfg["resume_from_checkpoint"]:
        resume = resolve_checkpoint(cfg["resume_from_checkpoint"])
    return RunPlan(run_dir, "resume" if resume else "new", digest, resume=resume)


def open_run(plan: RunPlan, cfg: dict) -> dict:
    """Creates (or reopens) the run directory: config.yaml and run.json (hash, code, wandb id)."""
    run_dir = plan.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    info_path = run_dir / "run.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    changed = not info
    if plan.status == "extend":  # the run now is the longer config; its history says so
        old_epochs = plan.previous["max_epochs"]
        if (run_dir / "result.json").is_file():  # the shorter run's numbers are kept
            (run_dir / "result.json").replace(run_dir / f"result.max_epochs={old_epochs}.json")
        history = info.get("history", [])
        history.append({"config_hash": info.get("config_hash"), "max_epochs": old_epochs})
        info = {**info, "config_hash": plan.config_hash, "history": history}
        write_yaml_atomic(run_dir / "config.yaml", cfg)
        changed = True
    if not (run_dir / "config.yaml").is_file():  # a resumed run keeps the original
        write_yaml_atomic(run_dir / "config.yaml", cfg)
    if not info:
        info = {"config_hash": plan.config_hash, "code": code_version(),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}  # fmt: skip
    if "wandb" in loggers(cfg) and not info.get("wandb_id"):
        info["wandb_id"], changed = uuid.uuid4().hex[:12], True
    if changed:
        write_json_atomic(info_path, info)
    return info
