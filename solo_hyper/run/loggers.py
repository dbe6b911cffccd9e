"""Experiment loggers of a run (csv, tensorboard, wandb), all inside the run directory, each given
the full resolved config as hyperparameters."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from solo_hyper.config import ConfigError, loggers
from solo_hyper.solo import adapter

pl = adapter.LIGHTNING


LOGGER_PACKAGES = {"wandb": ("wandb",), "tensorboard": ("tensorboard", "tensorboardX")}


def check_logger_packages(names: list[str]) -> None:
    for name in names:
        packages = LOGGER_PACKAGES.get(name, ())
        if packages and not any(importlib.util.find_spec(p) for p in packages):
            raise ConfigError(
                f"logger {name!r} needs the {packages[0]} package, which is not installed: "
                f"pip install {packages[0]} (or drop it from logger)"
            )


# config keys that are Trainer argument names but are handled here, not passed through
class LogConfig(pl.Callback):
    """Logs the full resolved config as every logger's hyperparameters (CSV ``hparams.yaml``,
    the wandb run config, TensorBoard hparams)."""

    def __init__(self, cfg: dict, extra: dict) -> None:
        self.params = {**cfg, **extra}

    def on_fit_start(self, trainer, pl_module) -> None:
        for logger in trainer.loggers:
            logger.log_hyperparams(self.params)
            logger.save()


def build_loggers(cfg: dict, run_dir: Path, run_info: dict) -> list:
    """csv (``logs/``), tensorboard (``tb_logs/``), wandb (files in ``wandb/`` of the run
    directory, its run id kept in run.json so that a resumed run continues the same wandb run)."""
    out: list = []
    for name in loggers(cfg):
        if name == "csv":
            out.append(pl.loggers.CSVLogger(save_dir=str(run_dir), name="logs"))
        elif name == "tensorboard":
            out.append(pl.loggers.TensorBoardLogger(save_dir=str(run_dir), name="tb_logs"))
        elif name == "wandb":
            w = cfg["wandb"]
            out.append(
                pl.loggers.WandbLogger(
                    name=cfg["name"] or cfg["method"], project=w["project"], entity=w["entity"],
                    offline=w["offline"], save_dir=str(run_dir), id=run_info["wandb_id"],
                    resume="allow",
                )  # fmt: skip
            )
    return out
