"""Cost of one EBCLR training step relative to one SimCLR step, and of the MSGLD sampler.

Not a test: prints medians and ratios. Both methods run through a Lightning Trainer on the same
backbone (the small CNN of configs/pretrain/fashionmnist/ebclr.yaml), the same batch size and
the same in-memory 28 px images; a step is the wall time from the end of one training batch to the
end of the next (``solo_hyper.run.throughput.Throughput``: fetch, augmentation, the replay
buffer's hooks, SGLD, forward, backward, optimiser). The official code
costs about 6.5x SimCLR per step at T=10 (13 forward and 13 backward passes against 2 and 2).

The sampler is compared with the official code's way (``log_q.sum().backward()``, which also
accumulates a gradient into every weight at every SGLD step).

    python benchmarks/ebclr_step.py [--batch-size 128] [--steps 8] [--rounds 3] [--sgld-steps 10]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.data import InMemoryImages, _batch_is_ready
from solo_hyper.run.throughput import Throughput
from solo_hyper.run.train import prepare
from solo_hyper.sgld import noise_std
from solo_hyper.solo import adapter

EBCLR_CONFIG = "configs/pretrain/fashionmnist/ebclr.yaml"
SIMCLR_CONFIG = "configs/pretrain/fashionmnist/simclr.yaml"


def loaders(n: int, batch_size: int):
    from torch.utils.data import DataLoader

    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 1, 28, 28), dtype=torch.uint8, generator=g)
    targets = torch.randint(0, 10, (n,), generator=g)
    train = InMemoryImages(images, targets, with_index=True)
    return DataLoader(
        train, batch_size=batch_size, shuffle=True, drop_last=True, collate_fn=_batch_is_ready
    )


def build(config: str, overrides: list[str]):
    prep = prepare(config, overrides)
    return adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)


def time_fit(model, loader, steps: int, warmup: int = 2) -> list[float]:
    """Seconds of each step after ``warmup`` ones (``Throughput``: batch end to batch end)."""
    timer = Throughput()
    callbacks = [timer]  # the model attaches its own (EBCLR: its replay buffer)
    trainer = adapter.LIGHTNING.Trainer(
        max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
        callbacks=callbacks,
    )  # fmt: skip
    trainer.fit(model, loader)
    return timer.seconds[warmup:]


def sampler_inputs(ebclr, b: int):
    """Fixed chains (x, counts), second-view projections z_ref and a generator for timing the
    sampler on 28 px inputs in [-1, 1]."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(b, 3, 28, 28, generator=g).clamp(-1, 1)
    counts = torch.zeros(b)
    with torch.no_grad():
        z_ref = ebclr(torch.randn(b, 3, 28, 28, generator=g))["z"]
    return x, counts, z_ref, g


def sampler_official_way(model, x, counts, z_ref) -> torch.Tensor:
    """MSGLD as the official code runs it: backward() through the whole net at every step."""
    a = model.args
    sigma = noise_std(counts, a.sigma_min, a.sigma_max, a.noise_decay_K).view(-1, 1, 1, 1)
    x = x.detach().clone()
    for _ in range(a.sgld_steps):
        x.requires_grad_(True)
        model.objective.log_density(model, x, z_ref).sum().backward()
        grad = x.grad.clamp(-a.sgld_grad_clamp, a.sgld_grad_clamp)
        x = (x.detach() + a.sgld_step_size * grad + sigma * torch.randn_like(x)).detach()
    return x


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=8, help="training steps per fit")
    parser.add_argument("--rounds", type=int, default=3, help="SimCLR/EBCLR fits, interleaved")
    parser.add_argument("--sgld-steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    adapter.LIGHTNING.seed_everything(0)

    b = args.batch_size
    common = [f"optimizer.batch_size={b}", "knn_eval.enabled=false", "checkpoint.enabled=false"]
    ebclr_overrides = common + [
        f"method_kwargs.sgld_steps={args.sgld_steps}",
        "method_kwargs.buffer_size=2048",
    ]
    backbone = build(EBCLR_CONFIG, ebclr_overrides).solo_hyper_config["backbone"]
    kwargs = ", ".join(f"{k}: {v}" for k, v in backbone["kwargs"].items())
    simclr_overrides = common + [f"backbone.kwargs={{{kwargs}}}", "scheduler.name=none"]
    loader = loaders((args.steps + 2) * b, b)
    # interleaved rounds: a busy machine slows both methods alike within a round
    ratios, t_simclr, t_ebclr = [], [], []
    for _ in range(args.rounds):
        s = statistics.median(time_fit(build(SIMCLR_CONFIG, simclr_overrides), loader, args.steps))
        e = statistics.median(time_fit(build(EBCLR_CONFIG, ebclr_overrides), loader, args.steps))
        t_simclr.append(s)
        t_ebclr.append(e)
        ratios.append(e / s)
    print(f"backbone {backbone['name']} {backbone['kwargs']}, batch {b}, T={args.sgld_steps}, "
          f"{args.threads} threads; per round the median of {args.steps - 2} steps, then the "
          f"median over {args.rounds} interleaved rounds")  # fmt: skip
    print(f"  SimCLR step: {1000 * statistics.median(t_simclr):8.1f} ms")
    print(f"  EBCLR step:  {1000 * statistics.median(t_ebclr):8.1f} ms")
    print(f"  ratio EBCLR/SimCLR: {statistics.median(ratios):.2f}x  (rounds: "
          f"{', '.join(f'{r:.2f}' for r in ratios)}; official code: about 6.5x at T=10)")  # fmt: skip

    # the sampler alone: input gradients only vs the official code's backward() into every weight
    ebclr = build(EBCLR_CONFIG, ebclr_overrides)
    x, counts, z_ref, g = sampler_inputs(ebclr, b)
    ours, official = [], []
    untouched = True
    for _ in range(args.rounds * 2 + 1):  # interleaved again, first pair is a warm-up
        ebclr.zero_grad(set_to_none=True)
        ours.append(timed(lambda: ebclr.objective.sample_negatives(ebclr, x, counts, z_ref, g)))
        untouched &= all(p.grad is None for p in ebclr.parameters())
        official.append(timed(lambda: sampler_official_way(ebclr, x, counts, z_ref)))
    pair = [o / u for u, o in zip(ours[1:], official[1:])]
    print(
        f"MSGLD sampler, {args.sgld_steps} steps on {b} chains (median of {len(pair)}, interleaved):"
    )
    print(f"  input gradients only (ours):       {1000 * statistics.median(ours[1:]):8.1f} ms  "
          f"(no parameter .grad written: {untouched})")  # fmt: skip
    print(f"  + parameter gradients (official):  {1000 * statistics.median(official[1:]):8.1f} ms  "
          f"ratio official/ours {statistics.median(pair):.2f}x")  # fmt: skip
    if not math.isfinite(statistics.median(ratios)):
        raise SystemExit("non-finite timing")


if __name__ == "__main__":
    main()
