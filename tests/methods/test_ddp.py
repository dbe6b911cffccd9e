"""Distributed data parallel on CPU (gloo): gathered negatives reproduce the single-process loss,
and Lightning DDP runs of the methods with an attack or a sampler neither deadlock nor diverge."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import fake_loaders, tiny_config
from ddp_ranks import run_ranks

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.geometry import make_space, poincare_to_lorentz
from solo_hyper.losses import contrastive_loss
from solo_hyper.losses.ebclr import ebclr_loss
from solo_hyper.losses.robust import robust_contrastive_loss
from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter

B, D = 6, 5  # per rank
BALL = make_space("poincare", 0.5)
SPHERE = make_space("sphere")


def _losses(z1, z2, z3, ids, labels):
    """Every method's loss on (local or whole) views; ids/labels aligned with z1's rows."""
    return {
        "hcl": contrastive_loss(torch.cat([z1, z2]), ids.repeat(2), 0.2, BALL),
        "shcl": contrastive_loss(torch.cat([z1, z2]), labels.repeat(2), 0.2, BALL),
        "rhcl": robust_contrastive_loss(z1, z2, z3, ids, 0.2, 0.5, BALL)[0],
        "rocl": robust_contrastive_loss(z1, z2, z3, ids, 0.2, 0.5, SPHERE)[0],
        "ebclr": ebclr_loss(z1, z2, z3, 0.1, 1e-3, 0.1)[0],
        "ebclr_poincare": ebclr_loss(
            z1, z2, BALL.expmap0(F.normalize(z3, dim=-1)), 0.1, 1e-3, 0.1, BALL,
            regularised=(z1, z3),
        )[0],  # fmt: skip
        # blocks of 4 anchors against the gathered candidates: the same numbers
        "hcl_chunked": contrastive_loss(
            torch.cat([z1, z2]), ids.repeat(2), 0.2, space=BALL, chunk_size=4
        ),
        "shcl_lorentz_chunked": contrastive_loss(
            poincare_to_lorentz(torch.cat([z1, z2]), 0.5), labels.repeat(2), 0.2,
            space=make_space("lorentz", 0.5), chunk_size=5,
        ),  # fmt: skip
        "simclr_chunked": contrastive_loss(
            torch.cat([z1, z2]), ids.repeat(2), 0.2, space=make_space("sphere"), chunk_size=3
        ),
        "ebclr_chunked": ebclr_loss(z1, z2, z3, 0.1, 1e-3, 0.1, chunk_size=5)[0],
    }


def _views(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    from solo_hyper.geometry import expmap0, project

    def ball(x):
        return project(expmap0(torch.nn.functional.normalize(x, dim=-1), 0.5), 0.5)

    raw = [torch.randn(2 * B, D, generator=g, dtype=torch.float64) for _ in range(3)]
    ids = torch.arange(2 * B)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 1, 2, 0, 0, 1, 2])
    return raw, ball, ids, labels


def _rank(rank: int) -> dict:
    raw, ball, ids, labels = _views()
    rows = slice(rank * B, rank * B + B)
    out = {}
    for name, value in _losses(*(ball(r[rows]) if i < 2 else r[rows] for i, r in enumerate(raw)), ids[rows], labels[rows]).items():
        out[name] = value.item()
    # the contrastive methods use points on the ball for all three views
    z = [ball(r[rows]) for r in raw]
    out["rhcl"] = robust_contrastive_loss(*z, ids[rows], 0.2, 0.5, BALL)[0].item()
    out["rocl"] = robust_contrastive_loss(*z, ids[rows], 0.2, 0.5, SPHERE)[0].item()
    return out


def test_two_ranks_with_gathered_negatives_equal_one_process_on_the_whole_batch():
    results = run_ranks(_rank)

    raw, ball, ids, labels = _views()
    whole = _losses(ball(raw[0]), ball(raw[1]), raw[2], ids, labels)
    z = [ball(r) for r in raw]
    whole["rhcl"] = robust_contrastive_loss(*z, ids, 0.2, 0.5, BALL)[0]
    whole["rocl"] = robust_contrastive_loss(*z, ids, 0.2, 0.5, SPHERE)[0]
    for name, value in whole.items():
        ranks_mean = (results[0][name] + results[1][name]) / 2
        assert ranks_mean == pytest.approx(value.item(), rel=1e-5, abs=1e-5), name


@pytest.mark.slow
@pytest.mark.parametrize("method", ["hcl", "rhcl", "ebclr"])
def test_lightning_ddp_fit_with_attack_or_sampler(method, tmp_path):
    """Two CPU ranks train a few steps: the attack's and the sampler's collectives stay in step,
    and the trained weights come back finite; without DDP's unused-parameter search (what
    ``pretrain`` asks for), which fails when a method leaves a parameter without gradient."""
    cfg = tiny_config(method, knn_eval={"enabled": False})
    if method == "ebclr":
        cfg["method_kwargs"] = {**cfg["method_kwargs"], "buffer_size": 64, "sgld_steps": 2}
    if method == "rhcl":
        cfg["method_kwargs"] = {**cfg["method_kwargs"], "steps": 2}
    prep = prepare(None, base=cfg)
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    pl = adapter.LIGHTNING
    trainer = pl.Trainer(
        accelerator="cpu", devices=2, strategy=adapter.trainer_strategy("ddp_spawn"), max_steps=2,
        limit_val_batches=1,
        num_sanity_val_steps=0, logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=str(tmp_path),  # the model attaches its own callbacks (EBCLR: its buffer)
    )  # fmt: skip
    before = [p.detach().clone() for p in model.encoder.parameters()]
    trainer.fit(model, *fake_loaders(n=64, batch_size=8))
    # ddp_spawn hands rank 0's weights and metrics back to this process
    assert any(not torch.equal(a, b) for a, b in zip(model.encoder.parameters(), before))
    losses = {k: v for k, v in trainer.callback_metrics.items() if k.startswith("train_")}
    assert losses and all(torch.isfinite(v).all() for v in losses.values())
    ckpt = tmp_path / "ddp.ckpt"
    trainer.save_checkpoint(ckpt)
    assert ckpt.is_file()
