"""Methods declare their embedding space: heads put the loss's points on it, checkpoints store
it, and evaluation reads it back (never from the vectors' norms)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import fake_loaders, tiny_config

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.evaluation.features import embed, embedding_space, hyperbolic_space
from solo_hyper.evaluation.knn_probe import evaluate_knn
from solo_hyper.run.checkpoints import load_pretrained
from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter

SMALL = {"proj_hidden_dim": 16, "proj_output_dim": 8}


def build(method: str, **method_kwargs):
    cfg = tiny_config(method, method_kwargs={**SMALL, **method_kwargs})
    if method == "ebclr":
        cfg["method_kwargs"]["buffer_size"] = 64
    prep = prepare(None, base=cfg)
    return adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)


def save(model, path, drop_space: bool = False):
    """A checkpoint as Lightning writes it: the state dict plus the hooks' entries."""
    ckpt = {"state_dict": model.state_dict(), "global_step": 1}
    model.on_save_checkpoint(ckpt)
    if drop_space:  # as written before the space was recorded
        del ckpt["embedding_space"]
    torch.save(ckpt, path)
    return path


def test_hyperbolic_ebclr_is_evaluated_on_the_points_its_loss_trained_on(tmp_path):
    """c = 0.1: the loss sees points at radius tanh(sqrt c)/sqrt c = 0.97 from the origin; the
    evaluation's projector outputs must be those very points (not the raw projections, whose
    norms happen to fit inside the ball too), and the run's declared ball is used."""
    c = 0.1
    model = build("ebclr", geometry="poincare", curvature=c)
    path = save(model, tmp_path / "ebclr.ckpt")
    loaded, cfg, ckpt = load_pretrained(path)
    assert ckpt["embedding_space"] == {"name": "poincare", "curvature": c,
                                       "learnable_curvature": False}  # fmt: skip
    _, val = fake_loaders(n=64, channels=1)
    emb = embed(loaded, cfg, val)
    radius = math.tanh(math.sqrt(c)) / math.sqrt(c)
    torch.testing.assert_close(emb.z.norm(dim=1), torch.full((len(emb.z),), radius), rtol=1e-5,
                               atol=0)  # fmt: skip
    # the loss's points: the method's own projection of the same features
    torch.testing.assert_close(emb.z, loaded.project(emb.feats))
    space = hyperbolic_space(loaded, cfg, ckpt)
    assert space.name == "poincare" and space.curvature == pytest.approx(c)
    result = evaluate_knn(loaded, cfg, emb, emb, ks=[5], delta_points=20, checkpoint=ckpt)
    assert result["geometry"] == "poincare" and result["curvature"] == pytest.approx(c)
    assert {r["distance"] for r in result["knn"] if r["space"] == "projector"} == {
        "cosine", "euclidean", "poincare"
    }
    assert result["hierarchy"]["projector"]["distance"] == "poincare"


def test_lorentz_hcl_outputs_lie_on_the_hyperboloid_and_are_evaluated_there(tmp_path):
    c = 0.5
    model = build("hcl", geometry="lorentz", curvature=c, learnable_curvature=True)
    out = model(torch.randn(4, 3, 28, 28))
    z = out["z"]
    assert z.shape == (4, 9)
    torch.testing.assert_close(-z[:, 0] ** 2 + (z[:, 1:] ** 2).sum(1), torch.full((4,), -1 / c),
                               rtol=1e-4, atol=1e-4)  # fmt: skip
    assert any(p is model.embedding_space.raw_curvature for p in model.parameters())
    loaded, cfg, ckpt = load_pretrained(save(model, tmp_path / "hcl.ckpt"))
    assert ckpt["embedding_space"]["name"] == "lorentz"
    space = hyperbolic_space(loaded, cfg, ckpt)
    assert space.name == "lorentz" and float(space.curvature) == pytest.approx(c, rel=1e-6)


