"""Training throughput of HCL and SHCL against SimCLR and SupCon on the same backbone and data.

Every method is the LightningModule that ``adapter.build_method`` makes from its
``configs/pretrain/fashionmnist/*.yaml`` (small CNN, 2 crops of 28 px, kornia augmentation on the
device, same projector sizes), trained by a Lightning Trainer on the same images with the same
seed. A step is timed by ``solo_hyper.run.throughput.Throughput`` from the end of the previous
one to its own end (the first from the epoch's start): batch fetch and transfer, augmentation,
forward, loss, backward, optimiser step and Lightning's bookkeeping. The methods alternate in
rounds (one short fit each per round); the throughput ratio is SimCLR's step time over HCL's, per
round.

Full steps on a busy machine vary by +-10% from round to round, more than the difference sought,
so ``head_rows`` also times only what differs between the methods (projector and loss, forward
and backward) interleaved with the backbone's forward and backward on the same crops: the extra
time of HCL's head over SimCLR's as a share of the backbone's time bounds the throughput loss.

The kornia augmentation is timed inside the same steps (its ``crops`` call, GPU work
synchronised), so ``augmentation / step`` shows whether it is the bottleneck of a CPU step.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable

import torch
from torch.utils.data import DataLoader

from benchmarks.images import fashion_mnist_or_random
from benchmarks.timing import Row, interleaved, paired_ratios, summarize, synchronize
from solo_hyper.data import InMemoryImages, _batch_is_ready
from solo_hyper.run.throughput import Throughput
from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter

CONFIGS = {
    "simclr": "configs/pretrain/fashionmnist/simclr.yaml",
    "supcon": "configs/pretrain/fashionmnist/supcon.yaml",
    "hcl": "configs/pretrain/fashionmnist/hcl.yaml",
    "shcl": "configs/pretrain/fashionmnist/shcl.yaml",
}
PAIRS = (("hcl", "simclr"), ("shcl", "supcon"))
WARMUP_STEPS = 2


def time_augmentation(model, device: torch.device) -> list[float]:
    """Wraps the model's kornia ``crops`` so that every call's seconds are recorded."""
    aug = model.device_augmentation
    if aug is None:
        raise ValueError("the benchmark needs on-device augmentation (data.augment_on_device)")
    seconds: list[float] = []
    crops: Callable = aug.crops

    def timed_crops(*args, **kwargs):
        synchronize(device)
        t0 = time.perf_counter()
        out = crops(*args, **kwargs)
        synchronize(device)
        seconds.append(time.perf_counter() - t0)
        return out

    aug.crops = timed_crops
    return seconds


def build(method: str, batch_size: int, overrides: list[str] = ()):
    prep = prepare(CONFIGS[method], [
        f"optimizer.batch_size={batch_size}", "knn_eval.enabled=false", "checkpoint.enabled=false",
        "auto_resume.enabled=false", *overrides,
    ])  # fmt: skip
    return adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)


def fit_steps(
    method: str, loader: DataLoader, steps: int, device: torch.device, overrides: list[str] = ()
) -> tuple[list[float], list[float]]:
    """(step seconds, augmentation seconds) of ``steps`` timed steps after the warm-up ones."""
    gc.collect()  # the previous fit's model and trainer must not be collected during this one
    adapter.LIGHTNING.seed_everything(0, workers=True)
    model = build(method, loader.batch_size, list(overrides))
    aug_seconds = time_augmentation(model, device)
    clock = Throughput(lambda: synchronize(device))
    trainer = adapter.LIGHTNING.Trainer(
        max_steps=WARMUP_STEPS + steps, limit_val_batches=0, num_sanity_val_steps=0,
        accelerator="gpu" if device.type == "cuda" else "cpu", devices=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[clock],
    )  # fmt: skip
    trainer.fit(model, loader)
    step_seconds = clock.seconds[WARMUP_STEPS:]
    if len(step_seconds) != steps or len(aug_seconds) != WARMUP_STEPS + steps:
        raise RuntimeError(
            f"{method}: expected {steps} timed steps, got {len(step_seconds)} "
            f"({len(aug_seconds)} augmentation calls)"
        )
    return step_seconds, aug_seconds[WARMUP_STEPS:]


def throughput_rows(
    batch_size: int = 256,
    steps: int = 6,
    rounds: int = 3,
    device: str = "cpu",
    overrides: list[str] = (),
    methods: tuple[str, ...] = ("simclr", "supcon", "hcl", "shcl"),
) -> list[Row]:
    """Images/s ratios of HCL to SimCLR and SHCL to SupCon, and each method's augmentation share."""
    device = torch.device(device)
    n = batch_size * (WARMUP_STEPS + steps)
    images, targets, source = fashion_mnist_or_random(n)
    data = InMemoryImages(images, targets, with_index=True)
    loader = DataLoader(data, batch_size=batch_size, shuffle=True, drop_last=True,
                        collate_fn=_batch_is_ready, generator=torch.Generator().manual_seed(0))  # fmt: skip
    step: dict[str, list[float]] = {m: [] for m in methods}
    share: dict[str, list[float]] = {m: [] for m in methods}
    for r in range(rounds):
        shift = r % len(methods)
        for method in methods[shift:] + methods[:shift]:
            s, a = fit_steps(method, loader, steps, device, overrides)
            step[method].append(statistics.median(s))
            share[method].append(statistics.median(a) / statistics.median(s))
    where = f"{source}, batch {batch_size}, {device.type}"

    def ips(method: str) -> str:
        return f"{batch_size / summarize(step[method]).median:.0f} img/s"

    rows = [
        Row("throughput", ours, base, f"images/s, train step ({where})",
            summarize(paired_ratios(step[base], step[ours])), ">= 0.95",
            f"{ips(ours)} vs {ips(base)}")
        for ours, base in PAIRS if ours in methods and base in methods
    ]  # fmt: skip
    rows += [
        Row("throughput", f"{m} kornia augmentation", f"{m} train step", f"time share ({where})",
            summarize(share[m]), "<= 0.5",
            f"{1000 * summarize(step[m]).median * summarize(share[m]).median:.1f} ms of "
            f"{1000 * summarize(step[m]).median:.1f} ms")
        for m in methods
    ]  # fmt: skip
    return rows


