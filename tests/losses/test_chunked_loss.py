"""Blockwise InfoNCE (losses.infonce, chunk_size): the same values and gradients as the
fused path and the autograd reference in every space, SupCon targets included, under bf16
autocast; blocks never hold more than K x M entries; EBCLR's terms and the nn.Module forms."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from solo_hyper.geometry import GEOMETRIES, make_space
from solo_hyper.heads import map_to_space
from solo_hyper.losses import (
    EBCLRLoss,
    HyperbolicInfoNCELoss,
    InfoNCELoss,
    contrastive_loss,
    ebclr_loss,
    infonce,
)
from solo_hyper.losses.ebclr import ebclr_log_density
from solo_hyper.losses.infonce import AUTO_PATHS, auto_chunk_size, resolve_chunk_size

TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}


def _case(geometry: str, dtype: torch.dtype, supervised: bool, n: int = 26, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    space = make_space(geometry, 0.7, learnable_curvature=True).to(dtype)
    v = torch.randn(n, 6, generator=g, dtype=dtype).requires_grad_(True)
    tau = torch.tensor(0.3, dtype=dtype, requires_grad=True)
    if supervised:
        ids = torch.randint(0, 4, (n,), generator=g)
        ids[0] = 99  # an anchor without positives: left out, still a negative
    else:
        ids = torch.arange(n // 2).repeat(2)
    return space, v, tau, ids


def _loss_and_grads(space, v, tau, ids, **kwargs):
    z = map_to_space(v, space)
    loss = contrastive_loss(z, ids, tau, space=space, **kwargs)
    params = [v, tau] + ([space.raw_curvature] if space.curved else [])
    return (loss, *torch.autograd.grad(loss, params))


def _assert_same(got, want, rtol):
    for a, b in zip(got, want):
        scale = b.abs().max().clamp_min(torch.finfo(b.dtype).tiny)
        assert float((a - b).abs().max() / scale) <= rtol, (a, b)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("supervised", [False, True])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_chunked_equals_fused_and_reference_values_and_gradients(geometry, supervised, dtype):
    """Gradients w.r.t. the points, the temperature and a learnable curvature.

    In float32 the curvature's gradient is a sum of cancelling terms that every path (the
    autograd reference too) rounds to ~1e-5 relative: it is checked against float64 there.
    """
    space, v, tau, ids = _case(geometry, dtype, supervised)
    if dtype == torch.float32:  # the float64 case's very inputs, rounded
        space64, v64, tau64, _ = _case(geometry, torch.float64, supervised)
        v = v64.detach().float().requires_grad_(True)
        truth = _loss_and_grads(space64, v64, tau64, ids, fused=False)
    reference = _loss_and_grads(space, v, tau, ids, fused=False)
    fused = _loss_and_grads(space, v, tau, ids, chunk_size=None)
    results = [fused] + [
        _loss_and_grads(space, v, tau, ids, chunk_size=chunk) for chunk in (1, 5, 26, 1000)
    ]
    for got in results:
        if dtype == torch.float64:
            _assert_same(got, reference, TOLERANCE[dtype])
            continue
        _assert_same(got[:3], reference[:3], TOLERANCE[dtype])  # value, d/dv, d/dtau
        if space.curved:
            _assert_same(got[3:], truth[3:], 5e-5)


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_chunked_under_bf16_autocast_equals_fused(geometry):
    torch.manual_seed(1)
    proj = torch.nn.Linear(8, 6)
    space = make_space(geometry, 0.5)
    x = torch.randn(20, 8)
    ids = torch.arange(10).repeat(2)
    results = []
    for chunk in (None, 3):
        proj.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = map_to_space(proj(x), space)
            loss = contrastive_loss(z, ids, 0.2, space=space, chunk_size=chunk)
        assert loss.dtype == torch.float32
        loss.backward()
        results.append((loss.detach(), proj.weight.grad.clone()))
    _assert_same(results[1], results[0], 1e-5)
    assert bool(torch.isfinite(results[1][1]).all())


def _largest_tensor(fn) -> int:
    sizes = []

    class Sizes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    sizes.append(t.numel())
            return out

    with Sizes():
        fn()
    return max(sizes)


@pytest.mark.parametrize("geometry", ["poincare", "lorentz", "sphere"])
def test_blocks_never_hold_more_than_k_by_m_entries(geometry):
    """Forward and backward: no tensor larger than a K x M block (or an (N + M) x D one),
    where the fused path builds N x M matrices."""
    n, k, dim = 96, 8, 4
    space = make_space(geometry, 0.5)
    v = torch.randn(n, dim, requires_grad=True)
    ids = torch.arange(n // 2).repeat(2)

    def run(chunk):
        def step():
            contrastive_loss(map_to_space(v, space), ids, 0.2, space=space,
                             chunk_size=chunk).backward()  # fmt: skip

        return step

    assert _largest_tensor(run(k)) <= k * n
    assert _largest_tensor(run(None)) >= n * n


@pytest.mark.parametrize("geometry", ["sphere", "poincare", "lorentz", "euclidean"])
def test_ebclr_terms_chunked_equal_unchunked(geometry):
    g = torch.Generator().manual_seed(2)
    space = make_space(geometry, 0.4, learnable_curvature=True).double()
    raw = [torch.randn(n, 5, generator=g, dtype=torch.float64).requires_grad_() for n in (6, 6, 4)]
    params = raw + ([space.raw_curvature] if space.curved else [])

    def run(chunk):
        z1, z2, zs = (map_to_space(r, space) for r in raw)
        loss, parts = ebclr_loss(
            z1, z2, zs, 0.2, 0.01, 0.5, space, regularised=(raw[0], raw[2]), chunk_size=chunk
        )
        logq = ebclr_log_density(z1, z2.detach(), 0.2, space, chunk_size=chunk)
        return (loss, parts["disc"], parts["gen"], logq, *torch.autograd.grad(loss, params))

    want = run(None)
    for chunk in (1, 4, "auto"):
        _assert_same(run(chunk), want, 1e-10)


def test_auto_chunk_size_follows_the_free_memory(monkeypatch):
    """K blocks of five K x M buffers fill at most a quarter of the free memory the device
    reports (mocked here: host MemAvailable and CUDA's mem_get_info alike), and K + 1 would not."""
    free = {"bytes": 4 * 2**30}
    monkeypatch.setattr(infonce, "free_memory_bytes", lambda device: free["bytes"])
    cpu = torch.device("cpu")
    m = 1000
    for dtype, size in ((torch.float32, 4), (torch.float64, 8)):
        k = auto_chunk_size(10**9, m, cpu, dtype)
        assert k * 5 * m * size <= free["bytes"] / 4 < (k + 1) * 5 * m * size, (dtype, k)
    k = auto_chunk_size(10**9, m, cpu, torch.float32)
    free["bytes"] *= 2
    assert auto_chunk_size(10**9, m, cpu, torch.float32) in (2 * k, 2 * k + 1)
    assert auto_chunk_size(100, m, cpu, torch.float32) == 100  # never more than the anchors
    free["bytes"] = 10  # less than one row: still one anchor per block
    assert auto_chunk_size(10**9, m, cpu, torch.float32) == 1
    free["bytes"] = None  # unreadable: no split
    assert auto_chunk_size(77, m, cpu, torch.float32) == 77
    monkeypatch.undo()
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2**30, 2**34))
    k = auto_chunk_size(10**9, m, torch.device("cuda"), torch.float32)
    assert k * 5 * m * 4 <= 2**30 / 4 < (k + 1) * 5 * m * 4


