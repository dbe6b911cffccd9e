"""The GPU check in one command: a few HCL training steps on CUDA in bf16 with the kornia
augmentation on the GPU, the synchronisation check of the training step, the step's speed
against the GPU's fp32 limit.

    python scripts/gpu_smoke.py [--steps 6] [--batch-size 256] [--config configs/pretrain/fashionmnist/hcl.yaml]
                                [--no-sync-check] [--no-bench]

1. The bf16 steps: prints what it saw, the device and dtype of the augmented crops, the dtype of
   the backbone features (bf16 under autocast) and of z (the hyperbolic math runs in float32),
   every step's loss and whether it is finite, and the median step time after a warm-up step.
2. The synchronisation check (``benchmarks/syncs.py``): for one method of each family (hcl,
   rhcl, ebclr and solo-learn's simclr) a few steps under ``pretrain`` with every host read
   counted, the steady-state steps under ``torch.cuda.set_sync_debug_mode("error")``, which
   raises at any synchronisation (host-to-device copies and ``mem_get_info`` included); prints
   the reads per 100 steps and "sync-free" or the line that synchronised.
3. The benchmarks of ``benchmarks/step_limit.py`` on cuda: the fp32 limit, each method's
   fraction of it, the augmentation's share, channels-last and compile ratios.

Without CUDA (or without bf16 support) it says so and exits 0 having run nothing; it exits 1 if a
loss is not finite or a step synchronised. ``--device cpu`` runs 1 and 2 (without the CUDA sync
mode) on the CPU to check the script itself on a machine without a GPU, and 3 only with
``--bench``; that is not a GPU check and the output says so.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="training steps (first is warm-up)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--config", default=str(ROOT / "configs/pretrain/fashionmnist/hcl.yaml"))
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda",
        help="cpu: the same steps on the CPU, to check this script without a GPU",
    )  # fmt: skip
    parser.add_argument("--no-sync-check", action="store_true", help="leave out check 2")
    parser.add_argument("--bench", action=argparse.BooleanOptionalAction, default=None,
                        help="check 3 (default: on cuda only)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.steps < 2 or args.batch_size < 2:
        parser.error("--steps and --batch-size must be >= 2 (one warm-up step, pairs of views)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print(f"gpu_smoke: no CUDA device visible to torch {torch.__version__} on this machine; "
              "nothing was run (run this script on a machine with an NVIDIA GPU).")  # fmt: skip
        return 0
    name = torch.cuda.get_device_name(0) if cuda else "CPU (--device cpu: NOT a GPU check)"
    if cuda and not torch.cuda.is_bf16_supported():
        print(f"gpu_smoke: {name} does not support bf16; nothing was run.")
        return 0

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    warnings.filterwarnings("ignore")
    import solo_hyper.methods  # noqa: F401  (registers the methods)
    from solo_hyper.data import (
        InMemoryImages,
        _batch_is_ready,
        load_fashion_mnist,
        locate_fashion_mnist,
    )
    from solo_hyper.run.train import prepare
    from solo_hyper.solo import adapter

    warnings.filterwarnings("ignore")
    prep = prepare(args.config, [
        f"optimizer.batch_size={args.batch_size}", "knn_eval.enabled=false",
        "checkpoint.enabled=false", "auto_resume.enabled=false", f"accelerator={'gpu' if cuda else 'cpu'}",
    ])  # fmt: skip
    adapter.LIGHTNING.seed_everything(0)
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)

    n = args.batch_size * args.steps
    if locate_fashion_mnist(None) is not None:
        images, targets = load_fashion_mnist(train=True)
        images, targets, source = images[:n], targets[:n], "Fashion-MNIST"
    else:
        g = torch.Generator().manual_seed(0)
        images = torch.randint(0, 256, (n, 1, 28, 28), dtype=torch.uint8, generator=g)
        targets, source = torch.randint(0, 10, (n,), generator=g), "random 28 px images"
    loader = torch.utils.data.DataLoader(
        InMemoryImages(images, targets, with_index=True), batch_size=args.batch_size,
        drop_last=True, collate_fn=_batch_is_ready, pin_memory=cuda,
    )  # fmt: skip

    seen: dict[str, object] = {}
    crops_fn = model.device_augmentation.crops
    encoder_fwd = model.encoder.forward

    def crops(*a, **k):
        out = crops_fn(*a, **k)
        seen["crops"] = f"{len(out)} x {tuple(out[0].shape)} {out[0].dtype} on {out[0].device}"
        return out

    def encoder(x):
        feats = encoder_fwd(x)
        seen["feats"] = f"{feats.dtype} on {feats.device}"
        return feats

    def projected(module, inputs, z):  # the head's output, whichever path of the step calls it
        seen["z"] = f"{z.dtype} on {z.device}"

    model.projector.register_forward_hook(projected)
    model.device_augmentation.crops, model.encoder.forward = crops, encoder

    class Record(adapter.LIGHTNING.Callback):
        def __init__(self) -> None:
            self.losses: list[float] = []
            self.seconds: list[float] = []

        def on_train_batch_start(self, *a, **k) -> None:
            sync()
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, *a, **k) -> None:
            sync()
            self.seconds.append(time.perf_counter() - self.t0)
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
            self.losses.append(float(loss))

    record = Record()
    trainer = adapter.LIGHTNING.Trainer(
        accelerator="gpu" if cuda else "cpu", devices=1, precision=adapter.trainer_precision("bf16-mixed"),
        max_steps=args.steps, limit_val_batches=0, num_sanity_val_steps=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[record],
    )  # fmt: skip
    trainer.fit(model, loader)

    finite = all(map(lambda v: v == v and abs(v) != float("inf"), record.losses))
    print(f"device: {name} (torch {torch.__version__}, {adapter.API}), precision bf16-mixed")
    print(f"data: {source}, batch {args.batch_size}, {len(record.losses)} steps of "
          f"{prep.cfg['method']} ({prep.cfg['backbone']['name']})")  # fmt: skip
    print(f"augmented crops: {seen.get('crops', 'never produced')}")
    print(f"backbone features: {seen.get('feats', 'never produced')}")
    print(f"z (loss input): {seen.get('z', 'never produced')}")
    losses = ", ".join(f"{v:.4f}" for v in record.losses)
    print(f"training losses (NCE + online classifier): {losses}  (all finite: {finite})")
    if len(record.seconds) > 1:
        print(f"step time: median {1000 * statistics.median(record.seconds[1:]):.1f} ms after a "
              f"{1000 * record.seconds[0]:.0f} ms warm-up step")  # fmt: skip
    ok = finite and len(record.losses) == args.steps
    if not args.no_sync_check:
        ok = sync_check(cuda) and ok
    if args.bench if args.bench is not None else cuda:
        from benchmarks import step_limit

        print("step against the fp32 limit (benchmarks/step_limit.py):", flush=True)
        step_limit.main(["--device", args.device, "--batch-size", str(args.batch_size),
                         "--steps", str(max(args.steps, 4)), "--rounds", "1", "--compile"])  # fmt: skip
    return 0 if ok else 1


SYNC_METHODS = ("hcl", "rhcl", "ebclr", "simclr")  # one of each family, and a solo-learn method


def sync_check(cuda: bool) -> bool:
    """Check 2: the steady-state steps of each family's method read nothing back (and, on cuda,
    do not synchronise at all); True when every one is sync-free."""
    from benchmarks.syncs import count_reads, waits_for_device

    mode = 'torch.cuda.set_sync_debug_mode("error")' if cuda else "the CPU count only (no CUDA)"
    print(f"synchronisation check ({mode}):", flush=True)
    free = True
    for method in SYNC_METHODS:
        try:
            result = count_reads(method, steps=5, batch_size=32, device="cuda" if cuda else "cpu",
                                 sync_debug=cuda)  # fmt: skip
        except RuntimeError as err:  # raised by the sync debug mode at the synchronising call
            print(f"  {method}: SYNCHRONISED in a steady-state step: {err}")
            free = False
            continue
        waits = [str(r) for step in result.steady() for r in step if waits_for_device(r)]
        verdict = "sync-free" if not waits else f"{len(waits)} host reads: {waits[:3]}"
        print(f"  {method}: {result.per_100_steps():.0f} host reads per 100 steady-state steps "
              f"({result.per_100_steps(host_side=True):.0f} host-side), {verdict}", flush=True)  # fmt: skip
        free = free and not waits
    return free


if __name__ == "__main__":
    sys.exit(main())
