"""One Poincare distance: training (the contrastive loss's logits), evaluation (the kNN) and the
disk map all compute it through ``poincare.poincare_distance_form``: the same function object,
called by each (a recording wrapper), giving the same matrix to the bit."""

from __future__ import annotations

import pytest
import torch

from solo_hyper.geometry import make_space, manifolds, poincare
from solo_hyper.losses.contrastive import contrastive_loss
from solo_hyper.metrics.disk_map import fit_disk
from solo_hyper.metrics.knn import nearest_neighbours

C = 0.3


def test_training_and_evaluation_compute_the_poincare_distance_through_one_function(monkeypatch):
    real = poincare.poincare_distance_form
    assert manifolds.poincare_distance_form is real  # the space's distance is that function
    calls: list[tuple[str, torch.Tensor]] = []
    caller = ["?"]

    def recording(x, y, c):
        form = real(x, y, c)
        calls.append((caller[0], form.matrix().detach()))
        return form

    monkeypatch.setattr(manifolds, "poincare_distance_form", recording)
    space = make_space("poincare", C)
    g = torch.Generator().manual_seed(0)
    z = space.expmap0(0.5 * torch.randn(8, 5, generator=g))

    caller[0] = "training"
    loss = contrastive_loss(z, torch.arange(8) % 4, temperature=0.2, space=space)
    assert torch.isfinite(loss)
    caller[0] = "evaluation"
    nearest_neighbours(z, z, k=3, distance="poincare", curvature=C)
    caller[0] = "disk map"
    fit_disk(space.distance_matrix(z, z).double().detach(), curvature=C, steps=2)

    by_caller: dict[str, list[torch.Tensor]] = {}
    for who, matrix in calls:
        by_caller.setdefault(who, []).append(matrix)
    assert set(by_caller) == {"training", "evaluation", "disk map"}
    training, evaluation = by_caller["training"][0], by_caller["evaluation"][0]
    assert torch.equal(training, evaluation)  # one function, one float32 result
    assert torch.equal(evaluation, poincare.poincare_distance_matrix(z.detach(), z.detach(), C))


def test_lying_in_the_space_is_the_spaces_own_check():
    """``check_point`` of each space (geoopt's ``_check_point_on_manifold``): the losses ask the
    space, they do not branch on its name."""
    ball, hyperboloid = make_space("poincare", C), make_space("lorentz", C)
    v = 0.5 * torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    ball.check_point(ball.expmap0(v))
    hyperboloid.check_point(hyperboloid.expmap0(v))
    with pytest.raises(ValueError, match="not in the Poincare ball of curvature -0.3"):
        ball.check_point(hyperboloid.expmap0(v)[:, 1:] * 10)
    with pytest.raises(ValueError, match="not on the hyperboloid"):
        hyperboloid.check_point(torch.cat([ball.expmap0(v), torch.ones(6, 1)], dim=1))
    with pytest.raises(ValueError, match="holds NaN values"):
        make_space("sphere").check_point(torch.full((2, 3), float("nan")))
