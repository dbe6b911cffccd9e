"""The checks of ``scripts/gpu_smoke.py``, as functions that return rows of its table
(check | result | number | verdict), so that tests run them on the CPU.

- ``cuda_check``: a usable CUDA device, or why not (torch's build, the driver, torch.cuda's own
  error).
- ``step_checks``: a training step of a GPU config (default: CIFAR-10 HCL, ResNet-18 with the
  CIFAR stem on 32 px crops) at the config's precision on random images: losses finite, the
  crops made on the device, the dtypes, images/s (batch end to batch end), the step's rate
  against a dense matmul in the step's dtype, and the same step in channels-last.
- ``sync_checks``: a few ``pretrain`` steps of one method of each family with every
  synchronising CUDA call recorded (``torch.cuda.set_sync_debug_mode("warn")``) or, on the CPU,
  every host read (``HostReads``), each offending line named.

A verdict is "ok", "FAIL" (the script exits 1) or "info" (a figure, no threshold).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

STEP_CONFIG = ROOT / "configs/pretrain/cifar10/hcl.yaml"
SYNC_METHODS = ("hcl", "rhcl", "ebclr", "simclr")  # one of each family, and a solo-learn method
SYNC_STEPS = 5  # the first (set-up) and the last (end of the fit) are not counted: 3 steady steps
STAND_IN = "CPU STAND-IN (--device cpu): NOT A GPU CHECK"
HEADER = ("check", "result", "number", "verdict")


@dataclass(frozen=True)
class Check:
    """One row of the smoke table."""

    check: str
    result: str
    number: str = ""
    verdict: str = "ok"

    @property
    def failed(self) -> bool:
        return self.verdict == "FAIL"


def format_checks(rows: Sequence[Check]) -> str:
    """The rows as a Markdown table (check | result | number | verdict)."""
    from benchmarks.timing import markdown_table

    return markdown_table(HEADER, [(r.check, r.result, r.number, r.verdict) for r in rows])


def failure(check: str, err: BaseException) -> Check:
    """A check that raised, as a FAIL row naming the error and the line that raised it."""
    frames = traceback.extract_tb(err.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    message = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return Check(check, f"raised {type(err).__name__}: {message}{where}", "", "FAIL")


# ---------------------------------------------------------------------------------- cuda
def nvidia_driver() -> str:
    """The NVIDIA driver's version and the GPUs, as nvidia-smi reports them, in words."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no nvidia-smi on PATH (no NVIDIA driver installed?)"
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version,name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"nvidia-smi did not answer ({err})"
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        said = (out.stderr or out.stdout).strip().splitlines()
        return f"nvidia-smi failed (exit {out.returncode}: {said[0] if said else 'no output'})"
    return "driver " + "; ".join(line.replace(", ", " on ", 1) for line in lines)


def cuda_error() -> str:
    """Why torch sees no CUDA device: torch.cuda's own error where it gives one."""
    import torch

    try:
        torch.cuda.init()
    except Exception as err:  # torch's message: no driver, a driver too old, no device...
        return f"torch.cuda.init(): {' '.join(str(err).split())}"
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f"torch.cuda.is_available() is False (CUDA_VISIBLE_DEVICES={hidden!r})"


def cuda_check() -> Check:
    """A usable CUDA device (ok), or a FAIL row with torch's build, the driver and torch's error:
    a wheel built for a newer CUDA than the driver supports is a failure, not a pass."""
    import torch

    build = f"torch {torch.__version__}, torch.version.cuda {torch.version.cuda}"
    driver = nvidia_driver()
    if not torch.cuda.is_available():
        return Check("cuda", f"no usable CUDA device: {cuda_error()}", f"{build}; {driver}", "FAIL")
    major, minor = torch.cuda.get_device_capability(0)
    name = f"{torch.cuda.get_device_name(0)} (sm_{major}{minor})"
    return Check("cuda", f"{name}; {build}; {driver}", f"{torch.cuda.device_count()} device(s)")


def stand_in_check() -> Check:
    """The cuda row of the CPU stand-in: nothing about a GPU was checked."""
    import torch

    return Check("cuda", "not checked: the CPU stand-in runs the checks below on the CPU",
                 f"torch {torch.__version__}, torch.version.cuda {torch.version.cuda}",
                 "NOT A GPU CHECK")  # fmt: skip


def precision_check(device: str, precision: str) -> Check | None:
    """A FAIL row when the GPU cannot run the config's precision (bf16 before Ampere)."""
    import torch

    if device == "cuda" and "bf16" in precision and not torch.cuda.is_bf16_supported():
        return Check("precision", f"{torch.cuda.get_device_name(0)} does not support bf16, "
                     f"which the config trains in ({precision})", "", "FAIL")  # fmt: skip
    return None


