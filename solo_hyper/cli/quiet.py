"""Quiet commands: the third-party noise a user can do nothing about, filtered (``--verbose``
shows it), and Lightning's progress bars on stderr, so that stdout holds the results alone.

Only messages known to be harmless are filtered, by their text: a new warning still shows.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import warnings
from collections.abc import Iterator

# (message regex, why it is harmless)
HARMLESS_WARNINGS: tuple[tuple[str, str], ...] = (
    (r"pkg_resources is deprecated", "setuptools, imported by Lightning and pl_bolts"),
    (r"In the future `np\.\w+` will be defined", "pl_bolts probes numpy aliases at import"),
    (r".*is currently marked under review", "pl_bolts' UnderReviewWarning at import"),
    (r"`torch\.cuda\.amp\.custom_(fwd|bwd)\(args\.\.\.\)` is deprecated", "solo's whitening"),
    (r"Importing from timm\.[\w.]+ is deprecated", "timm's moved modules"),
    (r"Overwriting \w+ in registry with solo\.backbones", "solo main re-registers timm models"),
    (r"Checkpoint directory .* exists and is not empty", "the run folder holds config.yaml"),
    (r"The number of training batches .* is smaller than the logging interval", "tiny runs"),
    (r"The '?\w+_dataloader'? does not have many workers", "num_workers is the user's choice"),
    (r"The dataloader, \w+ dataloader( 0)?, does not have many workers", "likewise, Lightning 1.9"),
    (r"Consider setting `persistent_workers=True`", "Lightning's advice on worker start-up"),
    (r"You defined a `validation_step` but have no `val_dataloader`", "linear probes"),
    (r"Found \d+ module\(s\) in eval mode at the start of training", "frozen backbones"),
    (r"`training_step` returned `None`", "solo's linear model with frozen features"),
    (r"It is recommended to use `self\.log\(.*sync_dist=True`", "per-rank metrics, by design"),
    (r"The `srun` command is available on your system", "Lightning's SLURM hint"),
    (r"torch\.meshgrid: in an upcoming release", "kornia"),
    (r"Starting from v1\.9\.0, `tensorboardX` has been removed", "Lightning 2's CSV logger note"),
    (r"'pin_memory' argument is set as true but no accelerator", "solo's loaders on the CPU"),
    (r"`?torch\.utils\._pytree\._register_pytree_node` is deprecated", "Lightning 2 / timm on torch 2"),
    (r"Missing logger folder", "Lightning's note that a new run's log folder is created"),
)
# Lightning's INFO banners (GPU available, seed set, limit_*_batches, fit stopped, ...)
LIGHTNING_LOGGERS = (
    "pytorch_lightning", "lightning", "lightning.pytorch", "lightning.fabric", "lightning_fabric",
)  # fmt: skip


class _StderrTqdm:
    """Wraps a Lightning ``Tqdm`` class so that its bars draw on stderr (Lightning: stdout)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def __call__(self, *args, **kwargs):
        kwargs["file"] = sys.stderr
        return self.cls(*args, **kwargs)


def _progress_modules() -> list:
    """Lightning's tqdm progress-bar modules that are already imported (both flavours)."""
    names = (
        "pytorch_lightning.callbacks.progress.tqdm_progress",
        "lightning.pytorch.callbacks.progress.tqdm_progress",
    )
    return [sys.modules[n] for n in names if n in sys.modules and hasattr(sys.modules[n], "Tqdm")]


def harmless(message: object) -> bool:
    text = str(message)
    return any(re.match(pattern, text) for pattern, _why in HARMLESS_WARNINGS)


@contextlib.contextmanager
def filtered_warnings(verbose: bool = False) -> Iterator[None]:
    """The harmless warnings off. Also at display time: pl_bolts puts its own "once" filter in
    front of every filter for each warning it raises."""
    with warnings.catch_warnings():
        if not verbose:
            for pattern, _why in HARMLESS_WARNINGS:
                warnings.filterwarnings("ignore", message=pattern)
            show = warnings.showwarning

            def showwarning(message, *args, **kwargs) -> None:
                if not harmless(message):
                    show(message, *args, **kwargs)

            warnings.showwarning = showwarning
        yield


@contextlib.contextmanager
def quiet_run(verbose: bool = False) -> Iterator[None]:
    """While a command runs: harmless warnings and Lightning's banners off, bars on stderr."""
    with filtered_warnings(verbose):
        if verbose:
            yield
            return
        loggers = [logging.getLogger(n) for n in LIGHTNING_LOGGERS]
        levels = [lg.level for lg in loggers]
        for lg in loggers:
            lg.setLevel(logging.WARNING)
        patched = []
        for module in _progress_modules():
            patched.append((module, module.Tqdm))
            module.Tqdm = _StderrTqdm(module.Tqdm)
        try:
            yield
        finally:
            for module, cls in patched:
                module.Tqdm = cls
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)


__all__ = ["HARMLESS_WARNINGS", "filtered_warnings", "quiet_run"]
