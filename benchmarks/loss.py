"""The Poincare InfoNCE against solo-learn's SimCLR loss: time and peak memory of forward+backward.

Every variant gets the same 2N views z (D = 128) on the ball of curvature c, as HCL's projector
makes them (``expmap0`` of unit vectors: every point at hyperbolic distance 2 from the origin),
and the same temperature; solo-learn 1.0.2's ``simclr_loss_func(z1, z2, temperature)`` (which
L2-normalises them) is the baseline. Variants:

- ``fused``: ``contrastive_loss`` on the Poincare ball, hand-written backward (the default);
- ``plain``: the same loss through plain autograd (``fused=False``);
- ``geoopt``: geoopt's broadcasting ``PoincareBall(c).dist(x[:, None], y[None])`` in the same
  InfoNCE: (2N)^2 D memory, the way hyperbolic losses are often written;
- ``compiled``: ``torch.compile`` of the plain path (compilation takes a minute on 2 cores, so
  only in the full run; a failure is reported as a note, not raised);
- ``chunked``: ``contrastive_loss(chunk_size=CHUNK)``, blocks of CHUNK anchors against all 2N
  candidates (``chunked_rows``: 2N up to 16k on the CPU, 64k with ``--device cuda``).

Targets (HCL must cost what SimCLR costs): fused time and peak memory <= 1.5x SimCLR at 2N = 1024
and 4096, and memory O(N^2): the peak divided by one (2N)^2 float32 matrix stays flat as N grows.
Chunked (issue 14): at 2N = 16384 peak memory <= 1/8 and time <= 1.25x the fused path's, and its
peak per view grows by less than 1.5x from 2N = 4096 to 16384 (O(N) memory).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from benchmarks.memory import peak_bytes
from benchmarks.timing import Row, Stat, interleaved, paired_ratios, summarize
from solo_hyper.geometry import expmap0, make_space
from solo_hyper.losses import contrastive_loss

TEMPERATURE = 0.2
CURVATURE = 0.1
BALL = make_space("poincare", CURVATURE)
DIM = 128
CHUNK = 512


def views(n_pairs: int, dim: int = DIM, device: str = "cpu", seed: int = 0):
    """(z, ids): 2N leaf points on the ball (views 1 then views 2) and their instance ids."""
    g = torch.Generator().manual_seed(seed)
    v = F.normalize(torch.randn(2 * n_pairs, dim, generator=g), dim=1)
    z = expmap0(v, CURVATURE).to(device).requires_grad_(True)
    ids = torch.arange(n_pairs, device=device).repeat(2)
    return z, ids


def simclr_baseline() -> Callable:
    """solo-learn's own SimCLR loss (``solo.losses.simclr`` in 1.0.2 and in its GitHub main)."""
    from solo.losses.simclr import simclr_loss_func

    return simclr_loss_func


def geoopt_info_nce(z: torch.Tensor, n_pairs: int) -> torch.Tensor:
    """InfoNCE on geoopt's broadcast distance; each view's positive is the other view."""
    import geoopt

    ball = geoopt.PoincareBall(c=CURVATURE)
    logits = -ball.dist(z[:, None], z[None]) / TEMPERATURE
    eye = torch.eye(len(z), dtype=torch.bool, device=z.device)
    partner = torch.arange(len(z), device=z.device).roll(n_pairs)
    return F.cross_entropy(logits.masked_fill(eye, float("-inf")), partner)


