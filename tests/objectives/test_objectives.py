"""The objectives without a framework: each trains in a plain PyTorch loop (the README's loop),
its arguments are checked once, at construction, and the solo-learn methods are those objectives."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from solo_hyper import objectives
from solo_hyper.objectives import (
    EBCLR,
    HCL,
    RHCL,
    SHCL,
    EBCLRArgs,
    HCLArgs,
    Net,
    ReplayChains,
    RHCLArgs,
    RoCL,
    RoCLArgs,
    SHCLArgs,
    Supervised,
    SupervisedArgs,
)

SMALL = {"proj_hidden_dim": 32, "proj_output_dim": 8}
CASES = {
    "hcl": lambda: HCL(HCLArgs(**SMALL)),
    "shcl": lambda: SHCL(SHCLArgs(**SMALL)),
    "rhcl": lambda: RHCL(RHCLArgs(**SMALL, steps=2)),
    "rocl": lambda: RoCL(RoCLArgs(**SMALL, steps=2)),
    "ebclr": lambda: EBCLR(EBCLRArgs(**SMALL, sgld_steps=2, buffer_size=64, rho=0.5)),
    "supervised": lambda: Supervised(SupervisedArgs(classes=4)),
}


def encoder() -> nn.Module:
    """Any module from images to (B, 32) features (a pooling CNN would see random images as
    nearly one image)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 64), nn.ReLU(), nn.Linear(64, 32))


def fixed_batch(objective, n: int = 16) -> list:
    """Two crops of n 16x16 images: [0, 1] pixels for pixel-space objectives, else normalised."""
    g = torch.Generator().manual_seed(0)
    images = torch.rand(n, 3, 16, 16, generator=g)
    crops = [(images + 0.05 * torch.randn(images.shape, generator=g)).clamp(0, 1) for _ in range(2)]
    if not objective.pixel_space_crops:
        crops = [objective.crop_stats.normalize(c) for c in crops]
    return [torch.arange(n), crops, torch.arange(n) % 4]


def train(objective, steps: int = 20, lr: float = 0.05) -> list[float]:
    """The README's loop: an encoder, the objective's head, one optimiser, ``objective.step``."""
    torch.manual_seed(0)
    net = Net(encoder(), objective.head(32))
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    batch = fixed_batch(objective)
    chains = ReplayChains(objective.args, (3, 16, 16)) if "chains" in objective.step_inputs else None
    losses = []
    for _ in range(steps):
        inputs = {"chains": chains.draw(batch[1][0])} if chains is not None else {}
        loss, metrics = objective.step(net, batch, **inputs)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert all(torch.isfinite(torch.as_tensor(v)).all() for v in metrics.values())
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_objective_trains_in_a_plain_pytorch_loop(name):
    """20 steps on a fixed batch lower the loss (EBCLR at a smaller learning rate: its generative
    term plays against fresh chains each step)."""
    losses = train(CASES[name](), lr=0.01 if name == "ebclr" else 0.05)
    assert losses[-1] < losses[0] - 1e-3, losses
    assert sum(losses[-5:]) < sum(losses[:5]), losses


def test_supervised_loss_is_the_cross_entropy_of_the_classifier_over_every_crop():
    """Against scikit-learn's log loss of the softmax (the mean over both crops' rows), gradient
    checked against a hand-written softmax minus one-hot; labels beyond the classifier refused."""
    from sklearn.metrics import log_loss

    objective = Supervised(SupervisedArgs(classes=4))
    torch.manual_seed(0)
    net = Net(encoder(), objective.head(32)).double()
    batch = fixed_batch(objective)
    batch[1] = [c.double() for c in batch[1]]
    loss, metrics = objective.step(net, batch)
    logits = torch.cat([net.projector(net.encoder(c)) for c in batch[1]]).detach()
    targets = batch[2].repeat(2)
    probs = torch.softmax(logits, 1).numpy()
    assert float(loss) == pytest.approx(log_loss(targets.numpy(), probs, labels=range(4)), rel=1e-9)
    weight = net.projector.mlp.weight
    (grad,) = torch.autograd.grad(loss, weight)
    feats = torch.cat([net.encoder(c) for c in batch[1]]).detach()
    onehot = torch.nn.functional.one_hot(targets, 4).double()
    expected = (torch.softmax(logits, 1) - onehot).T @ feats / len(targets)
    assert torch.allclose(grad, expected, rtol=1e-9, atol=1e-12)
    assert float(metrics["train_acc1"]) == pytest.approx(
        100.0 * float((logits.argmax(1) == targets).double().mean()))
    batch[2] = batch[2] + 3  # labels 3..6 for a 4-way classifier: refused on demand and on the
    with pytest.raises(ValueError, match="set method_kwargs.classes"):  # first step (values are
        objective.check_batch(batch)  # read then only: docs/performance.md)
    with pytest.raises(ValueError, match="set method_kwargs.classes"):
        Supervised(SupervisedArgs(classes=4)).step(net, batch)


