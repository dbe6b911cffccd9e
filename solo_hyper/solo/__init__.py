"""The one door to solo-learn: picks the adapter for the installed solo-learn API.

solo-learn 1.0.2 (PyPI) has an argparse/kwargs method API on pytorch-lightning 1.x
(``BaseMethod.add_model_specific_args``, adapter ``v1``); its GitHub main has a config (OmegaConf)
API on lightning 2 (``BaseMethod.add_and_assert_specific_cfg``, adapter ``v2``). Both adapters
export the same names. Everything else in solo_hyper imports solo-learn only through this package.
"""

from __future__ import annotations

SUPPORTED = (
    "solo-learn 1.0.2 (PyPI, pytorch-lightning 1.9; requirements/pypi-release.txt)",
    "solo-learn GitHub main (lightning 2.1.2; requirements/solo-main.txt, docs/solo-main.md)",
)

try:
    import solo.methods.base as _solo_base
except ImportError as err:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "solo_hyper needs solo-learn. Install the PyPI release without its (unresolvable) pins: "
        "'pip install --no-deps solo-learn==1.0.2' after the working set in "
        "requirements/pypi-release.txt, or simply run ./scripts/bootstrap.sh (see README); "
        "or solo-learn's GitHub main with requirements/solo-main.txt (docs/solo-main.md)."
    ) from err


def detect_api(base_method: type) -> str:
    """'v1' for solo-learn 1.0.2's method API, 'v2' for its GitHub main's; ImportError else."""
    if hasattr(base_method, "add_model_specific_args"):
        return "v1"
    if hasattr(base_method, "add_and_assert_specific_cfg"):
        return "v2"
    raise ImportError(
        f"the installed solo-learn ({getattr(_solo_base, '__file__', '?')}) has a method API "
        "solo_hyper does not know (BaseMethod has neither add_model_specific_args nor "
        "add_and_assert_specific_cfg); supported: " + "; ".join(SUPPORTED)
    )


if detect_api(_solo_base.BaseMethod) == "v1":
    from solo_hyper.solo import v1 as adapter
else:
    from solo_hyper.solo import v2 as adapter

__all__ = ["SUPPORTED", "adapter", "detect_api"]
