"""The one door to solo-learn: picks the adapter for the installed solo-learn API.

solo-learn 1.0.2 (PyPI) has an argparse/kwargs method API on pytorch-lightning 1.x; its GitHub
main has a config (OmegaConf) API on lightning 2. Everything else in solo_hyper imports solo-learn
only through this package.
"""

from __future__ import annotations

try:
    import solo.methods.base as _solo_base
except ImportError as err:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "solo_hyper needs solo-learn. Install the PyPI release without its (unresolvable) pins: "
        "'pip install --no-deps solo-learn==1.0.2' after the working set in "
        "requirements/pypi-release.txt, or simply run ./scripts/bootstrap.sh (see README)."
    ) from err

if hasattr(_solo_base.BaseMethod, "add_model_specific_args"):
    from solo_hyper.solo import v1 as adapter
else:  # pragma: no cover
    raise ImportError(
        "this solo-learn installation has an API solo_hyper does not know; supported: "
        "solo-learn 1.0.2 (PyPI)"
    )

__all__ = ["adapter"]