def test_checkpoints_without_the_record_fall_back_to_the_config(tmp_path):
    model = build("hcl", geometry="lorentz", curvature=0.3)
    loaded, cfg, ckpt = load_pretrained(save(model, tmp_path / "old.ckpt", drop_space=True))
    assert "embedding_space" not in ckpt
    space = embedding_space(None, cfg, ckpt)
    assert space.name == "lorentz" and space.curvature == pytest.approx(0.3)
    sphere = {"method_kwargs": {"geometry": "sphere"}}
    assert embedding_space(None, sphere).name == "sphere"
    assert hyperbolic_space(None, sphere) is None
    assert embedding_space(None, {"method_kwargs": {}}) is None  # solo's own methods


def test_each_method_builds_its_configured_space():
    assert build("hcl").embedding_space.name == "poincare"
    assert build("hcl", geometry="sphere").embedding_space.name == "sphere"
    assert build("ebclr", geometry="poincare").embedding_space.name == "poincare"
    assert build("ebclr").embedding_space.name == "sphere"
    assert build("rocl").embedding_space.name == "sphere"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"geometry": "hyperbolic"}, r"method_kwargs.geometry must be one of \('poincare', "),
        ({"geometry": "lorenz"}, r"did you mean 'lorentz'"),
        ({"geometry": "lorentz", "curvature": 0.0}, r"curvature must be > 0"),
        ({"chunk_size": 0}, r"method_kwargs.chunk_size must be a positive integer, 'auto'"),
        ({"chunk_size": 2.5}, r"chunk_size must be a positive integer"),
        ({"distance": "cosine"}, r"unknown .*'method_kwargs.distance'.*'geometry'"),
    ],
)
@pytest.mark.parametrize("method", ["hcl", "ebclr"])
def test_bad_space_arguments_are_refused_before_work(method, kwargs, message):
    from solo_hyper.config import ConfigError

    cfg = tiny_config(method, method_kwargs={**SMALL, **kwargs})
    with pytest.raises(ConfigError, match=message):
        prepare(None, base=cfg)


@pytest.mark.parametrize("geometry", ["lorentz", "sphere"])
def test_geometry_ablation_configs_build_hcl_on_their_space(geometry):
    """configs/geometry/: HCL's Fashion-MNIST config with another embedding space (issue 15.6)."""
    prep = prepare(f"configs/geometry/fashionmnist-hcl-{geometry}.yaml")
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    assert prep.cfg["method"] == "hcl" and model.embedding_space.name == geometry


@pytest.mark.parametrize("learnable", [False, True])
@pytest.mark.parametrize("chunk_size", [None, 5])
@pytest.mark.parametrize("method", ["hcl", "shcl"])
def test_lorentz_hcl_is_the_poincare_objective(method, chunk_size, learnable):
    """The same projector outputs (float64) through each method's own head mapping and loss
    (SHCL: class labels as positives; chunked or fused): geometry lorentz and poincare give the
    same loss and the same gradients w.r.t. the outputs and the curvature, to 1e-6 relative."""
    g = torch.Generator().manual_seed(12)
    n = 12
    outputs = torch.randn(2, n, SMALL["proj_output_dim"], generator=g, dtype=torch.float64)
    batch = (torch.arange(n), None, torch.randint(0, 3, (n,), generator=g))
    results = {}
    for geometry in ("poincare", "lorentz"):
        model = build(method, geometry=geometry, curvature=0.3, chunk_size=chunk_size,
                      learnable_curvature=learnable, temperature=0.2).double()  # fmt: skip
        v = outputs.clone().requires_grad_(True)
        loss, metrics = model.objective.loss(model, batch, [], [model.projector.to_space(u) for u in v])
        params = [v] + ([model.embedding_space.raw_curvature] if learnable else [])
        results[geometry] = (loss, *torch.autograd.grad(loss, params))
        assert metrics["nce_loss"] == loss.detach()
    for got, want in zip(results["lorentz"], results["poincare"]):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    assert float(results["poincare"][1].abs().max()) > 1e-3  # the gradient is not vacuous