# ---------------------------------------------------------------------------------- step
AUTOCAST_DTYPES = {"bf16": "bfloat16", "16": "float16"}  # Lightning's precision -> autocast


def autocast_dtype(precision: str):
    """The dtype the matmuls of a step at Lightning's ``precision`` run in."""
    import torch

    for key, name in AUTOCAST_DTYPES.items():
        if str(precision).startswith(key):
            return getattr(torch, name)
    return torch.float32


def readable(value: float) -> str:
    """A figure with three significant digits, and no exponent up to the millions."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def rate_text(gflops: float) -> str:
    return f"{readable(gflops / 1000)} TFLOPS" if gflops >= 1000 else f"{readable(gflops)} GFLOPS"


def stem(module) -> str:
    """" (CIFAR stem)" for a ResNet whose first convolution is 3 x 3 (32 px images), else ""."""
    conv1 = getattr(module.encoder, "conv1", None)
    return " (CIFAR stem)" if getattr(conv1, "kernel_size", None) == (3, 3) else ""


def describe(tensor) -> str:
    return f"{str(tensor.dtype).replace('torch.', '')} on {tensor.device}"


def probes():
    """A Lightning callback that records the dtypes and device of the crops, the backbone's
    features and z (the loss input), and each step's loss (kept on the device: no host read)."""
    from solo_hyper.solo import adapter

    class Probes(adapter.LIGHTNING.Callback):
        def __init__(self) -> None:
            self.seen: dict[str, str] = {}
            self.losses: list = []
            self.module = None

        def on_fit_start(self, trainer, module) -> None:
            self.module = module
            aug = module.device_augmentation
            crops = aug.crops

            def probed_crops(*args, **kwargs):
                out = crops(*args, **kwargs)
                self.seen["crops"] = describe(out[0])
                return out

            aug.crops = probed_crops
            for name, part in (("features", module.encoder), ("z", module.projector)):
                part.register_forward_hook(
                    lambda m, i, out, name=name: self.seen.__setitem__(name, describe(out))
                )

        def on_train_batch_end(self, trainer, module, outputs, *args) -> None:
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
            self.losses.append(loss.detach())

    return Probes()


def step_checks(device: str, steps: int, batch_size: int | None = None,
                config: Path = STEP_CONFIG) -> list[Check]:  # fmt: skip
    """Rows of a training step of ``config`` at its precision, on random images of its crop
    size: the step (losses finite, images/s), the dtypes, the dense rate, the step's fraction of
    it, channels-last. ``steps``: at least 3 (a warm-up step and a FLOP-counted one are not
    timed); ``batch_size``: the config's by default."""
    import torch

    from benchmarks.images import random_rgb
    from benchmarks.step_limit import matmul_gflops, run_steps
    from solo_hyper.run.train import prepare
    from solo_hyper.solo import adapter

    cfg = prepare(str(config)).cfg
    precision = str(cfg["precision"])
    batch = batch_size or int(cfg["optimizer"]["batch_size"])
    size = max(a["crop_size"] for a in cfg["augmentations"])
    images, targets = random_rgb(batch * steps, size)
    probe = probes()
    run = run_steps(cfg["method"], batch, steps, device, config=config, images=(images, targets),
                    callbacks=[probe])  # fmt: skip
    as_configured = run.precision == str(adapter.trainer_precision(precision))
    ran = precision if as_configured else f"{run.precision} (config: {precision})"
    crops = sum(a["num_crops"] for a in cfg["augmentations"])
    what = (f"{cfg['name']}: {cfg['backbone']['name']}{stem(probe.module)}, {crops} crops of "
            f"{size} px, batch {batch}, {ran}")  # fmt: skip
    losses = torch.stack(probe.losses).float().cpu()
    finite = bool(torch.isfinite(losses).all()) and len(losses) == steps
    step = statistics.median(run.seconds)
    rows = [Check("step", f"{what}; {len(losses)} losses, all finite: {finite}",
                  f"{readable(batch / step)} images/s ({readable(1000 * step)} ms/step)",
                  "ok" if finite else "FAIL")]  # fmt: skip

    seen = {k: probe.seen.get(k, "never produced") for k in ("crops", "features", "z")}
    on_device = seen["crops"].split(" on ")[-1].split(":")[0] == device  # made on the device
    space = getattr(probe.module, "embedding_space", None)
    z_right = not getattr(space, "curved", False) or seen["z"].startswith("float32 ")
    rows.append(Check("dtypes", f"crops {seen['crops']}; features {seen['features']}; z {seen['z']}"
                      + ("" if z_right else " (a curved space's math needs float32)"),
                      "", "ok" if on_device and z_right else "FAIL"))  # fmt: skip

    dtype = autocast_dtype(run.precision)
    n = 8192 if device == "cuda" else 512
    rate = matmul_gflops(device, n=n, repeats=10, dtype=dtype)
    name = str(dtype).replace("torch.", "")
    if device == "cuda" and dtype == torch.float32:
        name += f" (TF32 {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'})"
    rows.append(Check("dense rate", f"{n} x {n} {name} matmul", rate_text(rate), "info"))
    achieved = run.flops / step / 1e9
    rows.append(Check("step / dense rate",
                      f"{run.flops / 1e9:.1f} GFLOP per step (torch.utils.flop_counter: matmuls "
                      f"and convolutions, forward and backward) over its median time",
                      f"{achieved / rate:.2f} of the dense rate ({rate_text(achieved)})",
                      "info"))  # fmt: skip
    last = run_steps(cfg["method"], batch, steps, device, channels_last=True, count_flops=False,
                     config=config, images=(images, targets))  # fmt: skip
    rows.append(Check("channels-last", "the same step in channels-last (run.layout)",
                      f"{step / statistics.median(last.seconds):.2f}x the default's images/s",
                      "info"))  # fmt: skip
    return rows


