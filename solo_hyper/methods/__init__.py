"""This plugin's methods (each a thin file: heads + loss + the adapter's base class)."""

from solo_hyper.methods.hcl import HCL, SHCL

PLUGIN_METHODS = {"hcl": HCL, "shcl": SHCL}

__all__ = ["HCL", "PLUGIN_METHODS", "SHCL"]
