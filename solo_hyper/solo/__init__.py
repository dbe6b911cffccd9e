"""The one door to solo-learn: ``adapter`` (``solo_hyper/solo/adapter.py``), the same code for
both supported solo-learn versions, each difference in that version's shim (``v1.py``: 1.0.2 from
PyPI, argparse keyword arguments on pytorch-lightning 1.9; ``v2.py``: GitHub main, an OmegaConf
cfg on lightning 2). Everything else in solo_hyper imports solo-learn only through this package.
"""

from __future__ import annotations

from solo_hyper.solo.api import SUPPORTED, detect_api

try:
    import solo.methods.base  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "solo_hyper needs solo-learn. Install the PyPI release without its (unresolvable) pins: "
        "'pip install --no-deps solo-learn==1.0.2' after the working set in "
        "requirements/pypi-release.txt, or simply run ./scripts/bootstrap.sh (see README); "
        "or solo-learn's GitHub main with requirements/solo-main.txt (docs/solo-main.md)."
    ) from err

from solo_hyper.solo import adapter  # noqa: E402  (after the clear error above)

__all__ = ["SUPPORTED", "adapter", "detect_api"]
