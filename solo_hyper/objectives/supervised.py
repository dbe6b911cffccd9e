"""Supervised training of the encoder: the upper reference of the supervised tables.

HCL's Table 2 compares SHCL and SupCon with cross-entropy ("CE"): the same encoder trained end to
end on the labels with a linear classifier on its features, the same augmentations and budget.
Here that classifier is the objective's head (a linear map onto Euclidean space, unnormalised: its
outputs are the logits), so the reference trains, saves, resumes and is evaluated by exactly the
code that trains and evaluates the self-supervised methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solo_hyper.geometry import make_space
from solo_hyper.heads import SpaceProjector
from solo_hyper.objectives.base import Batch, Objective, ObjectiveArgs, check_int


@dataclass(frozen=True)
class SupervisedArgs(ObjectiveArgs):
    """The supervised reference's arguments.

    Attributes:
        classes: outputs of the classifier, the dataset's number of classes (not
            ``num_classes``: solo-learn's methods take that name for their online classifier).
    """

    classes: int = 10

    def check(self) -> None:
        check_int("classes", self.classes, 2)


class Supervised(Objective):
    """Cross-entropy of a linear classifier on the encoder's features, over every crop."""

    Args = SupervisedArgs
    args: SupervisedArgs
    min_crops = 1  # a crop needs its label, not a positive

    def head(self, features_dim: int) -> SpaceProjector:
        classifier = nn.Linear(features_dim, self.args.classes)
        return SpaceProjector(classifier, make_space("euclidean"), normalize=False)

    def check_batch(self, batch: Batch) -> None:
        super().check_batch(batch)
        targets = batch[2]
        if len(targets) and (int(targets.min()) < 0 or int(targets.max()) >= self.args.classes):
            raise ValueError(
                f"Supervised: labels run from {int(targets.min())} to {int(targets.max())}, the "
                f"classifier has {self.args.classes} outputs: set method_kwargs.classes to "
                "the dataset's number of classes"
            )

    def loss(
        self, net: nn.Module, batch: Batch, feats: list[Tensor], z: list[Tensor], **extras: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        targets = batch[2].repeat(len(z))
        logits = torch.cat(z)
        loss = F.cross_entropy(logits, targets)
        accuracy = (logits.detach().argmax(1) == targets).float().mean() * 100.0
        return loss, {"ce_loss": loss.detach(), "train_acc1": accuracy}
