"""Loading pretraining runs back: a run directory or a .ckpt file -> (model, config).

Each checkpoint written by ``pretrain`` carries its config (``solo_hyper_config``), so a model is
rebuilt exactly as it was trained and its weights loaded strictly. Bad input is reported before
any work: a missing path, an unreadable or truncated file, a checkpoint without a config, a
checkpoint of another method than the one asked for.
"""

from __future__ import annotations

from pathlib import Path

import torch

from solo_hyper.config import ConfigError
from solo_hyper.data import DATASETS


class CheckpointError(ConfigError):
    """A checkpoint that cannot be used; the message says why."""


def resolve_checkpoint(path: str | Path) -> Path:
    """A run directory (its last.ckpt, else its newest .ckpt) or a checkpoint file."""
    p = Path(path)
    if p.is_dir():
        if (p / "last.ckpt").is_file():
            return p / "last.ckpt"
        ckpts = sorted(p.glob("*.ckpt"), key=lambda f: f.stat().st_mtime)
        if not ckpts:
            raise CheckpointError(f"no checkpoint (*.ckpt) in run directory {str(p)!r}")
        return ckpts[-1]
    if not p.is_file():
        raise CheckpointError(f"checkpoint {str(p)!r} does not exist (give a run directory or a .ckpt file)")
    return p


def read_checkpoint(path: str | Path) -> dict:
    """torch.load with clear errors for unreadable, truncated or foreign files."""
    file = resolve_checkpoint(path)
    try:
        ckpt = torch.load(file, map_location="cpu", weights_only=False)
    except Exception as err:  # truncated zip, pickle errors, permission errors, ...
        raise CheckpointError(
            f"cannot read checkpoint {str(file)!r} ({type(err).__name__}: {err}); the file is "
            "truncated or not a PyTorch checkpoint. Use an earlier checkpoint of the run."
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise CheckpointError(f"{str(file)!r} is not a Lightning checkpoint (no state_dict)")
    if "solo_hyper_config" not in ckpt:
        raise CheckpointError(
            f"{str(file)!r} has no solo_hyper config: it was not written by "
            "'python -m solo_hyper pretrain'"
        )
    ckpt["_path"] = str(file)
    return ckpt


def load_pretrained(path: str | Path, expect_method: str | None = None):
    """Rebuilds the pretrained LightningModule of a run and loads its weights.

    Returns (model in eval mode, its config, the checkpoint dict).
    """
    from solo_hyper.config import crop_counts
    from solo_hyper.solo import adapter
    from solo_hyper.train import SMALL_IMAGE_SIZE

    ckpt = read_checkpoint(path)
    cfg = ckpt["solo_hyper_config"]
    method = cfg["method"]
    if expect_method is not None and method != expect_method:
        raise CheckpointError(
            f"{ckpt['_path']!r} is a checkpoint of method {method!r}, not {expect_method!r}"
        )
    if "classifier.weight" not in ckpt["state_dict"]:
        raise CheckpointError(f"checkpoint {ckpt['_path']!r} does not match its config: no weights")
    num_classes = ckpt["state_dict"]["classifier.weight"].shape[0]
    crop = cfg["augmentations"][0].get("crop_size", 32)
    model = adapter.build_method(cfg, num_classes, crop <= SMALL_IMAGE_SIZE, crop_counts(cfg))
    try:
        model.load_state_dict(ckpt["state_dict"], strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"checkpoint {ckpt['_path']!r} does not match its config: {err}") from None
    model.eval()
    return model, cfg, ckpt


def dataset_num_classes(cfg: dict) -> int | None:
    return DATASETS[cfg["data"]["dataset"]].num_classes