def test_every_method_has_an_objective():
    assert sorted(objectives.OBJECTIVES) == sorted(CASES)
    for cls in objectives.OBJECTIVES.values():
        assert cls().args == cls.Args()  # the defaults are valid arguments


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: HCLArgs(temperature=0), "temperature must be > 0"),
        (lambda: HCLArgs(geometry="lorenz"), "did you mean 'lorentz'"),
        (lambda: RHCLArgs(steps=1.5), "steps must be an integer >= 0"),
        (lambda: EBCLRArgs(rho=2.0), r"rho is a fraction and must be in \[0, 1\]"),
        (lambda: EBCLRArgs.from_mapping({"sgld_step": 3}), "did you mean 'sgld_steps'"),
        (lambda: HCL(EBCLRArgs()), "HCL takes HCLArgs, got EBCLRArgs"),
    ],
)
def test_bad_arguments_fail_at_construction_with_the_fix(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_ebclr_prepare_without_chains_says_where_they_come_from():
    objective = CASES["ebclr"]()
    net = Net(encoder(), objective.head(32))
    with pytest.raises(ValueError, match="ReplayChains"):
        objective.step(net, fixed_batch(objective))


@pytest.mark.parametrize("name", sorted(objectives.OBJECTIVES))
def test_the_solo_method_of_each_name_trains_that_objective(name):
    """``METHODS[name]``, built as ``pretrain`` builds it, holds the objective of that name with
    the config's arguments, its crops and pixel space, and its training step's loss is that
    objective's own ``step`` on the method's network and batch plus solo's online cross-entropy
    (EBCLR: from the same chain starts)."""
    import torch.nn.functional as F
    from conftest import tiny_config

    from solo_hyper.run.train import prepare
    from solo_hyper.solo import adapter

    extra = {"ebclr": {"buffer_size": 8, "sgld_steps": 2}, "rhcl": {"steps": 2}, "rocl": {"steps": 2}}
    prep = prepare(None, base=tiny_config(name, method_kwargs=extra.get(name, {})))
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    objective = objectives.OBJECTIVES[name]
    assert type(model.objective) is objective and model.args == model.objective.args
    assert model.args == objective.Args(**prep.cfg["method_kwargs"])
    assert model.required_crops == objective.required_crops
    assert model.pixel_space_crops == objective.pixel_space_crops

    g = torch.Generator().manual_seed(0)
    images = torch.rand(8, 1, 28, 28, generator=g)
    pixels = [images, images.flip(3)]
    crops = pixels if objective.pixel_space_crops else [model.normalize_pixels(c) for c in pixels]
    indexes, targets = torch.arange(8), torch.arange(8) % 10
    batch = [indexes, crops, targets]

    def inputs(batch: list) -> dict:  # the same chain starts for both steps
        if name != "ebclr":
            return {}
        return {"chains": ReplayChains(model.args, (1, 28, 28), seed=0).draw(batch[1][0])}

    model.step_inputs = inputs
    torch.manual_seed(1)
    loss = model.eval().training_step(batch, 0)
    torch.manual_seed(1)  # eval again: EBCLR's SGLD leaves the network in train mode
    net = model.eval().objective_net()
    own, _ = objective(model.args, model.crop_stats).step(net, batch, **inputs(batch))
    encoded = [model.normalize_pixels(c) for c in pixels]  # what solo's classifier sees
    with torch.no_grad():
        ce = sum(F.cross_entropy(model.eval()(x)["logits"], targets) for x in encoded) / 2
    torch.testing.assert_close(loss, own + ce)


def test_readme_objective_loop_runs_as_written():
    from test_library_use import readme_block

    g = torch.Generator().manual_seed(0)
    images = torch.rand(8, 3, 32, 32, generator=g) * 2 - 1
    loader = [[torch.arange(8), [images, images.flip(3)], torch.zeros(8)] for _ in range(3)]
    code = readme_block("objective.step(net, batch, **inputs)")
    assert len([ln for ln in code.splitlines() if ln.strip()]) <= 15
    scope = {"loader": loader}
    torch.manual_seed(0)
    exec(compile(code, "README.md (the methods in plain PyTorch)", "exec"), scope)
    assert torch.isfinite(scope["loss"]) and "ebclr_disc" in scope["metrics"]
    assert float(scope["chains"].buffer.counts.max()) > scope["chains"].buffer.init_count


def test_crop_statistics_are_made_once_per_device_and_dtype():
    """A later normalisation dispatches its arithmetic alone (no tensor made, nothing copied from
    the host), whichever CropStats of the same values asks; another dtype gets its own."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from solo_hyper.objectives import CropStats

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    stats = (0.4, 0.3, 0.2), (0.25, 0.5, 0.75)
    x = torch.rand(2, 3, 4, 4)
    first = CropStats(*stats).normalize(x)
    with Ops() as seen:
        again = CropStats(*stats).normalize(x)
    assert seen.ops == ["aten.sub", "aten.div"]
    assert torch.equal(first, again)
    expected = (x - torch.tensor(stats[0]).view(1, 3, 1, 1)) / torch.tensor(stats[1]).view(1, 3, 1, 1)
    torch.testing.assert_close(first, expected, atol=0, rtol=0)
    mean, std = CropStats(*stats).like(x.double())
    assert mean.dtype == std.dtype == torch.float64 and CropStats(*stats).like(x)[0] is not mean
    meta = CropStats(*stats).like(torch.empty(1, 3, 2, 2, device="meta"))
    assert [t.device.type for t in meta] == ["meta", "meta"]


def test_crop_statistics_first_made_in_inference_mode_serve_a_training_step():
    from solo_hyper.objectives import CropStats

    stats = CropStats((0.1, 0.2, 0.3), (0.3, 0.2, 0.1))  # values no other test uses: made here
    with torch.inference_mode():
        stats.normalize(torch.rand(2, 3, 4, 4))
    x = torch.rand(2, 3, 4, 4, requires_grad=True)
    stats.normalize(x).sum().backward()  # the division saves std for the backward
    torch.testing.assert_close(x.grad, (1 / torch.tensor([0.3, 0.2, 0.1])).view(1, 3, 1, 1).expand_as(x))


@pytest.mark.parametrize("sgld_eval_mode", [False, True])
def test_ebclrs_sampler_leaves_every_submodules_mode_as_it_was(sgld_eval_mode):
    """A frozen (eval) backbone inside a training head keeps its mode across SGLD, whether the
    sampler runs in eval mode or not (a fresh Net view is in train mode: restoring its own flag
    would put the backbone back in train mode)."""
    from solo_hyper.objectives import EBCLR, EBCLRArgs, Net

    objective = EBCLR(EBCLRArgs(proj_hidden_dim=8, proj_output_dim=4, sgld_steps=1,
                                sgld_eval_mode=sgld_eval_mode))  # fmt: skip
    encoder = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 6), torch.nn.BatchNorm1d(6))
    net = Net(encoder, objective.head(6))
    encoder.eval()
    before = {name: m.training for name, m in net.named_modules()}
    x = torch.rand(4, 3, 4, 4) * 2 - 1
    objective.sample_negatives(net, x, torch.zeros(4), torch.randn(4, 4))
    assert {name: m.training for name, m in net.named_modules()} == before
