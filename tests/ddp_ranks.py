"""The tests' DDP harness: a function run on each of ``world`` CPU ranks of one gloo process group,
each rank a forked process (what the function needs travels by fork: models, tensors, closures),
its result sent back; a rank's error fails the test with that rank's traceback."""

from __future__ import annotations

import multiprocessing
import os
import socket
import traceback
from collections.abc import Callable

import torch
import torch.distributed as dist


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(body: Callable[[int], dict], rank: int, world: int, port: int, queue) -> None:
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        torch.set_num_threads(1)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        out = body(rank)
        dist.destroy_process_group()
        queue.put((rank, out))
    except Exception:  # surface the rank's error in the test
        queue.put((rank, traceback.format_exc()))


def run_ranks(body: Callable[[int], dict], world: int = 2, timeout: float = 120.0) -> dict[int, dict]:
    """``body(rank)`` on each rank (plain values back: tensors would travel as shared memory that
    dies with the rank's process); returns each rank's dict by rank."""
    ctx = multiprocessing.get_context("fork")
    queue, port = ctx.Queue(), _free_port()
    workers = [ctx.Process(target=_rank, args=(body, r, world, port, queue)) for r in range(world)]
    for w in workers:
        w.start()
    results = dict(queue.get(timeout=timeout) for _ in workers)
    for w in workers:
        w.join(timeout=20)
    for rank in range(world):
        assert isinstance(results[rank], dict), results[rank]
    return results
