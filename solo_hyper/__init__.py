"""solo-hyper: hyperbolic and energy-based contrastive methods for solo-learn.

``import solo_hyper`` is light: the algorithm modules (``geometry``, ``losses``, ``heads``,
``attacks``, ``sgld``, ``augment``, ``data``, ``backbones``) and the metrics import with torch
alone. The methods are registered into ``solo.methods.METHODS`` (idempotent) when they are
imported (``import solo_hyper.methods``), which the command line, ``run-solo`` and
``register_methods()`` do, so that solo-learn's launchers and this package find them by name.
"""

from __future__ import annotations

from typing import Any

from solo_hyper.version import __version__


def register_methods() -> None:
    """Registers this plugin's methods (and the baselines solo-learn 1.0.2 lacks) into solo-learn."""
    from solo_hyper.methods import register

    register()


def __getattr__(name: str) -> Any:
    if name == "load_pretrained":  # a run's or an export's backbone and head (solo_hyper.pretrained)
        from solo_hyper.pretrained import load_pretrained

        return load_pretrained
    if name == "adapter":  # the solo-learn adapter, imported (with solo-learn) only when asked for
        from solo_hyper.solo import adapter

        return adapter
    raise AttributeError(f"module 'solo_hyper' has no attribute {name!r}")


__all__ = ["__version__", "load_pretrained", "register_methods"]
