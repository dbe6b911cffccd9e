"""What run-solo changes in solo-learn main's own launchers while one runs (``launch_hooks``).

solo main's ``main_pretrain.py`` / ``main_linear.py`` read their config with ``parse_cfg``, make
their datasets with ``prepare_datasets`` / ``prepare_transforms`` and train with ``Trainer.fit``:
the hooks wrap those, and give every solo method this plugin's base (``adapter.plugin_class``).
Only ``cli/run_solo.py`` uses this module, and only under solo main (1.0.2's launchers cannot run
on Lightning 1.9: run-solo refuses them first).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from solo.methods import METHODS
from solo.utils.misc import omegaconf_select

from solo_hyper.config import ConfigError
from solo_hyper.solo import adapter
from solo_hyper.solo.v2 import plain

pl = adapter.LIGHTNING

class RawImages:
    """PIL image -> uint8 tensor (C, H, W), resized to ``size`` when given: what solo's datasets
    yield when the crops are made on the device (``data.augment_on_device=true``)."""

    def __init__(self, size: int | None = None) -> None:
        from torchvision import transforms

        steps = [transforms.Resize(size), transforms.CenterCrop(size)] if size else []
        self.transform = transforms.Compose([*steps, transforms.PILToTensor()])

    def __call__(self, image: Any) -> torch.Tensor:
        return self.transform(image.convert("RGB"))

    def __repr__(self) -> str:
        return f"RawImages({self.transform})"


FIXED_SIZE_DATASETS = ("cifar10", "cifar100", "stl10")


def cpu_devices(cfg: DictConfig) -> None:
    """``devices`` as solo's ``parse_cfg`` needs it (a list: it takes ``len(devices)``); called
    before parse_cfg, so that the plugin's ``devices: 1`` (a count) works as written."""
    devices = omegaconf_select(cfg, "devices", None)
    if isinstance(devices, str) and devices.strip().isdigit():
        devices = int(devices)
    if isinstance(devices, int) and not isinstance(devices, bool):
        cfg.devices = list(range(devices))


def lightning_devices(cfg: DictConfig) -> None:
    """After parse_cfg, on the CPU: Lightning takes a count of processes there (a list of GPU
    ids is an error), and one process needs neither DDP nor synchronised batch norm."""
    if str(omegaconf_select(cfg, "accelerator", "auto")) != "cpu":
        return
    devices = omegaconf_select(cfg, "devices", None)
    if OmegaConf.is_list(devices) or isinstance(devices, list):
        cfg.devices = max(1, len(devices))
    if cfg.devices == 1:
        if str(omegaconf_select(cfg, "strategy", "auto")) == "ddp":
            cfg.strategy = "auto"
        cfg.sync_batchnorm = False


def backbone_from_run(cfg: DictConfig) -> None:
    """main_linear.py: the backbone name and kwargs of the pretraining run, read from the
    ``args.json`` that solo's Checkpointer wrote beside the checkpoint (kwargs given on the
    command line win); a different backbone name is refused with the one to use."""
    ckpt = omegaconf_select(cfg, "pretrained_feature_extractor", None)
    args_json = Path(str(ckpt)).parent / "args.json" if ckpt else None
    if args_json is None or not args_json.is_file():
        return
    trained = json.loads(args_json.read_text()).get("backbone") or {}
    name = trained.get("name")
    given = omegaconf_select(cfg, "backbone.name", None)
    if name and given and given != name:
        raise ConfigError(
            f"{ckpt} was pretrained with backbone {name!r} ({args_json}), the linear config "
            f"builds {given!r}: add backbone.name={name}"
        )
    kwargs = dict(trained.get("kwargs") or {})
    kwargs.update(plain(omegaconf_select(cfg, "backbone.kwargs", None)) or {})
    cfg.backbone.kwargs = kwargs


