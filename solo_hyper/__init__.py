"""solo-hyper: hyperbolic and energy-based contrastive methods for solo-learn.

Importing the package registers its methods into ``solo.methods.METHODS`` (idempotent), so that
solo-learn's own launchers and this package's command line find them by name.
"""

from solo_hyper.solo import adapter  # fails with install instructions when solo-learn is absent

__version__ = "0.1.0"


def register_methods() -> None:
    """Registers this plugin's methods and the baselines solo-learn 1.0.2 lacks (supcon)."""
    from solo_hyper.methods import PLUGIN_METHODS

    for name, cls in PLUGIN_METHODS.items():
        adapter.register(name, cls)
    if "supcon" not in adapter.registered_methods():
        adapter.register("supcon", adapter.SupCon)


register_methods()

__all__ = ["__version__", "adapter", "register_methods"]
