"""Which solo-learn method API a ``BaseMethod`` class has (imports nothing, so the baselines
table and the adapter package can both use it without an import circle)."""

from __future__ import annotations

SUPPORTED = (
    "solo-learn 1.0.2 (PyPI, pytorch-lightning 1.9; requirements/pypi-release.txt)",
    "solo-learn GitHub main (lightning 2.1.2; requirements/solo-main.txt, docs/solo-main.md)",
)

def detect_api(base_method: type) -> str:
    """Which method API an installed solo-learn has.

    Args:
        base_method: its ``solo.methods.base.BaseMethod`` class.

    Returns:
        'v1' for solo-learn 1.0.2's method API, 'v2' for its GitHub main's.

    Raises:
        ImportError: a BaseMethod with neither API.
    """
    if hasattr(base_method, "add_model_specific_args"):
        return "v1"
    if hasattr(base_method, "add_and_assert_specific_cfg"):
        return "v2"
    raise ImportError(
        f"the installed solo-learn ({getattr(base_method, '__module__', '?')}) has a method API "
        "solo_hyper does not know (BaseMethod has neither add_model_specific_args nor "
        "add_and_assert_specific_cfg); supported: " + "; ".join(SUPPORTED)
    )
