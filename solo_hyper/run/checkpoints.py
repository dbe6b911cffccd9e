"""Loading pretraining runs back: a run directory or a .ckpt file -> (model, config).

Each checkpoint written by ``pretrain`` carries its config (``solo_hyper_config``), so a model is
rebuilt exactly as it was trained and its weights loaded strictly. Bad input is reported before
any work: a missing path, an unreadable or truncated file, a checkpoint without a config, a
checkpoint of another method than the one asked for.
"""

from __future__ import annotations

from pathlib import Path

import torch

from solo_hyper.config import ConfigError, crop_counts, crop_entries, small_images
from solo_hyper.data import DATASETS

LAST = "last.ckpt"


def checkpoint_epoch(path: Path) -> int:
    """N of ``epoch=N.ckpt`` (-1 for another name)."""
    if not path.stem.startswith("epoch="):
        return -1
    try:
        return int(path.stem.split("=", 1)[1].split("-")[0])
    except (IndexError, ValueError):
        return -1


class CheckpointError(ConfigError):
    """A checkpoint that cannot be used; the message says why."""


def newest_checkpoint(
    run_dir: Path, expect_method: str | None = None, verify: bool = True
) -> Path | None:
    """The checkpoint a resume of ``run_dir`` uses, or None: ``last.ckpt`` (the newest state a
    run writes, always renamed into place whole), else the epoch checkpoint of the highest epoch
    (``epoch=N.ckpt``), else any other ``*.ckpt``, newest first (older versions' files).

    ``verify``: only one torch can read (a file damaged on disk is skipped, with a message, for
    the next in that order). With ``expect_method``, a readable checkpoint of another method is
    an error (resuming an HCL run directory with an EBCLR config would mix two runs).
    """
    others = [p for p in run_dir.glob("*.ckpt") if p.name != LAST]
    candidates = [run_dir / LAST] if (run_dir / LAST).is_file() else []
    candidates += sorted((p for p in others if checkpoint_epoch(p) >= 0),
                         key=checkpoint_epoch, reverse=True)  # fmt: skip
    candidates += sorted((p for p in others if p not in candidates),
                         key=lambda p: p.stat().st_mtime, reverse=True)  # fmt: skip
    if not verify:
        return candidates[0] if candidates else None
    for path in candidates:
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=False)
        except Exception:  # truncated by a kill during the write: try an older one
            print(f"[solo-hyper] skipping unreadable checkpoint {path}")
            continue
        method = (ckpt.get("solo_hyper_config") or {}).get("method") if isinstance(ckpt, dict) else None
        if expect_method is not None and method is not None and method != expect_method:
            raise CheckpointError(
                f"{path} is a checkpoint of method {method!r}, but the config trains "
                f"{expect_method!r}; use another checkpoint.dir or name, or auto_resume.enabled=false"
            )
        return path
    return None


def checkpoint_step(path: Path) -> int | None:
    """The global step a checkpoint was written at (None: unreadable). Memory-mapped: the
    weights are not read."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=False, mmap=True)["global_step"])
    except Exception:
        return None


def resolve_checkpoint(path: str | Path) -> Path:
    """A run directory (its last.ckpt, else its newest .ckpt) or a checkpoint file."""
    p = Path(path)
    if p.is_dir():
        found = newest_checkpoint(p, verify=False)
        if found is None:
            raise CheckpointError(f"no checkpoint (*.ckpt) in run directory {str(p)!r}")
        return found
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


def build_model(cfg: dict, num_classes: int):
    """The untrained LightningModule of a completed config, the methods registered first: a
    process that only loads a run or an export has imported nothing that registers them."""
    import solo_hyper.methods  # noqa: F401  (registers the methods into solo-learn)
    from solo_hyper.solo import adapter

    crops = crop_entries(cfg)
    return adapter.build_method(cfg, num_classes, small_images(crops), crop_counts(crops))


def load_pretrained(path: str | Path, expect_method: str | None = None):
    """Rebuilds the pretrained LightningModule of a run and loads its weights.

    Returns (model in eval mode, its config, the checkpoint dict).
    """
    ckpt = read_checkpoint(path)
    cfg = ckpt["solo_hyper_config"]
    method = cfg["method"]
    if expect_method is not None and method != expect_method:
        raise CheckpointError(
            f"{ckpt['_path']!r} is a checkpoint of method {method!r}, not {expect_method!r}"
        )
    if "classifier.weight" not in ckpt["state_dict"]:
        raise CheckpointError(f"checkpoint {ckpt['_path']!r} does not match its config: no weights")
    model = build_model(cfg, ckpt["state_dict"]["classifier.weight"].shape[0])
    try:
        model.load_state_dict(ckpt["state_dict"], strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"checkpoint {ckpt['_path']!r} does not match its config: {err}") from None
    model.eval()
    return model, cfg, ckpt


def dataset_num_classes(cfg: dict) -> int | None:
    return DATASETS[cfg["data"]["dataset"]].num_classes
