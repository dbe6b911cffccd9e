"""The class-stratified evaluation subset: quotas per class, the same images whatever the
batching, and reading stops once every quota is filled."""

from __future__ import annotations

import pytest
import torch

from solo_hyper.evaluation.stratified import first, quotas, stratified


def test_quotas_share_the_images_evenly_the_remainder_to_the_lowest_classes():
    assert quotas(500, 10) == [50] * 10
    assert quotas(7, 3) == [3, 2, 2]
    with pytest.raises(ValueError, match="images >= 1"):
        quotas(0, 10)


def test_the_subset_is_the_first_images_of_each_class_whatever_the_batching():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 4, (200,), generator=g)
    x = torch.arange(200).float().view(-1, 1)
    expected = torch.cat([(y == c).nonzero().flatten()[:5] for c in range(4)]).sort().values
    for size in (7, 64, 200):
        read = []

        def batches(size=size, read=read):
            for i in range(0, 200, size):
                read.append(i)
                yield x[i : i + size], y[i : i + size]

        xs, ys = first(stratified(batches, 20, 4))
        assert torch.equal(xs.flatten().long(), expected)
        assert torch.bincount(ys, minlength=4).tolist() == [5, 5, 5, 5]
        assert read[-1] < expected.max()  # stopped once every class had its five
    with pytest.raises(ValueError, match="label 4 outside the 4 classes"):
        first(stratified(lambda: iter([(x[:2], torch.tensor([0, 4]))]), 20, 4))
