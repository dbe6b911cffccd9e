"""A fixed, class-stratified subset of the evaluation images, taken as the batches come.

Why: an attack that costs seconds per image (AutoAttack on a CPU) runs on a subset, and every
model of a comparison must be attacked on the same images, in the same share of each class, for
a paired difference to mean anything. The subset is the first ``images / classes`` images of each
class in the evaluation order (the remainder one more for the lowest classes): the same images
for every model whose evaluation split and order are the same, chosen without reading the whole
split first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch
from torch import Tensor

Batches = Callable[[], Iterable[tuple[Tensor, Tensor]]]


def quotas(images: int, classes: int) -> list[int]:
    """Images per class: ``images // classes``, one more for the first ``images % classes``."""
    if images < 1 or classes < 1:
        raise ValueError(f"need images >= 1 and classes >= 1, got {images} and {classes}")
    base, extra = divmod(images, classes)
    return [base + (c < extra) for c in range(classes)]


def stratified(batches: Batches, images: int, classes: int) -> Batches:
    """``batches`` restricted to the class-stratified subset of ``images`` images (fewer when a
    class has fewer than its quota); stops reading once every quota is filled."""
    wanted = quotas(images, classes)

    def subset() -> Iterator[tuple[Tensor, Tensor]]:
        left = torch.tensor(wanted)
        for x, y in batches():
            keep = torch.zeros(len(y), dtype=torch.bool)
            labels = y.cpu()
            for c in labels.unique().tolist():
                if not 0 <= c < classes:
                    raise ValueError(f"label {c} outside the {classes} classes")
                idx = (labels == c).nonzero().flatten()[: int(left[c])]
                keep[idx] = True
                left[c] -= len(idx)
            if keep.any():
                where = keep.to(y.device)
                yield x[where], y[where]
            if int(left.sum()) == 0:
                return

    return subset


def first(batches: Batches) -> tuple[Tensor, Tensor]:
    """Every (image, label) of ``batches`` in one pair of tensors."""
    xs, ys = zip(*batches())
    return torch.cat(xs), torch.cat(ys)
