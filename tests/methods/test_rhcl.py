"""RHCL / RoCL: the method in solo-learn's style, the Eq. 9 attack's side effects, the Eq. 11 loss."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import fake_loaders, tiny_config

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.config import ConfigError
from solo_hyper.geometry import make_space
from solo_hyper.losses import contrastive_loss
from solo_hyper.losses.robust import robust_contrastive_loss
from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter

METHODS = ["rhcl", "rocl"]
HEAD = {"proj_hidden_dim": 16, "proj_output_dim": 8}


def build(method: str, **method_kwargs):
    cfg = tiny_config(method, method_kwargs={**HEAD, **method_kwargs})
    prep = prepare(None, base=cfg)
    return adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)


def pixel_batch(n: int = 8, seed: int = 0):
    """A training batch as the adapter hands it to RHCL: two crops in [0, 1] pixel space."""
    g = torch.Generator().manual_seed(seed)
    crops = [torch.rand(n, 3, 28, 28, generator=g) for _ in range(2)]
    return [torch.arange(n), crops, torch.randint(0, 10, (n,), generator=g)]


# ----------------------------------------------------------------------------- the method


def test_registered_with_their_geometry_and_roc_l_defaults():
    methods = adapter.registered_methods()
    assert {"rhcl", "rocl"} <= set(methods)
    rhcl, rocl = build("rhcl"), build("rocl")
    assert rhcl.args.geometry == "poincare" and rocl.args.geometry == "sphere"
    assert rhcl.embedding_space.name == "poincare" and rocl.embedding_space.name == "sphere"
    assert rocl.args.temperature == 0.5
    for model in (rhcl, rocl):
        a = model.args
        assert (a.eps, a.alpha, a.steps, a.random_start) == (8 / 255, 0.007, 7, True)
        assert a.lambda_adv == 1 / 512 and a.attack_temperature is None
        assert model.pixel_space_crops and model.required_crops == 2


@pytest.mark.parametrize("method", METHODS)
def test_forward_keys_and_shapes(method):
    model = build(method)
    out = model(torch.randn(4, 3, 28, 28))
    assert {"logits", "feats", "z"} <= set(out)
    assert out["logits"].shape == (4, 10)
    assert out["feats"].shape == (4, model.features_dim)
    assert out["z"].shape == (4, 8)


@pytest.mark.parametrize("method", METHODS)
def test_fast_dev_run_fit(method):
    model = build(method, steps=2)
    trainer = adapter.LIGHTNING.Trainer(
        fast_dev_run=True, accelerator="cpu", devices=1, logger=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    before = [p.detach().clone() for p in model.encoder.parameters()]
    trainer.fit(model, *fake_loaders())
    assert any(not torch.equal(a, b) for a, b in zip(model.encoder.parameters(), before))
    metrics = trainer.callback_metrics
    assert torch.isfinite(metrics["train_nce_loss"]) and torch.isfinite(
        metrics["train_adv_reg_loss"]
    )
    assert model.training  # the attack handed train mode back


# ----------------------------------------------------------------------------- the attack


def _bn_state(model) -> dict[str, torch.Tensor]:
    return {
        k: v.clone() for k, v in model.state_dict().items()
        if any(s in k for s in ("running_mean", "running_var", "num_batches_tracked"))
    }  # fmt: skip


def test_attack_runs_in_eval_mode_and_restores_every_flag_and_bn_statistics():
    model = build("rhcl")
    model.train()
    frozen_bn = next(m for m in model.encoder.modules() if isinstance(m, torch.nn.BatchNorm2d))
    frozen_bn.eval()  # a deliberately frozen submodule must stay frozen
    flags = {name: m.training for name, m in model.named_modules()}
    seen: list[bool] = []
    handle = model.encoder.register_forward_hook(lambda m, i, o: seen.append(m.training))
    stats = _bn_state(model)
    indexes, (anchor, positive), _ = pixel_batch()

    x_adv = model.objective.instance_attack(model, anchor, positive, indexes)
    handle.remove()

    assert seen and not any(seen), "encoder must be in eval mode during the attack"
    assert {name: m.training for name, m in model.named_modules()} == flags
    after = _bn_state(model)
    assert all(torch.equal(stats[k], after[k]) for k in stats)
    assert (x_adv - anchor).abs().max() <= 8 / 255 + 1e-6
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    assert not torch.equal(x_adv, anchor)


def test_attack_leaves_parameter_grads_untouched():
    model = build("rhcl")
    params = list(model.parameters())
    for i, p in enumerate(params):
        p.grad = None if i % 2 else torch.full_like(p, 0.5)
    indexes, (anchor, positive), _ = pixel_batch()
    model.objective.instance_attack(model, anchor, positive, indexes)
    for i, p in enumerate(params):
        if i % 2:
            assert p.grad is None
        else:
            assert torch.equal(p.grad, torch.full_like(p, 0.5))


@pytest.mark.parametrize("method", METHODS)
def test_attack_increases_the_contrastive_loss_it_targets(method):
    model = build(method, random_start=False)
    model.eval()
    indexes, (anchor, positive), _ = pixel_batch(n=16)

    def attack_loss(x):
        with torch.no_grad():
            z = model(model.normalize_pixels(x))["z"]
            zp = model(model.normalize_pixels(positive))["z"]
            a = model.args
            return contrastive_loss(
                torch.cat([z, zp]), indexes.repeat(2), a.temperature, space=model.embedding_space
            )

    x_adv = model.objective.instance_attack(model, anchor, positive, indexes)
    assert attack_loss(x_adv) > attack_loss(anchor)


def test_zero_budget_gives_back_the_anchor():
    model = build("rhcl", eps=0.0)
    indexes, (anchor, positive), _ = pixel_batch()
    assert torch.equal(model.objective.instance_attack(model, anchor, positive, indexes), anchor)


# ----------------------------------------------------------------------------- the loss


def _poincare_distance(x: torch.Tensor, y: torch.Tensor, c: float) -> torch.Tensor:
    """arccosh form (independent of the library's Mobius-addition form)."""
    sq = ((x - y) ** 2).sum(-1)
    den = (1 - c * (x**2).sum(-1)) * (1 - c * (y**2).sum(-1))
    return torch.acosh(1 + 2 * c * sq / den) / math.sqrt(c)


def _similarity(a: torch.Tensor, b: torch.Tensor, geometry: str, c: float, tau: float) -> float:
    if geometry == "poincare":
        return float(-_poincare_distance(a, b, c) / tau)
    return float(F.cosine_similarity(a, b, dim=0) / tau)


def _info_nce(views: list[torch.Tensor], ids: list[int], geometry: str, c: float, tau: float):
    """Mean over anchors of -1/|P| sum_p s_ap + log sum_{a' != a} exp s_aa', written as loops."""
    total = 0.0
    for i, zi in enumerate(views):
        sims = {j: _similarity(zi, zj, geometry, c, tau) for j, zj in enumerate(views) if j != i}
        positives = [j for j in sims if ids[j] == ids[i]]
        log_den = math.log(sum(math.exp(s) for s in sims.values()))
        total += -sum(sims[p] for p in positives) / len(positives) + log_den
    return total / len(views)


def _ball_points(n: int, d: int, c: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(n, d, generator=g, dtype=torch.float64)
    radius = 0.9 / math.sqrt(c) * torch.rand(n, 1, generator=g, dtype=torch.float64)
    return F.normalize(v, dim=1) * radius


@pytest.mark.parametrize("geometry", ["poincare", "sphere"])
@pytest.mark.parametrize("adv_is_clean", [True, False])
def test_eq11_loss_matches_the_documented_expression(geometry, adv_is_clean):
    space = make_space(geometry, 0.3)
    c, tau, lam, n = 0.3, 0.5, 1 / 256, 5
    z, zp = _ball_points(n, 4, c, 1), _ball_points(n, 4, c, 2)
    z_adv = z.clone() if adv_is_clean else _ball_points(n, 4, c, 3)
    ids = torch.arange(n)

    total, first, reg = robust_contrastive_loss(z, zp, z_adv, ids, tau, lam, space)

    labels = list(range(n)) * 3
    expected_first = _info_nce([*z, *zp, *z_adv], labels, geometry, c, tau)
    expected_reg = _info_nce([*z_adv, *zp], labels[: 2 * n], geometry, c, tau)
    assert float(first) == pytest.approx(expected_first, rel=1e-6)
    assert float(reg) == pytest.approx(expected_reg, rel=1e-6)
    assert float(total) == pytest.approx(expected_first + lam * expected_reg, rel=1e-6)
    if adv_is_clean:
        # x_adv = x: the regulariser is the plain pair loss of HCL / SimCLR (Eq. 6)
        assert float(reg) == pytest.approx(_info_nce([*z, *zp], labels[: 2 * n], geometry, c, tau))


def _rocl_nt_xent(views: list[torch.Tensor], tau: float, blocks: int) -> float:
    """RoCL's ``NT_xent`` (src/loss.py) written as loops: cosine logits over the stacked views,
    each ordered positive pair (views of one image in different blocks) contributes
    -log softmax, and the sum is divided by the number of views (2B, or 3B for 'Rep')."""
    n = len(views) // blocks
    total = 0.0
    for i, zi in enumerate(views):
        sims = {j: float(F.cosine_similarity(zi, zj, dim=0)) / tau for j, zj in enumerate(views)}
        log_den = math.log(sum(math.exp(s) for j, s in sims.items() if j != i))
        for j in range(i % n, len(views), n):
            if j != i:
                total += -(sims[j] - log_den)
    return total / len(views)


def test_default_lambda_adv_is_roc_ls_weight_under_its_normalisation():
    """RoCL's loss is NT_xent('Rep') on [t(x); t'(x); x_adv] + NT_xent on [x_adv; t'(x)] / 256
    (lamda = 256). Its main term sums both positives of an anchor where ours averages them, so
    with the default weight ours is exactly half of RoCL's loss (same minimiser, same balance)."""
    from solo_hyper.objectives.robust import RHCLArgs, RoCLArgs

    assert RHCLArgs().lambda_adv == RoCLArgs().lambda_adv
    n, tau = 6, 0.5
    z, zp, z_adv = (_ball_points(n, 5, 1.0, seed) for seed in (4, 5, 6))
    total, _, _ = robust_contrastive_loss(
        z, zp, z_adv, torch.arange(n), tau, RoCLArgs().lambda_adv, make_space("sphere")
    )
    rocl = _rocl_nt_xent([*z, *zp, *z_adv], tau, 3) + _rocl_nt_xent([*z_adv, *zp], tau, 2) / 256
    assert float(total) == pytest.approx(rocl / 2, rel=1e-9)
    # the old default 1/256 would double the regulariser relative to RoCL's
    doubled, _, _ = robust_contrastive_loss(
        z, zp, z_adv, torch.arange(n), tau, 1 / 256, make_space("sphere")
    )
    assert float(doubled) != pytest.approx(rocl / 2, rel=1e-6)


def test_training_step_with_zero_budget_is_eq11_on_the_clean_crops_plus_the_probe():
    """eps = 0: x_adv = x, so the step's loss is Eq. 11 with z_adv = z, plus solo's online CE."""
    model = build("rhcl", eps=0.0).double()  # float64: no Gram-matrix rounding at distance 0
    model.train()
    indexes, crops, targets = pixel_batch()
    anchor, positive = (x.double() for x in crops)
    batch = [indexes, [anchor, positive], targets]
    loss = model.training_step(batch, 0)

    feats = [model.encoder(model.normalize_pixels(x)) for x in (anchor, positive)]
    z = [model.project(f) for f in feats]
    ce = sum(F.cross_entropy(model.classifier(f), targets) for f in feats) / 2
    c, tau, lam = float(model.curvature), model.args.temperature, model.args.lambda_adv
    views = [*z[0], *z[1], *z[0]]
    labels = indexes.tolist() * 3
    expected = _info_nce(views, labels, "poincare", c, tau)
    expected += lam * _info_nce(
        views[: 2 * len(anchor)], labels[: 2 * len(anchor)], "poincare", c, tau
    )
    assert float(loss) == pytest.approx(expected + float(ce), rel=1e-7)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"eps": -0.1}, "eps must be a number >= 0"),
        ({"alpha": -1.0}, "alpha must be a number >= 0"),
        ({"steps": -1}, "steps must be an integer >= 0"),
        ({"steps": 2.5}, "steps must be an integer >= 0"),
        ({"lambda_adv": -1.0}, "lambda_adv must be a number >= 0"),
        ({"attack_temperature": 0.0}, "attack_temperature must be > 0"),
        ({"random_start": "yes"}, "random_start must be true or false"),
    ],
)
def test_bad_attack_arguments_are_rejected_before_any_work(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        prepare(None, base=tiny_config("rhcl", method_kwargs={**HEAD, **kwargs}))


def test_bad_attack_arguments_are_rejected_by_the_class_too():
    method = adapter.registered_methods()["rhcl"]
    with pytest.raises(ValueError, match="eps must be a number >= 0"):
        if adapter.API.startswith("solo-learn main"):  # checked by solo main's config hook
            from omegaconf import OmegaConf

            from solo_hyper.solo.main_cfg import solo_config

            prep = prepare(None, base=tiny_config("rhcl", method_kwargs=HEAD))
            cfg = solo_config(prep.cfg, 10, prep.small_images, prep.num_crops)
            cfg["method_kwargs"]["eps"] = -1.0
            method.add_and_assert_specific_cfg(OmegaConf.create(cfg))
        else:
            method(eps=-1.0)


def test_rhcl_needs_exactly_two_crops():
    cfg = tiny_config("rhcl", augmentations=[{"crop_size": 28, "num_crops": 2},
                                             {"crop_size": 16, "num_crops": 2}])  # fmt: skip
    with pytest.raises(ConfigError, match="exactly 2 crops"):
        prepare(None, base=cfg)


@pytest.mark.parametrize("method", METHODS)
def test_crops_normalised_by_a_cpu_pipeline_give_the_on_device_result(method):
    """Crops that arrive normalised (solo's CPU pipeline) are de-normalised with the statistics
    that pipeline used, attacked in [0, 1] pixels with the same budget and re-normalised: the
    adversarial view and the step's loss equal the on-device path's for the same crops."""
    on_device = build(method, steps=2).double()
    prep = prepare(None, base=tiny_config(
        method, method_kwargs={**HEAD, "steps": 2}, data={"augment_on_device": False}
    ))  # fmt: skip
    cpu = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops).double()
    assert on_device.device_augmentation is not None and cpu.device_augmentation is None
    weights = on_device.state_dict()
    cpu.load_state_dict({k: v for k, v in weights.items() if not k.startswith("device_aug")})
    indexes, crops, targets = pixel_batch()
    pixels = [x.double() for x in crops]
    mean = torch.tensor(prep.cfg["data"]["mean"], dtype=torch.float64).view(1, -1, 1, 1)
    std = torch.tensor(prep.cfg["data"]["std"], dtype=torch.float64).view(1, -1, 1, 1)
    normalised = [(x - mean) / std for x in pixels]  # what the CPU pipeline delivers
    received = [cpu.denormalize(x) for x in normalised]  # what on_after_batch_transfer does
    assert all(torch.allclose(a, b, atol=1e-12) for a, b in zip(received, pixels))

    results = []
    for model, batch_crops in ((on_device, pixels), (cpu, received)):
        torch.manual_seed(3)  # the attack's random start
        _, extras = model.objective.prepare(model, [indexes, batch_crops, targets])
        torch.manual_seed(3)
        loss = model.training_step([indexes, batch_crops, targets], 0)
        results.append((extras["adversarial_view"], loss))
    (view_a, loss_a), (view_b, loss_b) = results
    assert torch.allclose(view_a, view_b, atol=1e-10)
    assert float(loss_a) == pytest.approx(float(loss_b), rel=1e-9)


def test_crops_of_custom_data_without_statistics_are_an_error_before_training():
    """solo-learn 1.0.2's custom data is normalised with --mean/--std: without them the crops
    cannot be de-normalised, which is said when the method is built."""
    if adapter.API.startswith("solo-learn main"):
        from omegaconf import OmegaConf

        cfg = tiny_config("rhcl", method_kwargs=HEAD, data={"augment_on_device": False})
        prep = prepare(None, base=cfg)
        from solo_hyper.solo.main_cfg import solo_config

        solo_cfg = solo_config(prep.cfg, 10, prep.small_images, prep.num_crops)
        solo_cfg["data"].update(dataset="fashionmnist", mean=None, std=None)
        with pytest.raises(ConfigError, match="cannot de-normalise the crops of dataset"):
            adapter.plugin_class(adapter.registered_methods()["rhcl"])(OmegaConf.create(solo_cfg))
        return
    with pytest.raises(ConfigError, match="cannot de-normalise the crops of custom data.*--mean"):
        adapter.registered_methods()["rhcl"](
            encoder="resnet18", num_classes=10, dataset="custom", backbone_name="small_cnn",
            backbone_kwargs={"width": 8}, **HEAD,
        )  # fmt: skip
