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


def test_the_subset_bar_counts_its_images_to_the_end(monkeypatch):
    """The bar of a subset counts images: it ends at the subset's size, where a bar over the
    loader's batches would stop part-way (the loader is left unread once the quotas fill)."""
    from solo_hyper.evaluation import progress

    bars = []

    class Bar:  # records what the bar is told (tqdm's own display is rate-limited)
        def __init__(self, total, **options):
            self.total, self.n, self.options = total, 0, options
            bars.append(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n):
            self.n += n

    monkeypatch.setattr(progress, "tqdm", Bar)
    y = torch.arange(400) % 4
    x = torch.arange(400).float().view(-1, 1)
    read = []

    def batches():
        for i in range(0, 400, 64):
            read.append(i)
            yield x[i : i + 64], y[i : i + 64]

    subset = stratified(batches, 40, 4)
    passed = list(progress.image_progress(subset, 40, "test images")())
    assert [len(b) for _, b in passed] == [len(b) for _, b in subset()] == [40]
    assert (bars[0].total, bars[0].n, bars[0].options["disable"]) == (40, 40, False)
    assert read[:1] == [0] and len(read) == 2  # one batch per pass: the loader was left early
    list(progress.image_progress(subset, 40, "test images", enabled=False)())
    assert bars[1].options["disable"] is True
