"""This plugin's methods (each a thin file: an objective of ``solo_hyper.objectives`` behind the
adapter's method base).

Importing this package registers them into solo-learn's ``solo.methods.METHODS``.
"""

from solo_hyper.methods.ebclr import EBCLR
from solo_hyper.methods.hcl import HCL, SHCL
from solo_hyper.methods.rhcl import RHCL, RoCL
from solo_hyper.solo import adapter

PLUGIN_METHODS = {"ebclr": EBCLR, "hcl": HCL, "shcl": SHCL, "rhcl": RHCL, "rocl": RoCL}


def register() -> None:
    """Adds the plugin's methods (and SupCon where solo-learn lacks it) to solo's registry."""
    for name, cls in PLUGIN_METHODS.items():
        adapter.register(name, cls)
    if "supcon" not in adapter.registered_methods():
        adapter.register("supcon", adapter.SupCon)


register()

__all__ = ["EBCLR", "HCL", "PLUGIN_METHODS", "RHCL", "RoCL", "SHCL", "register"]
