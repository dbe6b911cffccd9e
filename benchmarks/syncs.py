"""Host reads per training step of every method, under the plugin's ``pretrain`` (solo-learn's
training step inside): on the CPU every host read of a tensor value (``solo_hyper.syncs.HostReads``),
on CUDA every synchronising call (``solo_hyper.syncs.SyncWarnings``, under
``torch.cuda.set_sync_debug_mode("warn")``: host-to-device copies and ``mem_get_info`` included).

    python benchmarks/syncs.py [--steps 8] [--methods hcl ebclr ...] [--device cpu|cuda]

Prints, per method, the reads of the first step (set-up, the full input checks), of the
steady-state steps that are not logging steps (the count the step itself costs: 0 is the goal),
scaled to 100 steps, and the code lines that made them, and the resampling calls of a steady
step against its crop batches (one each: the crops of a batch are resized together, never image
by image).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
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
    # solo-learn's LARS (BYOL's recipe and most baselines') reads each parameter's trust-ratio
    # norms back in its update (solo/utils/lars.py): solo-learn's code, out of scope
    # (docs/performance.md); the step around it is counted under SGD
    "byol": ["optimizer.name=sgd"],
}


# Reads of tensors that live on the host by design, which a CPU count cannot tell apart:
# torch.optim's Adam keeps its step count on the CPU (unless capturable or fused) and reads it per
# parameter. On CUDA, the warn-mode record (--device cuda, scripts/gpu_smoke.py) is the check that
# none of them waits for the device. The augmentation reads nothing: its random parameters are
# drawn and kept on the batch's device (solo_hyper.augment_ops).
HOST_SIDE = ("/torch/optim/",)
RESAMPLING = ("aten.grid_sampler", "aten.upsample_", "aten._upsample_")  # grid_sample, interpolate


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
    resamplings: list[int] = field(default_factory=list)  # per step, its resampling calls
    crop_batches: list[int] = field(default_factory=list)  # per step, the crop batches it made

    def steady_steps(self) -> list[int]:
        """Indices of the steps after the first that are neither logging steps nor the last (which
        ends the fit: the guard's final read, the end-of-run logging)."""
        return [i for i in range(1, len(self.steps) - 1) if (i + 1) % self.log_every != 0]

    def steady(self) -> list[list]:
        """The host reads of each steady step (``steady_steps``)."""
        return [self.steps[i] for i in self.steady_steps()]

    def steady_resampling(self) -> list[tuple[int, int]]:
        """(resampling calls, crop batches) of each steady step."""
        return [(self.resamplings[i], self.crop_batches[i]) for i in self.steady_steps()]

    def per_100_steps(self, host_side: bool = False) -> float:
        """Reads per 100 steady-state steps: those that may wait for the device, or
        (``host_side``) those of HOST_SIDE."""
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


class Resamplings:
    """``with Resamplings() as counted:`` counts the resampling kernels dispatched meanwhile
    (``counted.calls``; RESAMPLING: ``grid_sample``, ``interpolate``)."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if str(func.overloadpacket).startswith(RESAMPLING):
                    outer.calls += 1
                return func(*args, **(kwargs or {}))

        self.calls, self._mode = 0, Mode()

    def __enter__(self) -> Resamplings:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)


def crop_modules(pl_module) -> list:
    """The first module of every crop pipeline of the method's on-device augmentation (its crop
    or resize: what runs once per crop batch); none for crops from a CPU pipeline."""
    aug = getattr(pl_module, "device_augmentation", None)
    return [] if aug is None else [pipeline[0] for pipeline in aug.pipelines]


def count_reads(
    method: str, steps: int = 8, batch_size: int = 32, device: str = "cpu", log_every: int = 50,
    extra: list[str] = (), recorder: Callable[[], HostReads | SyncWarnings] | None = None,
) -> StepReads:  # fmt: skip
    """Trains ``steps`` steps of ``method`` (its shipped Fashion-MNIST config, shrunk, with
    ``extra`` overrides) with every host read (CPU) or synchronising call (CUDA) and every
    resampling call recorded, split by training step (a step: from the end of the previous one, so
    that the batch's transfer and on-device augmentation count, to its own end), and the crop
    batches each step made.

    Args:
        recorder: makes the recorder (default: ``SyncWarnings`` on cuda, ``HostReads`` else).
    """
    from solo_hyper.run.train import prepare, pretrain
    from solo_hyper.solo import adapter

    reads = recorder() if recorder else SyncWarnings() if device == "cuda" else HostReads()
    resampled, marks, crops = Resamplings(), [], [0]

    class Marks(adapter.LIGHTNING.Callback):
        def on_train_start(self, trainer, pl_module) -> None:
            def count(*args) -> None:
                crops[0] += 1

            for module in crop_modules(pl_module):
                module.register_forward_hook(count)

        def on_train_batch_end(self, *args, **kwargs) -> None:
            marks.append((len(reads), resampled.calls, crops[0]))

    config = ROOT / "configs/pretrain/fashionmnist" / f"{method}.yaml"
    with tempfile.TemporaryDirectory() as run_root:
        overrides = small_config(method, steps, batch_size, "gpu" if device == "cuda" else device,
                                 run_root, log_every, extra)  # fmt: skip
        prep = prepare(str(config), overrides)
        with reads, resampled:
            pretrain(prep, quiet=False, callbacks=[Marks()])
    bounds = [(0, 0, 0), *marks]
    pairs = list(zip(bounds, bounds[1:]))
    return StepReads(
        method, [reads.reads[a[0]:b[0]] for a, b in pairs], log_every,
        resamplings=[b[1] - a[1] for a, b in pairs], crop_batches=[b[2] - a[2] for a, b in pairs],
    )  # fmt: skip


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
    resampling = sorted(set(result.steady_resampling()))
    lines = [f"{result.method:<10} first step {first:>4}   steady state {result.per_100_steps():6.1f} "
             f"per 100 steps, + {result.per_100_steps(host_side=True):.0f} host-side (Adam's step "
             f"count) ({len(steady)} steps counted); resampling calls / crop batches per steady "
             f"step: {', '.join(f'{a}/{b}' for a, b in resampling)}"]  # fmt: skip
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
