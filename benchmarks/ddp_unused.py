"""What DDP's search for unused parameters costs per step (two CPU ranks, gloo).

Lightning 1.9's ``strategy="ddp"`` wraps the model with ``find_unused_parameters=True``: after
every forward, DDP walks the autograd graph from the outputs to find parameters that will get no
gradient. No method here leaves one unused, so ``pretrain`` asks for DDP without the search
(``adapter.trainer_strategy``; Lightning 2's default). Both variants train the same HCL step
(small CNN backbone, projector onto the Poincare ball, the gathered InfoNCE) in the same
processes, interleaved, on the same batches.

    python benchmarks/ddp_unused.py [--batch-size 64] [--steps 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model() -> torch.nn.Module:
    from solo_hyper.backbones import build_backbone
    from solo_hyper.geometry import make_space
    from solo_hyper.heads import SpaceProjector, mlp_projector

    backbone = build_backbone("small_cnn", width=16)
    head = SpaceProjector(mlp_projector(backbone.num_features, 256, 64), make_space("poincare", 0.1))
    return torch.nn.Sequential(backbone, head)


def _worker(rank: int, port: int, batch_size: int, steps: int, rounds: int, queue) -> None:
    from torch.nn.parallel import DistributedDataParallel

    from solo_hyper.distributed import gather_with_grad
    from solo_hyper.geometry import make_space
    from solo_hyper.losses import contrastive_loss

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    space = make_space("poincare", 0.1)
    g = torch.Generator().manual_seed(rank)
    batches = [torch.randn(2 * batch_size, 3, 28, 28, generator=g) for _ in range(4)]
    ids = torch.arange(batch_size).repeat(2) + rank * batch_size
    models = {}
    for search in (True, False):
        torch.manual_seed(0)
        models[search] = DistributedDataParallel(_model(), find_unused_parameters=search)
    optims = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in models.items()}
    times: dict[bool, list[float]] = {True: [], False: []}

    def step(search: bool, x: torch.Tensor) -> None:
        z = models[search](x)
        z_all, ids_all = gather_with_grad(z), gather_with_grad(ids)
        loss = contrastive_loss(z_all, ids_all, 0.2, space=space)
        optims[search].zero_grad()
        loss.backward()
        optims[search].step()

    for r in range(rounds + 1):  # round 0: warm-up
        for search in (True, False) if r % 2 else (False, True):
            per_step = []
            for i in range(steps):
                dist.barrier()
                t0 = time.perf_counter()
                step(search, batches[i % len(batches)])
                per_step.append(time.perf_counter() - t0)
            if r > 0:
                times[search].append(statistics.median(per_step))
    if rank == 0:
        queue.put(times)
    dist.destroy_process_group()


def step_times(batch_size: int = 64, steps: int = 8, rounds: int = 3) -> dict[bool, list[float]]:
    """{find_unused_parameters: per-round median step seconds} of rank 0."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _port()
    procs = [
        ctx.Process(target=_worker, args=(r, port, batch_size, steps, rounds, queue))
        for r in range(2)
    ]
    for p in procs:
        p.start()
    times = queue.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    return times


def ddp_rows(batch_size: int = 64, steps: int = 8, rounds: int = 3) -> list:
    """The suite's row: step time with the search over without it (per-round ratios)."""
    from benchmarks.timing import Row, paired_ratios, summarize

    times = step_times(batch_size, steps, rounds)
    ms = {k: 1000 * statistics.median(v) for k, v in times.items()}
    return [
        Row("ddp", "find_unused_parameters=True", "False (pretrain's DDP)",
            f"HCL step time (small_cnn, 2 CPU ranks, batch {batch_size} each)",
            summarize(paired_ratios(times[True], times[False])), None,
            f"{ms[True]:.0f} vs {ms[False]:.0f} ms")
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    times = step_times(args.batch_size, args.steps, args.rounds)
    with_search, without = times[True], times[False]
    ratios = [a / b for a, b in zip(with_search, without)]
    print(f"HCL step, small_cnn, 2 CPU ranks (gloo), batch {args.batch_size} per rank, "
          f"{args.rounds} rounds of {args.steps} steps")  # fmt: skip
    print(f"find_unused_parameters=True : {1000 * statistics.median(with_search):.1f} ms")
    print(f"find_unused_parameters=False: {1000 * statistics.median(without):.1f} ms")
    print(f"ratio True/False: median {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
