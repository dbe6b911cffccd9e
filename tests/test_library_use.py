"""The library as one uses it from plain PyTorch: the examples of README.md and docs/ run as written, the
losses take the head's space, and points outside the loss's space are refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from solo_hyper.geometry import make_space, poincare_to_lorentz
from solo_hyper.heads import SpaceProjector, mlp_projector
from solo_hyper.losses import EBCLRLoss, HyperbolicInfoNCELoss, InfoNCELoss, contrastive_loss

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def readme_block(containing: str) -> str:
    """The python code block of README.md or a docs/ page that contains ``containing``."""
    blocks = [b for page in PAGES for b in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)]
    (block,) = [b for b in blocks if containing in b]
    return block


def test_readme_ebclr_loop_trains_with_the_replay_buffer_and_msgld():
    g = torch.Generator().manual_seed(0)
    loader = [tuple(torch.rand(8, 3, 32, 32, generator=g) * 2 - 1 for _ in range(2)) for _ in range(2)]
    scope = {"loader": loader}
    torch.manual_seed(0)
    code = readme_block("buffer.initialize(noise)")
    assert len([ln for ln in code.splitlines() if ln.strip()]) <= 20
    exec(compile(code, "docs/guide.md (EBCLR in plain PyTorch)", "exec"), scope)
    assert torch.isfinite(scope["loss"]) and scope["loss"].dim() == 0
    buffer = scope["buffer"]
    assert float(buffer.counts.max()) > buffer.init_count  # chains were drawn and counted
    assert torch.equal(buffer.samples[scope["slots"][-1]], scope["x_sgld"][-1])  # written back


def test_readme_space_example_shares_one_space():
    scope = {
        "torch": torch, "make_space": make_space, "SpaceProjector": SpaceProjector,
        "mlp_projector": mlp_projector, "HyperbolicInfoNCELoss": HyperbolicInfoNCELoss,
        "backbone": torch.nn.Flatten(), "x1": torch.randn(6, 512), "x2": torch.randn(6, 512),
    }  # fmt: skip
    exec(readme_block("HyperbolicInfoNCELoss(temperature=0.2, space=space)"), scope)
    assert scope["criterion"].space is scope["head"].space is scope["space"]
    assert torch.isfinite(scope["loss"])


def test_the_loss_takes_the_heads_space_and_not_also_a_curvature():
    space = make_space("poincare", 0.3, learnable_curvature=True)
    loss = HyperbolicInfoNCELoss(space=space)
    assert loss.space is space
    z = space.expmap0(torch.randn(8, 4))
    ids = torch.arange(4).repeat(2)
    torch.testing.assert_close(loss(z[:4], z[4:]), contrastive_loss(z, ids, 0.2, space=space))
    with pytest.raises(ValueError, match="head's space, or curvature/geometry.*not both"):
        HyperbolicInfoNCELoss(space=space, curvature=0.3)
    with pytest.raises(ValueError, match="needs a hyperbolic space"):
        HyperbolicInfoNCELoss(space=make_space("sphere"))
    assert HyperbolicInfoNCELoss().space.to_dict()["curvature"] == pytest.approx(0.1)


def test_points_outside_the_losses_space_are_refused():
    g = torch.Generator().manual_seed(1)
    v = torch.randn(8, 4, generator=g)
    ball = make_space("poincare", 0.5)
    z = ball.expmap0(v)
    lorentz_points = poincare_to_lorentz(z, 0.5)  # (N, D+1)
    with pytest.raises(ValueError, match="not in the Poincare ball of curvature -0.5.*Lorentz"):
        HyperbolicInfoNCELoss(space=ball)(lorentz_points, lorentz_points)  # the first call's check
    poincare_loss = HyperbolicInfoNCELoss(space=ball)
    assert torch.isfinite(poincare_loss(z, z.flip(0)))
    poincare_loss.check_every_call = True  # values on every call, not the first only
    with pytest.raises(ValueError, match="not in the Poincare ball of curvature -0.5.*Lorentz"):
        poincare_loss(lorentz_points, lorentz_points)
    wider = make_space("poincare", 0.05).expmap0(3 * v)  # radius 4.5 > the loss's 1.41
    with pytest.raises(ValueError, match="norm .* >= its radius"):
        poincare_loss(wider, wider)
    lorentz_loss = HyperbolicInfoNCELoss(space=make_space("lorentz", 0.5))
    assert torch.isfinite(lorentz_loss(lorentz_points, lorentz_points.flip(0)))
    lorentz_loss.check_every_call = True
    with pytest.raises(ValueError, match="not on the hyperboloid of curvature -0.5"):
        padded = torch.cat([z, z[:, :1]], dim=1)  # Poincare coordinates padded to D+1
        lorentz_loss(padded, padded)
    with pytest.raises(ValueError, match=r"out0 must be a \(N, P\) tensor of points, got \(8,\)"):
        InfoNCELoss()(z[:, 0], z[:, 0])
    with pytest.raises(ValueError, match="out0 and out1 are the two views of one batch"):
        InfoNCELoss()(z, z[:4])
    with pytest.raises(ValueError, match="z_sgld is not in the Poincare ball"):
        EBCLRLoss(space=ball)(z, z, lorentz_points)
    unchecked = HyperbolicInfoNCELoss(space=ball, check_points=False)
    assert torch.isfinite(unchecked(lorentz_points, lorentz_points))
