"""The plain-PyTorch step reads nothing back from the device after the first step (issue 47),
and a NaN crop is still refused, with the crop named and counted, on the first step and on
demand."""

from __future__ import annotations

import pytest
import torch
from test_objectives import CASES, encoder, fixed_batch

from solo_hyper.objectives import Net, ReplayChains
from solo_hyper.syncs import HostReads


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_plain_pytorch_step_reads_nothing_back_after_the_first(name):
    """The README's plain-PyTorch loop: steps 2-5 make no host read."""
    torch.manual_seed(0)
    objective = CASES[name]()
    net = Net(encoder(), objective.head(32))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    batch = fixed_batch(objective)
    chains = ReplayChains(objective.args, shape=(3, 16, 16)) if objective.step_inputs else None
    counts = []
    with HostReads() as reads:
        for _ in range(5):
            start = len(reads)
            inputs = {"chains": chains.draw(batch[1][0])} if chains else {}
            loss, _ = objective.step(net, batch, **inputs)
            opt.zero_grad()
            loss.backward()
            opt.step()
            counts.append([str(r) for r in reads.since(start)])
    assert counts[0], "the first step checks the crops' values"
    assert counts[1:] == [[]] * 4


def nan_crop(batch: list) -> list:
    crop = batch[1][1].clone()
    crop[1, 0, 2, 3] = float("nan")
    return [batch[0], [batch[1][0], crop], batch[2]]


def test_a_nan_crop_is_refused_on_the_first_step_and_on_demand():
    objective = CASES["hcl"]()
    net = Net(encoder(), objective.head(32))
    bad = nan_crop(fixed_batch(objective))
    with pytest.raises(ValueError, match=r"HCL: crop 1 holds NaN values \(1 of 12288\)"):
        objective.step(net, bad)  # the first step
    objective.step(net, fixed_batch(objective))
    with HostReads() as reads:
        objective.step(net, bad)  # later steps check the structure only: no read, no error
    assert len(reads) == 0
    with pytest.raises(ValueError, match=r"HCL: crop 1 holds NaN values \(1 of 12288\)"):
        objective.check_batch(bad)  # on demand
    objective.check_every_step = True
    with pytest.raises(ValueError, match=r"HCL: crop 1 holds NaN values \(1 of 12288\)"):
        objective.step(net, bad)