@pytest.mark.parametrize("bad", [0, -3, 2.5, "big", True])
def test_bad_chunk_size_is_refused(bad):
    z = torch.randn(8, 3)
    ids = torch.arange(4).repeat(2)
    with pytest.raises(ValueError, match="chunk_size must be a positive integer, 'auto' or null"):
        contrastive_loss(z, ids, 0.2, space=make_space("sphere"), chunk_size=bad)
    with pytest.raises(ValueError, match="chunk_size"):
        InfoNCELoss(chunk_size=bad)


def test_module_losses_equal_the_functions():
    g = torch.Generator().manual_seed(3)
    v = torch.randn(12, 5, generator=g)
    ids = torch.arange(6).repeat(2)
    hyperbolic = HyperbolicInfoNCELoss(temperature=0.2, curvature=0.3, geometry="lorentz")
    z = map_to_space(v, hyperbolic.space)
    want = contrastive_loss(z, ids, 0.2, space=make_space("lorentz", 0.3))
    torch.testing.assert_close(hyperbolic(z[:6], z[6:]), want)
    labels = torch.tensor([0, 1, 0, 1, 2, 2])  # SupCon: the views of one class are positives
    torch.testing.assert_close(
        hyperbolic(z[:6], z[6:], labels),
        contrastive_loss(z, labels.repeat(2), 0.2, space=make_space("lorentz", 0.3)),
    )
    sphere = InfoNCELoss(0.5)
    torch.testing.assert_close(sphere(v[:6], v[6:]), contrastive_loss(v, ids, 0.5, make_space("sphere")))
    ebclr = EBCLRLoss(0.1, space=make_space("poincare", 0.1), chunk_size=4)
    zs = map_to_space(v[:4], ebclr.space)
    loss = ebclr(z[:6, 1:], z[6:, 1:], zs)
    want_loss, want_parts = ebclr_loss(z[:6, 1:], z[6:, 1:], zs, 0.1, space=make_space("poincare", 0.1))
    torch.testing.assert_close(loss, want_loss)
    assert loss.dim() == 0
    same, parts = ebclr.components(z[:6, 1:], z[6:, 1:], zs)
    torch.testing.assert_close(same, want_loss)
    assert parts.keys() == want_parts.keys()
    with pytest.raises(ValueError, match="temperature"):
        HyperbolicInfoNCELoss(temperature=0.0)
    with pytest.raises(ValueError, match="curvature"):
        HyperbolicInfoNCELoss(curvature=-1.0)


