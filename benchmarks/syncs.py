"""Host reads per training step of every method, under the plugin's ``pretrain`` (solo-learn's
training step inside): on the CPU every host read of a tensor value (``solo_hyper.syncs.HostReads``),
on CUDA every synchronising call (``solo_hyper.syncs.SyncWarnings``, under
``torch.cuda.set_sync_debug_mode("warn")``: host-to-device copies and ``mem_get_info`` included).

    python benchmarks/syncs.py [--steps 8] [--methods hcl ebclr ...] [--device cpu|cuda]

Prints, per method, the reads of the first step (set-up, the full input checks), of the
steady-state steps that are not logging steps (the count the step itself costs: 0 is the goal),
scaled to 100 steps, and the code lines that made them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from solo_hyper.syncs import CUDA_SYNC, HostReads, SyncWarnings  # noqa: E402

# the methods of issue 47's list: the plugin's, the supervised baseline, two of solo's own
METHODS = ("hcl", "shcl", "rhcl", "rocl", "ebclr", "supervised", "simclr", "byol")
SMALL = {  # shrinks a shipped config to a few cheap steps; the method's arithmetic is unchanged
    # the buffer on the training device: a buffer in host memory (the shipped configs'
    # buffer_device: cpu, for memory) copies its chains to the device and back every step
    "ebclr": ["method_kwargs.buffer_size=256", "method_kwargs.sgld_steps=2",
              "method_kwargs.buffer_device=device"],
    "rhcl": ["method_kwargs.steps=2"],
    "rocl": ["method_kwargs.steps=2"],
}


# Reads of tensors that live on the host by design, which a CPU count cannot tell apart: kornia
# draws its per-image random parameters on the host and reads them back (its crop2d: "costs no
# device synchronization for the CPU boxes the augmentations pass"); torch.optim's Adam keeps its
# step count on the CPU (unless capturable or fused) and reads it per parameter. On CUDA, the
# warn-mode record (--device cuda, scripts/gpu_smoke.py) is the check that none of them waits for
# the device.
HOST_SIDE = ("/kornia/", "/torch/optim/")


def waits_for_device(read) -> bool:
    """Whether a read may wait for the device: every synchronising CUDA call, and all host reads
    but the host-side ones of HOST_SIDE."""
    if read.kind == CUDA_SYNC:
        return True
    return not any(part in read.where or part in read.origin for part in HOST_SIDE)


@dataclass
class StepReads:
    """The host reads of each training step of one run (step 0 includes the set-up)."""

    method: str
    steps: list[list]  # per step, its HostRead records
    log_every: int

    def steady(self) -> list[list]:
        """Steps after the first that are neither logging steps nor the last (which ends the
        fit: the guard's final read, the end-of-run logging)."""
        return [
            reads for i, reads in enumerate(self.steps[1:-1], start=1)
            if (i + 1) % self.log_every != 0
        ]  # fmt: skip

    def per_100_steps(self, host_side: bool = False) -> float:
        """Reads per 100 steady-state steps: those that may wait for the device, or
        (``host_side``) kornia's reads of its host-drawn parameters."""
        steady = self.steady()
        count = sum(waits_for_device(r) != host_side for step in steady for r in step)
        return 100.0 * count / max(len(steady), 1)


def small_config(method: str, steps: int, batch_size: int, device: str, run_root: str,
                 log_every: int, extra: list[str] = ()) -> list[str]:  # fmt: skip
    """Overrides of the shipped Fashion-MNIST config of ``method`` for a short counted run."""
    return [
        f"optimizer.batch_size={batch_size}", f"data.train_subset={batch_size * steps}",
        "data.val_subset=64", f"max_steps={steps}", "max_epochs=1", f"log_every_n_steps={log_every}",
        f"checkpoint.dir={run_root}", "auto_resume.enabled=false", f"accelerator={device}",
        "enable_progress_bar=true", "enable_model_summary=false", "num_sanity_val_steps=0",
        *SMALL.get(method, []), *extra,
    ]  # fmt: skip


def count_reads(
    method: str, steps: int = 8, batch_size: int = 32, device: str = "cpu", log_every: int = 50,
    extra: list[str] = (), recorder: Callable[[], HostReads | SyncWarnings] | None = None,
) -> StepReads:  # fmt: skip
    """Trains ``steps`` steps of ``method`` (its shipped Fashion-MNIST config, shrunk, with
    ``extra`` overrides) with every host read (CPU) or synchronising call (CUDA) recorded, split
    by training step (a step: from the end of the previous one, so that the batch's transfer and
    on-device augmentation count, to its own end).

    Args:
        recorder: makes the recorder (default: ``SyncWarnings`` on cuda, ``HostReads`` else).
    """
    from solo_hyper.run.train import prepare, pretrain
    from solo_hyper.solo import adapter

    reads = recorder() if recorder else SyncWarnings() if device == "cuda" else HostReads()
    marks = []

    class Marks(adapter.LIGHTNING.Callback):
        def on_train_batch_end(self, *args, **kwargs) -> None:
            marks.append(len(reads))

    config = ROOT / "configs/pretrain/fashionmnist" / f"{method}.yaml"
    with tempfile.TemporaryDirectory() as run_root:
        overrides = small_config(method, steps, batch_size, "gpu" if device == "cuda" else device,
                                 run_root, log_every, extra)  # fmt: skip
        prep = prepare(str(config), overrides)
        with reads:
            pretrain(prep, quiet=False, callbacks=[Marks()])
    bounds = [0, *marks]
    return StepReads(method, [reads.reads[a:b] for a, b in zip(bounds, bounds[1:])], log_every)


def short_path(where: str) -> str:
    """A ``file:line`` without the machine's folders: relative to the repository, or from the
    installed package's folder on."""
    for prefix in (f"{ROOT}/", "site-packages/", "dist-packages/"):
        if prefix in where:
            return where.split(prefix, 1)[1]
    return where


def offending_lines(reads, limit: int | None = None) -> list[str]:
    """The reads summarised per line of code, most frequent first: "N x kind at file:line", with
    the innermost frame when it differs (inside torch, say) and the callers of the first read."""
    by_line: dict[tuple[str, str], list] = {}
    for read in reads:
        by_line.setdefault((read.kind, read.where), []).append(read)
    lines = []
    for (kind, where), same in sorted(by_line.items(), key=lambda item: -len(item[1]))[:limit]:
        first = same[0]
        inside = f" (inside {short_path(first.origin)})" if first.origin not in ("", where) else ""
        lines.append(f"{len(same)} x {kind} at {short_path(where)}{inside}")
        if first.callers:
            lines.append("      called from " + " <- ".join(map(short_path, first.callers)))
    return lines


def report(result: StepReads) -> str:
    first, steady = len(result.steps[0]), result.steady()
    lines = [f"{result.method:<10} first step {first:>4}   steady state {result.per_100_steps():6.1f} "
             f"per 100 steps, + {result.per_100_steps(host_side=True):.0f} host-side (kornia's "
             f"parameters, Adam's step count) ({len(steady)} steps counted)"]  # fmt: skip
    lines += [f"    {line}" for line in offending_lines([r for step in steady for r in step], 8)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args(argv)
    import warnings

    warnings.filterwarnings("ignore")
    for method in args.methods:
        result = count_reads(method, args.steps, args.batch_size, args.device)
        print(report(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
