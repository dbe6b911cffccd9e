"""The methods as framework-free objectives (torch only): arguments, head, crops, per-step
preparation, loss and metrics of HCL, SHCL, RHCL, RoCL and EBCLR, and of the supervised
cross-entropy reference. ``solo_hyper.methods`` wraps
each in a solo-learn method; ``Objective.step`` trains one in a plain PyTorch loop (README)."""

from solo_hyper.objectives.base import CropStats, Net, Objective, ObjectiveArgs, SpaceArgs
from solo_hyper.objectives.contrastive import HCL, SHCL, ContrastiveArgs, HCLArgs, SHCLArgs
from solo_hyper.objectives.ebclr import EBCLR, EBCLRArgs, ReplayChains
from solo_hyper.objectives.robust import RHCL, RHCLArgs, RoCL, RoCLArgs
from solo_hyper.objectives.supervised import Supervised, SupervisedArgs

OBJECTIVES: dict[str, type[Objective]] = {
    "hcl": HCL, "shcl": SHCL, "rhcl": RHCL, "rocl": RoCL, "ebclr": EBCLR, "supervised": Supervised,
}  # fmt: skip

__all__ = [
    "EBCLR", "HCL", "OBJECTIVES", "RHCL", "SHCL", "ContrastiveArgs", "CropStats", "EBCLRArgs",
    "HCLArgs", "Net", "Objective", "ObjectiveArgs", "ReplayChains", "RHCLArgs", "RoCL", "RoCLArgs",
    "SHCLArgs", "SpaceArgs", "Supervised", "SupervisedArgs",
]  # fmt: skip