class RunSummary:
    """Remembers the last ``Trainer.fit`` of a launcher, for the one closing line run-solo prints
    (solo's launchers print none: the numbers are only in Lightning's logs)."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.model: Any = None
        self.started = 0.0

    def line(self) -> str | None:
        trainer, model = self.trainer, self.model
        if trainer is None or not trainer.is_global_zero:
            return None
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
        shown = []
        for key, label, unit in (
            ("train_loss", "loss", ""), ("train_nce_loss", "loss", ""),
            ("val_acc1", "online linear top-1", "%"),
            ("val_knn_acc1", "online kNN top-1 (bank of augmented training crops)", "%"),
        ):  # fmt: skip
            if key in metrics and not any(s.startswith(label + " ") for s in shown):
                shown.append(f"{label} {metrics[key]:.2f}{unit}" if unit else f"{label} {metrics[key]:.4g}")
        epochs = trainer.current_epoch
        cfg = getattr(model, "cfg", None)
        name = omegaconf_select(cfg, "name", None) if cfg is not None else None
        name = name or type(model).__name__
        where = ""
        for callback in trainer.callbacks:
            path = getattr(callback, "path", None)
            if path is not None and type(callback).__name__ == "Checkpointer":
                where = f" -> {path}"
        method = omegaconf_select(cfg, "method", None) if cfg is not None else None
        return (
            f"{name}{f' [{method}]' if method else ''}: {trainer.global_step} steps, {epochs} epoch{'s' if epochs != 1 else ''}, "
            f"{', '.join(shown) or 'no metrics logged'}, {time.time() - self.started:.0f} s{where}"
        )


@contextlib.contextmanager
def launch_hooks() -> Iterator[None]:
    """While one of solo's launchers runs:

    - every solo method in ``METHODS`` gets this plugin's base (``adapter.plugin_class``): the baselines
      accept the same configs as this plugin's methods (``scheduler.name: cosine``) and share its
      online kNN (``AccumulatingKNN``: k capped at the bank, classes not counted from a small
      validation split), so one YAML trains a method and every baseline;
    - ``devices`` may be a count (``devices: 1``, the plugin's spelling) and, on the CPU, is
      handed to Lightning as one (``cpu_devices``, ``lightning_devices``);
    - ``main_linear.py`` takes the backbone kwargs from the run's ``args.json``;
    - with ``data.augment_on_device=true`` solo's training and validation datasets yield
      un-augmented uint8 images, which the method crops, augments and normalises on the device
      (as this plugin's own ``pretrain``), instead of solo's CPU pipeline.

    Yields a ``RunSummary``. Without the switches, or for other scripts, nothing else changes.
    """
    import solo.args.linear as args_linear
    import solo.args.pretrain as args_pretrain
    import solo.data.classification_dataloader as classification_data
    import solo.data.pretrain_dataloader as pretrain_data

    seen: dict[str, DictConfig] = {}
    summary = RunSummary()
    originals = (
        args_pretrain.parse_cfg,
        args_linear.parse_cfg,
        pretrain_data.prepare_datasets,
        classification_data.prepare_transforms,
        pl.Trainer.fit,
    )
    parse_cfg, parse_linear_cfg, prepare_datasets, prepare_transforms, fit = originals
    methods = dict(METHODS)

    def raw_images(dataset: str) -> RawImages | None:
        cfg = seen.get("cfg")
        if cfg is None or not cfg.data.augment_on_device:
            return None
        return RawImages(None if dataset in FIXED_SIZE_DATASETS else int(cfg.data.image_size))

    def parse_cfg_hook(cfg: DictConfig) -> DictConfig:
        cpu_devices(cfg)
        cfg = parse_cfg(cfg)
        lightning_devices(cfg)
        cfg.data.augment_on_device = bool(omegaconf_select(cfg, "data.augment_on_device", False))
        cfg.data.image_size = omegaconf_select(cfg, "data.image_size", None)
        if cfg.data.augment_on_device and cfg.data.dataset not in FIXED_SIZE_DATASETS:
            if not cfg.data.image_size:
                raise ValueError(
                    f"data.augment_on_device=true on {cfg.data.dataset}: set data.image_size "
                    "(images are resized to it before the on-device crops, e.g. 256 for 224 crops)"
                )
        seen["cfg"] = cfg
        return cfg

    def parse_linear_cfg_hook(cfg: DictConfig) -> DictConfig:
        cpu_devices(cfg)
        backbone_from_run(cfg)
        cfg = parse_linear_cfg(cfg)
        lightning_devices(cfg)
        return cfg

    def prepare_datasets_hook(dataset: str, transform: Any, *args: Any, **kwargs: Any):
        return prepare_datasets(dataset, raw_images(dataset) or transform, *args, **kwargs)

    def prepare_transforms_hook(dataset: str):
        raw = raw_images(dataset)
        return (raw, raw) if raw is not None else prepare_transforms(dataset)

    def fit_hook(trainer: pl.Trainer, model: Any, *args: Any, **kwargs: Any) -> Any:
        summary.trainer, summary.model, summary.started = trainer, model, time.time()
        return fit(trainer, model, *args, **kwargs)

    args_pretrain.parse_cfg = parse_cfg_hook
    args_linear.parse_cfg = parse_linear_cfg_hook
    pretrain_data.prepare_datasets = prepare_datasets_hook
    classification_data.prepare_transforms = prepare_transforms_hook
    pl.Trainer.fit = fit_hook
    METHODS.update({name: adapter.plugin_class(cls) for name, cls in adapter.registered_methods().items()})
    try:
        yield summary
    finally:
        METHODS.clear()
        METHODS.update(methods)
        (
            args_pretrain.parse_cfg,
            args_linear.parse_cfg,
            pretrain_data.prepare_datasets,
            classification_data.prepare_transforms,
            pl.Trainer.fit,
        ) = originals


__all__ = ["launch_hooks"]
