"""Where numbers were computed: the CPU model, the torch build, the intra-op threads and the
devices of the process that trained a run. Results are bit-identical only for the same seed on
the same CPU model, torch build and thread count (see the README's main job), so a run records
its own (result.json's ``machine``) and a table names the machine of its runs: for runs trained
as cluster jobs, the jobs', not the process that tabulated them."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe(device: torch.device | None = None, processes: int = 1) -> dict:
    """This process's machine: its CPU, torch build, intra-op threads and ``device`` (the
    training device: a GPU's name, else "no GPU"), with the run's ``processes`` (DDP ranks)."""
    on_gpu = device is not None and device.type == "cuda"
    gpu = torch.cuda.get_device_name(device) if on_gpu else "no GPU"
    return {"cpu": cpu_model(), "cpus": os.cpu_count(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "device": gpu, "processes": int(processes)}  # fmt: skip


def _text(m: dict) -> str:
    ranks = f" in each of {m['processes']} processes" if m.get("processes", 1) > 1 else ""
    return (f"{m['cpu']}, {m['cpus']} CPUs, torch {m['torch']} with {m['threads']} intra-op "
            f"threads{ranks}, {m['device']}")  # fmt: skip


def machine_line(machines: list[dict]) -> str:
    """The table's ``Machine:`` line: the machines the rows were computed on (each once, in
    order), or this process's when no row recorded one."""
    if not machines:
        current = describe(torch.device("cuda", 0) if torch.cuda.is_available() else None)
        return f"Machine: {_text(current)}."
    texts = list(dict.fromkeys(_text(m) for m in machines))
    return ("Machine: " if len(texts) == 1 else "Machines: ") + "; ".join(texts) + "."


__all__ = ["cpu_model", "describe", "machine_line"]