def test_auto_resolves_to_the_fastest_measured_path_of_the_device(monkeypatch):
    """chunk_size auto (the default): on the CPU the fused path below AUTO_PATHS' chunk_from
    candidates and blocks of its block size from there (benchmarks/chunk_auto.py chose them),
    capped by the memory; a device type not measured: fused while it fits, else the memory's
    block; None and K as given."""
    import inspect

    from solo_hyper.objectives.base import SpaceArgs

    monkeypatch.setattr(infonce, "free_memory_bytes", lambda device: 2**40)
    monkeypatch.setattr(infonce, "AUTO_FITS", {})  # decided once per shape: decide again here
    cpu, f32 = torch.device("cpu"), torch.float32
    path = AUTO_PATHS["cpu"]
    below, at = path.chunk_from - 2, path.chunk_from
    assert resolve_chunk_size("auto", below, below, cpu, f32) is None
    assert resolve_chunk_size("auto", at, at, cpu, f32) == path.block
    assert resolve_chunk_size("auto", 8 * at, 8 * at, cpu, f32) == path.block
    # DDP: few local anchors against many gathered candidates: one block would hold them all
    assert resolve_chunk_size("auto", path.block, 8 * at, cpu, f32) is None
    assert resolve_chunk_size(None, 8 * at, 8 * at, cpu, f32) is None
    assert resolve_chunk_size(7, 8 * at, 8 * at, cpu, f32) == 7
    gpu = torch.device("cuda")
    assert resolve_chunk_size("auto", 8 * at, 8 * at, gpu, f32) is None  # fits: fused
    monkeypatch.setattr(infonce, "free_memory_bytes", lambda device: 5 * 8 * at * 4 * 4 * 100)
    # decided once per (shape, device): the free memory is read again only for a new shape
    assert resolve_chunk_size("auto", 8 * at, 8 * at, gpu, f32) is None
    infonce.AUTO_FITS.clear()
    assert resolve_chunk_size("auto", 8 * at, 8 * at, gpu, f32) == 100  # the memory's block
    assert resolve_chunk_size("auto", 8 * at, 8 * at, cpu, f32) == min(100, path.block)
    # auto is the default of every loss and of the objectives' arguments
    assert SpaceArgs().chunk_size == "auto"
    for fn in (contrastive_loss, ebclr_loss, ebclr_log_density, InfoNCELoss, EBCLRLoss):
        assert inspect.signature(fn).parameters["chunk_size"].default == "auto", fn


def test_the_default_auto_path_equals_the_fused_path_where_it_chunks():
    """At a size where auto takes blocks on the CPU, the default loss (auto) has the fused
    path's value and gradients."""
    n = AUTO_PATHS["cpu"].chunk_from
    assert resolve_chunk_size("auto", n, n, torch.device("cpu"), torch.float64) is not None
    g = torch.Generator().manual_seed(5)
    space = make_space("poincare", 0.4, learnable_curvature=True).double()
    v = torch.randn(n, 8, generator=g, dtype=torch.float64).requires_grad_(True)
    tau = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
    ids = torch.arange(n // 2).repeat(2)
    _assert_same(_loss_and_grads(space, v, tau, ids), _loss_and_grads(space, v, tau, ids, chunk_size=None), 1e-10)
