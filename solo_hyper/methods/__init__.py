"""This plugin's methods as solo-learn runs them: each an objective of ``solo_hyper.objectives``
(the paper's idea, torch only) with the framework glue it needs, declared here, and a class per
method (``HCL``, ``SHCL``, ``RHCL``, ``RoCL``, ``EBCLR``: the adapter's ``ObjectiveMethod`` told
which objective it runs), so that ``METHODS[name](...)`` builds that method from solo-learn's own
arguments, as solo's launchers and tests build theirs.

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


def method_class(name: str) -> type:
    """The solo-learn method class of plugin method ``name`` (named as its objective).

    Args:
        name: a key of ``DECLARED`` (hcl, shcl, rhcl, rocl, ebclr, supervised).

    Returns:
        A subclass of the adapter's ``ObjectiveMethod`` that runs that objective.
    """
    objective = DECLARED[name].objective
    return type(
        objective.__name__,
        (adapter.ObjectiveMethod,),
        {"METHOD": name, "__module__": __name__, "__doc__": objective.__doc__},
    )


HCL = method_class("hcl")
SHCL = method_class("shcl")
RHCL = method_class("rhcl")
RoCL = method_class("rocl")
EBCLR = method_class("ebclr")
Supervised = method_class("supervised")
CLASSES = {"hcl": HCL, "shcl": SHCL, "rhcl": RHCL, "rocl": RoCL, "ebclr": EBCLR,
           "supervised": Supervised}  # fmt: skip


def register() -> None:
    """Adds the plugin's methods (and SupCon where solo-learn lacks it) to solo's registry."""
    PLUGIN_METHODS.update(DECLARED)
    for name, cls in CLASSES.items():
        adapter.register(name, cls)
    if "supcon" not in adapter.registered_methods():
        adapter.register("supcon", adapter.SupCon)


register()

__all__ = ["CLASSES", "DECLARED", "EBCLR", "HCL", "RHCL", "SHCL", "RoCL", "Supervised", "method_class",
           "register"]  # fmt: skip
