"""Baselines see the same candidates as this plugin's methods under DDP (2 CPU ranks, gloo).

solo-learn 1.0.2's SimCLR/SupCon, NNCLR and VICReg losses use the local batch only, where solo
main and this plugin's losses use every rank's samples (with the shipped ``devices=4`` configs
HCL saw 2047 negatives and SimCLR 511). Through the adapter (solo_hyper.solo.compat) each
baseline's 2-rank loss equals its single-process loss on the whole batch, and SimCLR's equals
HCL's (cosine ablation) on the same projections; the gradients match too. solo 1.0.2's own
SimCLR loss is measured beside them, to show that the test can tell the difference.
"""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config
from ddp_ranks import run_ranks

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter

pytestmark = pytest.mark.skipif(
    not adapter.API.startswith("solo-learn 1.0.2"),
    reason="the gathering fixes are for solo-learn 1.0.2 (solo main's losses gather)",
)

B, D = 6, 5  # per rank: samples; dimension of the NNCLR / VICReg inputs
WORLD = 2


def _model(method: str, **method_kwargs):
    kwargs = {"proj_hidden_dim": 16, "proj_output_dim": 8, **method_kwargs}
    prep = prepare(None, base=tiny_config(method, method_kwargs=kwargs))
    return adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops).double()


def _data(features: int):
    """The whole batch: backbone features of two crops, ids, labels, NNCLR and VICReg inputs."""
    g = torch.Generator().manual_seed(0)
    n = WORLD * B
    return {
        "feats": [torch.randn(n, features, generator=g, dtype=torch.float64) for _ in range(2)],
        "indexes": torch.arange(n),
        "labels": torch.tensor([0, 1, 2, 0, 1, 2, 1, 2, 0, 0, 1, 2]),
        "nn": torch.randn(n, D, generator=g, dtype=torch.float64),
        "p": torch.randn(n, D, generator=g, dtype=torch.float64),
        "z": [torch.randn(n, D, generator=g, dtype=torch.float64) for _ in range(2)],
    }


def _losses(models: dict, data: dict, rows: slice) -> dict[str, tuple[float, torch.Tensor]]:
    """{name: (loss, gradient w.r.t. the inputs' rows)} on ``rows`` of the data (all of it on
    one process); run on every rank under DDP."""
    from solo.losses.simclr import simclr_loss_func

    from solo_hyper.solo.compat import gathered_nnclr_loss, gathered_vicreg_loss

    feats = [f[rows].clone().requires_grad_() for f in data["feats"]]
    indexes, labels = data["indexes"][rows], data["labels"][rows]
    out = {}

    def record(name, loss, inputs):
        grads = torch.autograd.grad(loss, inputs)
        out[name] = (loss.item(), torch.cat([g.detach() for g in grads], dim=1))

    simclr, supcon, hcl = models["simclr"], models["supcon"], models["hcl_cosine"]
    record("simclr", simclr.gathered_nce_loss(feats, indexes, labels), feats)
    record("supcon", supcon.gathered_nce_loss(feats, indexes, labels), feats)
    # ours on the very same projections: HCL's loss with the cosine ablation switch
    z = torch.cat([simclr.projector(f) for f in feats])
    record("hcl_cosine", hcl.objective.contrastive(hcl, z, indexes.repeat(2)), feats)
    # solo 1.0.2's own SimCLR loss: local candidates only
    z1, z2 = (simclr.projector(f) for f in feats)
    record("solo_1.0.2_simclr", simclr_loss_func(z1, z2, temperature=simclr.temperature), feats)

    nn, p = (data[k][rows].clone().requires_grad_() for k in ("nn", "p"))
    record("nnclr", gathered_nnclr_loss(nn, p, 0.2), [nn, p])
    z1, z2 = (z[rows].clone().requires_grad_() for z in data["z"])
    record("vicreg", gathered_vicreg_loss(z1, z2, sim_loss_weight=25.0, var_loss_weight=25.0,
                                          cov_loss_weight=1.0), [z1, z2])  # fmt: skip
    return out


def _rank(rank: int, models: dict) -> dict:
    out = _losses(models, _data(models["simclr"].features_dim), slice(rank * B, rank * B + B))
    return {k: (loss, grad.tolist()) for k, (loss, grad) in out.items()}


def _run_two_ranks(models: dict) -> dict[int, dict]:
    return run_ranks(lambda rank: _rank(rank, models), WORLD)  # the models travel by fork


def test_two_rank_baseline_losses_equal_one_process_on_the_whole_batch_and_ours():
    torch.manual_seed(0)
    models = {
        "simclr": _model("simclr", temperature=0.2),
        "supcon": _model("supcon", temperature=0.2),
        "hcl_cosine": _model("hcl", temperature=0.2, geometry="sphere"),
    }
    ranks = _run_two_ranks(models)
    whole = _losses(models, _data(models["simclr"].features_dim), slice(None))

    for name in ("simclr", "supcon", "hcl_cosine", "nnclr", "vicreg"):
        ddp_loss = sum(ranks[r][name][0] for r in range(WORLD)) / WORLD  # what DDP optimises
        assert ddp_loss == pytest.approx(whole[name][0], rel=1e-9), name
        # each rank's input gradient, summed over ranks by the gather's backward, is WORLD x
        # the whole-batch gradient of its rows (DDP then averages the parameter gradients)
        per_rank = [torch.tensor(ranks[r][name][1], dtype=torch.float64) for r in range(WORLD)]
        ddp_grad = torch.cat(per_rank) / WORLD
        assert torch.allclose(ddp_grad, whole[name][1], atol=1e-10), name
    # the same candidates as ours, to the last digit: SimCLR's loss is HCL's cosine loss
    for r in range(WORLD):
        assert ranks[r]["simclr"][0] == pytest.approx(ranks[r]["hcl_cosine"][0], rel=1e-12)
    # solo 1.0.2's own SimCLR loss on local candidates is another loss
    solo_ddp = sum(ranks[r]["solo_1.0.2_simclr"][0] for r in range(WORLD)) / WORLD
    assert whole["solo_1.0.2_simclr"][0] == pytest.approx(whole["simclr"][0], rel=1e-9)
    assert abs(solo_ddp - whole["simclr"][0]) > 1e-3


def test_the_patched_methods_train_with_the_gathered_losses():
    """The fixes are in the classes that pretrain builds (solo 1.0.2's own steps, gathered)."""
    from solo_hyper.solo.compat import GatheredNNCLR, GatheredSimCLR, GatheredVICReg

    for name, fix in (("simclr", GatheredSimCLR), ("supcon", GatheredSimCLR),
                      ("nnclr", GatheredNNCLR), ("vicreg", GatheredVICReg)):  # fmt: skip
        cls = adapter.plugin_class(adapter.registered_methods()[name])
        assert issubclass(cls, fix), name
