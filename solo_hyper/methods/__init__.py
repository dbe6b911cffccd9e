"""This plugin's methods as solo-learn runs them, one class per method and one file each
(``hcl.py``, ``shcl.py``, ``rhcl.py``, ``rocl.py``, ``ebclr.py``, ``supervised.py``), so that
``METHODS[name](...)`` builds that method from solo-learn's own arguments, as solo's launchers and
tests build theirs.

Each class names the objective it runs (``OBJECTIVE``: ``solo_hyper.objectives``, the paper's
idea in torch alone: its arguments, head, crops and loss) and adds the framework glue that
objective needs (EBCLR: its replay buffer); the step they share is the adapter's
``ObjectiveMethod`` (``solo_hyper/solo/common.py: ObjectiveMethodMixin``).

Importing this package registers them into solo-learn's ``solo.methods.METHODS``.
"""

from solo_hyper.methods.ebclr import EBCLR
from solo_hyper.methods.hcl import HCL
from solo_hyper.methods.rhcl import RHCL
from solo_hyper.methods.rocl import RoCL
from solo_hyper.methods.shcl import SHCL
from solo_hyper.methods.supervised import Supervised
from solo_hyper.solo import adapter

CLASSES: dict[str, type[adapter.ObjectiveMethod]] = {
    cls.METHOD: cls for cls in (HCL, SHCL, RHCL, RoCL, EBCLR, Supervised)
}


def register() -> None:
    """Adds the plugin's methods (and SupCon where solo-learn lacks it) to solo's registry."""
    for name, cls in CLASSES.items():
        adapter.register(name, cls)
    if "supcon" not in adapter.registered_methods():
        adapter.register("supcon", adapter.SupCon)


register()

__all__ = ["CLASSES", "EBCLR", "HCL", "RHCL", "SHCL", "RoCL", "Supervised", "register"]
