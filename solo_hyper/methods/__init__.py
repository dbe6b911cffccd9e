"""This plugin's methods (each a thin file: heads + loss + the adapter's base class)."""

from solo_hyper.methods.ebclr import EBCLR
from solo_hyper.methods.hcl import HCL, SHCL
from solo_hyper.methods.rhcl import RHCL, RoCL

PLUGIN_METHODS = {"ebclr": EBCLR, "hcl": HCL, "shcl": SHCL, "rhcl": RHCL, "rocl": RoCL}

__all__ = ["EBCLR", "HCL", "PLUGIN_METHODS", "RHCL", "RoCL", "SHCL"]