def loss_fns(z: torch.Tensor, ids: torch.Tensor, names: tuple[str, ...]) -> dict[str, Callable]:
    """Zero-argument callables running forward+backward of each named variant on z."""
    n = len(z) // 2
    simclr = simclr_baseline()

    def run(loss_fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def step() -> None:
            z.grad = None
            loss_fn().backward()

        return step

    def ours(fused: bool) -> Callable[[], torch.Tensor]:
        return lambda: contrastive_loss(z, ids, TEMPERATURE, BALL, fused=fused, chunk_size=None)

    table: dict[str, Callable[[], torch.Tensor]] = {
        "simclr": lambda: simclr(z[:n], z[n:], TEMPERATURE),
        "fused": ours(True),
        "chunked": lambda: contrastive_loss(
            z, ids, TEMPERATURE, BALL, chunk_size=CHUNK
        ),
        "plain": ours(False),
        "geoopt": lambda: geoopt_info_nce(z, n),
    }
    if "compiled" in names:
        table["compiled"] = compiled_plain(z, ids)
    return {name: run(table[name]) for name in names}


def compiled_plain(z: torch.Tensor, ids: torch.Tensor) -> Callable[[], torch.Tensor]:
    """``torch.compile`` of the plain-autograd loss (shapes fixed, compiled on first call)."""

    def plain(z: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return contrastive_loss(z, ids, TEMPERATURE, BALL, fused=False)

    compiled = torch.compile(plain, dynamic=False)
    return lambda: compiled(z, ids)


def _ms(seconds: list[float]) -> str:
    return f"{1000 * summarize(seconds).median:.1f} ms"


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:.1f} MiB"


def _one(value: float) -> Stat:
    return Stat(value, value, value, 1)


def loss_rows(
    sizes: tuple[int, ...] = (1024, 4096),
    rounds: tuple[int, ...] = (15, 5),
    device: str = "cpu",
    variants: tuple[str, ...] = ("fused", "plain"),
) -> list[Row]:
    """Time and memory ratios to SimCLR of each variant at each 2N in ``sizes``."""
    rows: list[Row] = []
    for size, n_rounds in zip(sizes, rounds):
        if size % 2:
            raise ValueError(f"2N must be even, got {size}")
        z, ids = views(size // 2, device=device)
        fns = loss_fns(z, ids, ("simclr", *variants))
        times = interleaved(fns, n_rounds, warmup=1, device=device)
        peaks = {name: peak_bytes(fn, device) for name, fn in fns.items()}
        where = f"2N={size} D={DIM}"
        for name in variants:
            target = "<= 1.5" if name == "fused" else None
            rows.append(Row(
                "loss", f"poincare {name}", "solo simclr_loss_func", f"time fwd+bwd {where}",
                summarize(paired_ratios(times[name], times["simclr"])), target,
                f"{_ms(times[name])} vs {_ms(times['simclr'])}",
            ))  # fmt: skip
            rows.append(Row(
                "loss", f"poincare {name}", "solo simclr_loss_func", f"peak memory {where}",
                _one(peaks[name] / max(peaks["simclr"], 1)), target,
                f"{_mib(peaks[name])} vs {_mib(peaks['simclr'])}",
            ))  # fmt: skip
        matrix = 4 * size * size
        rows.append(Row(
            "loss", "poincare fused", "one (2N)^2 fp32 matrix", f"peak memory {where}",
            _one(peaks["fused"] / matrix), None,
            "flat in N: O(N^2) memory, not O(N^2 D)" if size == max(sizes) else "",
        ))  # fmt: skip
    return rows


def geoopt_rows(size: int = 1024, rounds: int = 3, device: str = "cpu") -> list[Row]:
    """geoopt's broadcast distance in the same InfoNCE against the fused loss (claim: >= 30x)."""
    try:
        import geoopt  # noqa: F401
    except ImportError:
        return [Row("loss", "geoopt dist", "poincare fused", f"time 2N={size}", _one(float("nan")),
                    None, "geoopt is not installed (pip install geoopt)")]  # fmt: skip
    z, ids = views(size // 2, device=device)
    fns = loss_fns(z, ids, ("fused", "geoopt"))
    times = interleaved(fns, rounds, warmup=1, device=device)
    peaks = {name: peak_bytes(fn, device) for name, fn in fns.items()}
    where = f"2N={size} D={DIM}"
    return [
        Row("loss", "geoopt dist (broadcast)", "poincare fused", f"time fwd+bwd {where}",
            summarize(paired_ratios(times["geoopt"], times["fused"])), ">= 30",
            f"{_ms(times['geoopt'])} vs {_ms(times['fused'])}"),
        Row("loss", "geoopt dist (broadcast)", "poincare fused", f"peak memory {where}",
            _one(peaks["geoopt"] / max(peaks["fused"], 1)), None,
            f"{_mib(peaks['geoopt'])} vs {_mib(peaks['fused'])}"),
    ]  # fmt: skip


def compile_rows(size: int = 1024, rounds: int = 10, device: str = "cpu") -> list[Row]:
    """``torch.compile`` of the plain path against SimCLR and the fused loss; a compiler failure
    (no C++ toolchain, an unsupported op) becomes a note: the fused path needs no compiler."""
    z, ids = views(size // 2, device=device)
    where = f"2N={size} D={DIM}"
    try:
        fns = loss_fns(z, ids, ("simclr", "fused", "compiled"))
        fns["compiled"]()  # compiles
    except Exception as err:  # noqa: BLE001  (any compiler failure: report it, keep going)
        first_line = (str(err).splitlines() or [""])[0][:80]
        reason = f"{type(err).__name__}: {first_line}"
        return [Row("loss", "poincare plain + torch.compile", "solo simclr_loss_func",
                    f"time fwd+bwd {where}", _one(float("nan")), None,
                    f"torch.compile failed, fused path unaffected ({reason})")]  # fmt: skip
    times = interleaved(fns, rounds, warmup=1, device=device)
    return [
        Row("loss", "poincare plain + torch.compile", "solo simclr_loss_func",
            f"time fwd+bwd {where}", summarize(paired_ratios(times["compiled"], times["simclr"])),
            None, f"{_ms(times['compiled'])} vs {_ms(times['simclr'])}"),
        Row("loss", "poincare plain + torch.compile", "poincare fused", f"time fwd+bwd {where}",
            summarize(paired_ratios(times["compiled"], times["fused"])), None,
            f"{_ms(times['compiled'])} vs {_ms(times['fused'])}"),
    ]  # fmt: skip


def _guarded(fn: Callable[[], None]) -> Callable[[], None]:
    """fn, or a no-op once it ran out of memory (a 64k SimCLR matrix set does not fit)."""
    state = {"oom": False}

    def step() -> None:
        if state["oom"]:
            return
        try:
            fn()
        except torch.OutOfMemoryError:
            state["oom"] = True
            torch.cuda.empty_cache()

    step.state = state  # type: ignore[attr-defined]
    return step


def chunked_rows(
    sizes: tuple[int, ...] = (1024, 4096, 16384),
    rounds: tuple[int, ...] = (5, 3, 2),
    device: str = "cpu",
    with_simclr: bool = True,
) -> list[Row]:
    """Chunked (blocks of CHUNK anchors) vs fused (vs solo's SimCLR): time and peak memory per
    2N, and the growth of the chunked peak per view from 2N = 4096 to 16384."""
    rows: list[Row] = []
    per_view: dict[int, float] = {}
    for size, n_rounds in zip(sizes, rounds):
        z, ids = views(size // 2, device=device)
        names = ("simclr", "fused", "chunked") if with_simclr else ("fused", "chunked")
        fns = {k: _guarded(f) for k, f in loss_fns(z, ids, names).items()}
        peaks = {name: peak_bytes(fn, device) for name, fn in fns.items()}
        live = [n for n, f in fns.items() if not f.state["oom"]]
        times = interleaved({n: fns[n] for n in live}, n_rounds, warmup=1, device=device)
        where = f"2N={size} D={DIM}"
        big = size == 16384
        per_view[size] = peaks["chunked"] / size
        rows.append(Row(
            "chunked", f"poincare chunked K={CHUNK}", "poincare fused", f"time fwd+bwd {where}",
            summarize(paired_ratios(times["chunked"], times["fused"])), "<= 1.25" if big else None,
            f"{_ms(times['chunked'])} vs {_ms(times['fused'])}",
        ))  # fmt: skip
        rows.append(Row(
            "chunked", f"poincare chunked K={CHUNK}", "poincare fused", f"peak memory {where}",
            _one(peaks["chunked"] / max(peaks["fused"], 1)), "<= 0.125" if big else None,
            f"{_mib(peaks['chunked'])} vs {_mib(peaks['fused'])}",
        ))  # fmt: skip
        if not with_simclr:
            continue
        if "simclr" not in live:
            rows.append(Row("chunked", "solo simclr_loss_func", "", f"fwd+bwd {where}",
                            _one(float("nan")), None, "out of memory"))  # fmt: skip
            continue
        for name in ("fused", "chunked"):
            rows.append(Row(
                "chunked", f"poincare {name}", "solo simclr_loss_func", f"time fwd+bwd {where}",
                summarize(paired_ratios(times[name], times["simclr"])), None,
                f"{_ms(times[name])} vs {_ms(times['simclr'])}",
            ))  # fmt: skip
            rows.append(Row(
                "chunked", f"poincare {name}", "solo simclr_loss_func", f"peak memory {where}",
                _one(peaks[name] / max(peaks["simclr"], 1)), None,
                f"{_mib(peaks[name])} vs {_mib(peaks['simclr'])}",
            ))  # fmt: skip
    if 4096 in per_view and 16384 in per_view:
        rows.append(Row(
            "chunked", "chunked peak / 2N at 2N=16384", "at 2N=4096", "memory growth",
            _one(per_view[16384] / per_view[4096]), "<= 1.5",
            f"{per_view[16384] / 1024:.1f} vs {per_view[4096] / 1024:.1f} KiB per view",
        ))  # fmt: skip
    return rows