def head_rows(batch_size: int = 256, rounds: int = 15, device: str = "cpu") -> list[Row]:
    """Projector + loss (forward and backward) of HCL / SHCL against SimCLR / SupCon.

    Rows: the head time ratio, and (ours - baseline) / backbone forward+backward on the same 2
    crops: a share of at most 0.05 means at least 0.95x throughput whatever the machine's noise.
    """
    from solo.losses.simclr import simclr_loss_func

    device = torch.device(device)
    models = {m: build(m, batch_size).to(device) for m in CONFIGS}
    g = torch.Generator().manual_seed(0)
    width = models["simclr"].features_dim
    feats = torch.randn(2 * batch_size, width, generator=g).to(device).requires_grad_(True)
    crops = torch.randn(2 * batch_size, 3, 28, 28, generator=g).to(device)
    indexes = torch.arange(batch_size, device=device)
    targets = torch.randint(0, 10, (batch_size,), generator=g).to(device)

    def ours(method: str):
        model = models[method]

        def step() -> None:
            z = [model.project(f) for f in feats.chunk(2)]
            model.objective.loss(model, (indexes, None, targets), [], z)[0].backward()

        return step

    def solo(method: str):
        model = models[method]

        def step() -> None:
            z1, z2 = (model.projector(f) for f in feats.chunk(2))
            extra = model.gen_extra_positives_gt(targets) if method == "supcon" else None
            simclr_loss_func(z1, z2, model.temperature, extra_pos_mask=extra).backward()

        return step

    def backbone() -> None:
        models["simclr"].encoder(crops).sum().backward()

    variants = {m: ours(m) if m in ("hcl", "shcl") else solo(m) for m in CONFIGS}
    variants["backbone"] = backbone
    times = interleaved(variants, rounds, warmup=1, device=device)
    where = f"batch {batch_size}, {device.type}"
    rows = []
    for mine, base in PAIRS:
        extra = [(a - b) / c for a, b, c in zip(times[mine], times[base], times["backbone"])]
        rows.append(Row(
            "throughput", f"{mine} projector+loss", f"{base} projector+loss",
            f"time fwd+bwd ({where})", summarize(paired_ratios(times[mine], times[base])), None,
            f"{1000 * summarize(times[mine]).median:.1f} vs {1000 * summarize(times[base]).median:.1f} ms",
        ))  # fmt: skip
        rows.append(Row(
            "throughput", f"{mine} head extra time", "small_cnn fwd+bwd (2 crops)",
            f"time share ({where})", summarize(extra), "<= 0.05",
            f"backbone {1000 * summarize(times['backbone']).median:.0f} ms",
        ))  # fmt: skip
    return rows
