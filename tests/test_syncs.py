"""HostReads: every read of a tensor value by the host, and every copy onto the CPU from another
device (seen on ``meta``, a device that holds no data: the copy is recorded, then refused)."""

from __future__ import annotations

import pytest
import torch

from solo_hyper.syncs import HostReads

META = torch.device("meta")


@pytest.mark.parametrize(
    "copy, kind",
    [
        (lambda x: x.cpu(), "aten._to_copy to the CPU"),
        (lambda x: x.to("cpu", non_blocking=True), "aten._to_copy to the CPU"),
        (lambda x: torch.zeros(4).copy_(x), "aten.copy_ to the CPU"),
    ],
)
def test_a_copy_onto_the_cpu_from_another_device_is_recorded_with_its_line(copy, kind):
    x = torch.zeros(4, device=META)
    with HostReads() as reads:
        with pytest.raises(NotImplementedError, match="meta"):
            copy(x)
    assert [r.kind for r in reads.reads] == [kind]
    assert reads.reads[0].where.endswith(f"test_syncs.py:{copy.__code__.co_firstlineno}")


def test_copies_within_a_device_and_onto_it_are_not_reads():
    x = torch.zeros(4)
    with HostReads() as reads:
        x.clone()
        torch.zeros(4).copy_(x)
        x.to(META)
        torch.zeros(4, device=META).copy_(torch.ones(4, device=META))
    assert reads.reads == []


def test_a_scalar_read_on_another_device_is_recorded_once():
    x = torch.zeros(4, device=META)
    with HostReads() as reads:
        with pytest.raises(RuntimeError, match="meta"):
            x.sum().item()
    assert [r.kind for r in reads.reads] == ["item"]
