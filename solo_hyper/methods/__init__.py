"""This plugin's methods as solo-learn runs them: each an objective of ``solo_hyper.objectives``
(the paper's idea, torch only) with the framework glue it needs, declared here and built by the
adapter's one generic method class (``adapter.ObjectiveMethod``).

Importing this package registers them into solo-learn's ``solo.methods.METHODS``.
"""

from solo_hyper import objectives
from solo_hyper.methods.ebclr import EBCLR_GLUE
from solo_hyper.solo import adapter
from solo_hyper.solo.common import PLUGIN_METHODS, PluginMethod

# every objective under its name (objectives.OBJECTIVES); those that need framework glue bring it
DECLARED = {
    **{name: PluginMethod(objective) for name, objective in objectives.OBJECTIVES.items()},
    "ebclr": EBCLR_GLUE,
}


def register() -> None:
    """Adds the plugin's methods (and SupCon where solo-learn lacks it) to solo's registry."""
    PLUGIN_METHODS.update(DECLARED)
    for name in DECLARED:
        adapter.register(name, adapter.ObjectiveMethod)
    if "supcon" not in adapter.registered_methods():
        adapter.register("supcon", adapter.SupCon)


register()

__all__ = ["DECLARED", "register"]
