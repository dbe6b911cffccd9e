"""The one door to solo-learn: picks the adapter for the installed solo-learn method API.

solo-learn 1.0.2 (PyPI) has an argparse/kwargs method API on pytorch-lightning 1.x
(``BaseMethod.add_model_specific_args``, adapter ``v1``); its GitHub main has a config (OmegaConf)
API on lightning 2 (``BaseMethod.add_and_assert_specific_cfg``, adapter ``v2``). Both adapters
export the same names. Everything else in solo_hyper imports solo-learn only through this package.
"""

from __future__ import annotations

from solo_hyper.solo.api import SUPPORTED, detect_api

try:
    import solo.methods.base as _solo_base
except ImportError as err:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "solo_hyper needs solo-learn. Install the PyPI release without its (unresolvable) pins: "
        "'pip install --no-deps solo-learn==1.0.2' after the working set in "
        "requirements/pypi-release.txt, or simply run ./scripts/bootstrap.sh (see README); "
        "or solo-learn's GitHub main with requirements/solo-main.txt (docs/solo-main.md)."
    ) from err

INSTALLED_API = detect_api(_solo_base.BaseMethod)

if INSTALLED_API == "v1":
    from solo_hyper.solo import v1 as adapter
else:
    from solo_hyper.solo import v2 as adapter

__all__ = ["INSTALLED_API", "SUPPORTED", "adapter", "detect_api"]
