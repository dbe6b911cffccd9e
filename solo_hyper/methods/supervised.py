"""The supervised reference of HCL Table 2 ("CE") as a solo-learn method: the encoder trained end
to end with cross-entropy through a linear classifier, on the augmentations, optimiser and budget
of the methods it is compared with."""

from __future__ import annotations

from solo_hyper import objectives
from solo_hyper.solo import adapter


class Supervised(adapter.ObjectiveMethod):
    """Cross-entropy: ``METHODS["supervised"]``, built from solo-learn's own arguments.

    - arguments (``method_kwargs``): ``objectives.SupervisedArgs`` (``classes``);
    - head: a linear classifier onto Euclidean space, unnormalised
      (``objectives.Supervised.head``);
    - loss: cross-entropy of every crop's logits (``objectives.Supervised.loss``);
    - glue: none beyond the shared step (``ObjectiveMethodMixin.training_step``).
    """

    METHOD = "supervised"
    OBJECTIVE = objectives.Supervised