# ---------------------------------------------------------------------------------- syncs
def fashion_mnist_folder(data: str | None, scratch: Path, n_train: int, n_test: int) -> tuple[Path, str]:
    """(a folder holding Fashion-MNIST's four idx files, where it came from): ``data`` or where
    the project looks for the dataset, or else random images written in its format to
    ``scratch``."""
    from benchmarks.images import write_random_idx
    from solo_hyper.data import holds_idx, locate_fashion_mnist

    folder = Path(data) if data else locate_fashion_mnist(None)
    if folder is not None and holds_idx(folder):
        return folder, f"Fashion-MNIST ({folder})"
    write_random_idx(scratch, n_train, n_test)
    where = f"{data} holds no Fashion-MNIST" if data else "no Fashion-MNIST on this machine"
    return scratch, f"random 28 px images ({where})"


def recorder_check(device: str) -> Check:
    """The sync check's recorder sees a planted ``.item()`` of a tensor on ``device`` (on CUDA a
    synchronisation, on the CPU a host read) and names its line: without that, "0 per 100 steps"
    could come from a recorder that sees nothing."""
    import inspect

    import torch

    from solo_hyper.syncs import HostReads, SyncWarnings

    reads = SyncWarnings() if device == "cuda" else HostReads()
    x = torch.ones(2, device=device)
    with reads:
        planted = f"{__file__}:{inspect.currentframe().f_lineno + 1}"
        x.sum().item()
    named = [r for r in reads.reads if r.where == planted]
    return Check("syncs: recorder", f"a planted .item() on {device}: {len(named)} of {len(reads)} "
                 f"records name its line", "", "ok" if named else "FAIL")  # fmt: skip


def sync_checks(device: str, methods: Sequence[str], folder: Path, batch_size: int,
                precision: str | None = None) -> tuple[list[Check], list[str]]:  # fmt: skip
    """(a row per method, the offending lines of every method that synchronised): SYNC_STEPS
    ``pretrain`` steps of each method's shipped Fashion-MNIST config on the images of ``folder``
    (at ``precision`` when given), its steady-state steps' synchronising calls (cuda) or host
    reads that may wait for the device (cpu), summarised per line; first, ``recorder_check``."""
    from benchmarks.syncs import count_reads, offending_lines, waits_for_device

    how = ('torch.cuda.set_sync_debug_mode("warn")' if device == "cuda"
           else "host reads (HostReads: a CPU count sees no copies)")  # fmt: skip
    extra = [f"data.train_path={folder}", *([f"precision={precision}"] if precision else [])]
    rows, details = [recorder_check(device)], []
    for method in methods:
        try:
            result = count_reads(method, SYNC_STEPS, batch_size, device, extra=extra)
        except Exception as err:
            rows.append(failure(f"syncs: {method}", err))
            continue
        steady = result.steady()
        waits = [r for step in steady for r in step if waits_for_device(r)]
        per_100 = 100 * len(waits) / max(len(steady), 1)
        verdict = "FAIL" if waits or not steady else "ok"
        rows.append(Check(f"syncs: {method}", f"{how}, {len(steady)} steady-state steps",
                          f"{per_100:.0f} per 100 steps", verdict))  # fmt: skip
        if waits:
            details += [f"{method}: {len(waits)} in {len(steady)} steady-state steps, per line:"]
            details += [f"  {line}" for line in offending_lines(waits)]
    return rows, details
