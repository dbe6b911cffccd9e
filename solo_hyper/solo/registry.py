"""What both adapters do the same way, whatever the solo-learn API: mixing the plugin base under
a solo method class, and adding classes to solo's METHODS registry. Imports no solo-learn."""

from __future__ import annotations


def mixin_class(cls: type, plugin_base: type, cache: dict[type, type]) -> type:
    """``cls`` with ``plugin_base`` mixed in right above solo's BaseMethod (cached).

    For ``class SimCLR(BaseMethod)`` this builds ``SimCLR(SimCLR, PluginBase)``, whose MRO runs
    SimCLR's constructor, then PluginBase's (backbone swap, augmentation), then BaseMethod's.
    """
    if issubclass(cls, plugin_base):
        return cls
    if cls not in cache:
        cache[cls] = type(cls.__name__, (cls, plugin_base), {"__module__": cls.__module__})
    return cache[cls]


def register_into(registry: dict[str, type], name: str, cls: type) -> None:
    """Adds ``cls`` to ``registry`` under ``name``; idempotent, also across module reloads, and a
    name already taken by another class is an error."""
    current = registry.get(name)
    if current is not None and current is not cls:
        same = (current.__module__, current.__qualname__) == (cls.__module__, cls.__qualname__)
        if not same:
            raise ValueError(
                f"cannot register {cls.__qualname__} as {name!r}: solo.methods.METHODS[{name!r}] "
                f"is already {current.__module__}.{current.__qualname__}"
            )
    registry[name] = cls
