"""Tests for solo_hyper.sgld: MSGLD noise schedule and steps, and the replay buffer."""

from __future__ import annotations

import math

import pytest
import torch

from solo_hyper.sgld import (
    ReplayBuffer,
    expected_restart_fraction,
    msgld,
    noise_std,
    restart_draws,
)

# ---------------------------------------------------------------- noise schedule


def test_noise_schedule_default_values():
    sigma = noise_std(torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 100.0]), 0.01, 0.05, 3.0)
    expected = torch.tensor([0.05, 0.05 - 0.04 / 3, 0.01 + 0.04 / 3, 0.01, 0.01, 0.01, 0.01])
    torch.testing.assert_close(sigma, expected)
    torch.testing.assert_close(sigma[1:3], torch.tensor([0.0367, 0.0233]), atol=5e-5, rtol=0)
    # fractional counts interpolate linearly
    torch.testing.assert_close(noise_std(torch.tensor([1.5]), 0.0, 1.0, 3.0), torch.tensor([0.5]))


def test_noise_schedule_bad_arguments():
    with pytest.raises(ValueError, match="sigma_min"):
        noise_std(torch.zeros(2), 0.05, 0.01, 3.0)
    with pytest.raises(ValueError, match="K"):
        noise_std(torch.zeros(2), 0.01, 0.05, 0.0)
    with pytest.raises(RuntimeError, match="counts must be >= 0"):  # torch._assert_async
        noise_std(torch.tensor([-1.0]), 0.01, 0.05, 3.0)


# ---------------------------------------------------------------- msgld


def test_gradient_clamp_bounds_drift():
    """Huge gradients: each step moves every coordinate by exactly alpha*delta (sigma = 0)."""
    x0 = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(0))
    counts = torch.zeros(4)

    def log_q(x):  # gradient 1e6 * (3 x^2 + 1) > 0 everywhere, huge
        return 1e6 * (x.pow(3) + x).flatten(1).sum(1)

    steps, alpha, delta = 7, 0.05, 0.3
    out = msgld(log_q, x0, counts, steps, alpha, delta, sigma_min=0.0, sigma_max=0.0)
    torch.testing.assert_close(out, x0 + steps * alpha * delta)

    def log_q_signed(x):  # huge gradients of both signs
        return 1e8 * torch.sin(5 * x).flatten(1).sum(1)

    prev = x0
    for _ in range(5):
        nxt = msgld(log_q_signed, prev, counts, 1, alpha, delta, sigma_min=0.0, sigma_max=0.0)
        assert (nxt - prev).abs().max() <= alpha * delta + 1e-6
        assert (nxt - prev).abs().min() >= alpha * delta - 1e-6  # all clamped
        prev = nxt


def test_small_gradients_are_followed_uphill():
    """Unclamped gradient ascent on log q = -|x|^2 / 2: x <- (1 - alpha) x (no noise)."""
    x0 = 0.5 * torch.rand(3, 2, 4, 4, generator=torch.Generator().manual_seed(1))
    out = msgld(
        lambda x: -0.5 * x.pow(2).flatten(1).sum(1),
        x0,
        torch.zeros(3),
        steps=3,
        step_size=0.1,
        sigma_min=0.0,
        sigma_max=0.0,
    )
    torch.testing.assert_close(out, x0 * 0.9**3)


def test_no_parameter_gradients_and_works_under_no_grad():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 8), torch.nn.Tanh())
    z_ref = torch.randn(5, 8)

    def log_q(x):
        d = torch.cdist(net(x), z_ref).pow(2)
        return torch.logsumexp(-d / 0.1, dim=1)

    x0 = torch.randn(6, 3, 4, 4)
    with torch.no_grad():
        out = msgld(log_q, x0, torch.zeros(6), steps=4, generator=torch.Generator().manual_seed(0))
    assert all(p.grad is None for p in net.parameters())
    assert not out.requires_grad and out.grad_fn is None
    assert out.shape == x0.shape and not torch.equal(out, x0)
    # the input is not modified in place
    assert not x0.requires_grad


def test_input_with_grad_history_is_detached():
    w = torch.tensor(2.0, requires_grad=True)
    x0 = w * torch.ones(2, 3)
    out = msgld(lambda x: x.sum(1), x0, torch.zeros(2), steps=2, sigma_max=0.0, sigma_min=0.0)
    assert out.grad_fn is None and w.grad is None
    torch.testing.assert_close(out, torch.full((2, 3), 2.0 + 2 * 0.05))


def _zero_grad_log_q(x):
    return (0.0 * x).flatten(1).sum(1)


def test_noise_has_the_per_sample_std_and_is_independent_across_samples_and_steps():
    """Zero gradient: x_T - x_0 is T steps of N(0, sigma(kappa_i)^2) noise, so per sample it has
    mean 0 and std sqrt(T) sigma(kappa_i) (sigma from 0.05 at kappa = 0 down to 0.01 at
    kappa >= K = 3); samples with the same sigma get uncorrelated noise."""
    steps, d = 4, 40_000
    counts = torch.tensor([0.0, 1.0, 2.0, 9.0, 0.0, 9.0])
    x0 = torch.randn(6, d, generator=torch.Generator().manual_seed(4))
    noise = msgld(_zero_grad_log_q, x0, counts, steps=steps, generator=torch.Generator().manual_seed(5)) - x0
    sigma = torch.tensor([0.05, 0.05 - 0.04 / 3, 0.01 + 0.04 / 3, 0.01, 0.05, 0.01])
    # the std of a sample std over d normals is std / sqrt(2d) (0.35% here): 5 of those
    torch.testing.assert_close(noise.std(dim=1), math.sqrt(steps) * sigma, rtol=0.02, atol=0)
    assert (noise.mean(dim=1).abs() < 5 * math.sqrt(steps) * sigma / math.sqrt(d)).all()
    corr = torch.corrcoef(noise)  # off the diagonal: 0 +- 1/sqrt(d) = 0.005
    off = corr[~torch.eye(6, dtype=torch.bool)]
    assert off.abs().max() < 5 / math.sqrt(d), corr


def test_determinism_under_seed():
    torch.manual_seed(0)
    net = torch.nn.Linear(12, 4)
    x0, counts = torch.randn(5, 12), torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0])

    def run(seed):
        return msgld(
            lambda x: -net(x).pow(2).sum(1),
            x0,
            counts,
            generator=torch.Generator().manual_seed(seed),
        )

    torch.testing.assert_close(run(3), run(3), rtol=0, atol=0)
    assert not torch.allclose(run(3), run(4))


def test_plain_sgld_when_sigma_min_equals_sigma_max():
    x0 = torch.randn(6, 10)
    kw = dict(steps=5, sigma_min=0.03, sigma_max=0.03)
    a = msgld(
        _zero_grad_log_q, x0, torch.zeros(6), generator=torch.Generator().manual_seed(1), **kw
    )
    b = msgld(
        _zero_grad_log_q,
        x0,
        torch.arange(6.0) * 2,
        generator=torch.Generator().manual_seed(1),
        **kw,
    )
    torch.testing.assert_close(a, b, rtol=0, atol=0)  # the counts no longer matter
    # and the noise has std 0.03 per step: sum of 5 steps has std 0.03 * sqrt(5)
    big = msgld(
        _zero_grad_log_q,
        torch.zeros(2, 20000),
        torch.tensor([0.0, 7.0]),
        generator=torch.Generator().manual_seed(2),
        **kw,
    )
    torch.testing.assert_close(
        big.std(dim=1), torch.full((2,), 0.03 * math.sqrt(5)), rtol=0.03, atol=0
    )


def test_msgld_bad_arguments():
    x, c = torch.zeros(3, 2), torch.zeros(3)
    with pytest.raises(ValueError, match="counts"):
        msgld(_zero_grad_log_q, x, torch.zeros(4))
    with pytest.raises(ValueError, match="steps"):
        msgld(_zero_grad_log_q, x, c, steps=-1)
    with pytest.raises(ValueError, match="step_size"):
        msgld(_zero_grad_log_q, x, c, step_size=-0.1)
    with pytest.raises(ValueError, match="grad_clamp"):
        msgld(_zero_grad_log_q, x, c, grad_clamp=0.0)
    with pytest.raises(ValueError, match="sigma_min"):
        msgld(_zero_grad_log_q, x, c, sigma_min=0.1, sigma_max=0.05)
    with pytest.raises(ValueError, match="log_q"):
        msgld(lambda y: y.sum(), x, c)
    with pytest.raises(TypeError):
        msgld(_zero_grad_log_q, torch.zeros(3, 2, dtype=torch.long), c)


# ---------------------------------------------------------------- replay buffer


def _const_fresh(value: float, shape=(1, 2, 2)):
    return lambda n: torch.full((n, *shape), value)


def _seeded_fresh(seed: int, shape=(1, 2, 2)):
    g = torch.Generator().manual_seed(seed)
    return lambda n: torch.rand((n, *shape), generator=g), g


def test_initialize_fills_in_chunks_and_sets_counts():
    calls = []

    def fresh(n):
        calls.append(n)
        return torch.arange(n * 4, dtype=torch.float32).view(n, 1, 2, 2) + 100 * len(calls)

    buf = ReplayBuffer(10, (1, 2, 2), seed=0, init_count=2.5)
    buf.initialize(fresh, chunk_size=4)
    assert calls == [4, 4, 2]
    assert buf.samples[4, 0, 0, 0] == 200 and buf.samples[9, 0, 1, 1] == 300 + 7
    assert torch.equal(buf.counts, torch.full((10,), 2.5))
    assert ReplayBuffer(3, (1,)).init_count == 5.0  # official default


@pytest.mark.parametrize(
    "n, rho, expected", [(128, 0.6, 0.449), (128, 0.2, 0.178), (16, 0.6, 0.441)]
)
def test_restarted_fraction_is_the_official_samplers(n, rho, expected):
    """floor(n rho) positions drawn with replacement restart (the official Buffer.sample): an
    expected fraction 1 - (1 - 1/n)^floor(n rho), not rho."""
    assert expected_restart_fraction(n, rho) == pytest.approx(expected, abs=5e-4)
    buf = ReplayBuffer(50, (1, 2, 2), seed=1)
    buf.initialize(_const_fresh(1.0))
    draws, fractions = 2000, []
    for _ in range(draws):
        x, slots, counts = buf.sample(n, rho, _const_fresh(-1.0))
        fresh = (x == -1.0).flatten(1).all(1)
        assert torch.equal(fresh, counts == 0)  # re-initialised <=> count 0
        assert 1 <= int(fresh.sum()) <= restart_draws(n, rho)  # at most floor(n rho) distinct
        fractions.append(float(fresh.float().mean()))
    mean = sum(fractions) / draws
    # per-draw sd <= 0.5 / sqrt(n) bounds the mean's sd by 0.5 / sqrt(n * draws)
    assert abs(mean - expected_restart_fraction(n, rho)) < 5 * 0.5 / math.sqrt(n * draws)
    assert abs(mean - rho) > 0.02  # distinguishable from the Bernoulli(rho) reading


def test_restarts_are_floor_of_n_rho_draws():
    assert [restart_draws(128, r) for r in (0.0, 0.2, 0.6, 1.0)] == [0, 25, 76, 128]
    buf = ReplayBuffer(50, (1, 2, 2), seed=3)
    buf.initialize(_const_fresh(1.0))
    x, _, counts = buf.sample(7, 0.1, _const_fresh(-1.0))  # floor(0.7) = 0: nothing restarts
    assert (x == 1.0).all() and (counts == 5.0).all()
    assert expected_restart_fraction(7, 0.1) == 0.0


def test_counts_returned_and_stored():
    buf = ReplayBuffer(1000, (1, 2, 2), seed=2, init_count=5.0)
    buf.initialize(_const_fresh(1.0))
    x, slots, counts = buf.sample(400, 0.5, _const_fresh(-1.0))
    reinit = counts == 0
    assert reinit.any() and (~reinit).any()
    assert torch.equal(counts[~reinit], torch.full((int((~reinit).sum()),), 5.0))
    # stored count = returned count + 1 at the drawn slots (last occurrence for duplicates)
    for k in range(400):
        last = int(torch.nonzero(slots == slots[k]).max())
        assert buf.counts[slots[k]] == counts[last] + 1
    untouched = torch.ones(1000, dtype=torch.bool)
    untouched[slots] = False
    assert torch.equal(buf.counts[untouched], torch.full((int(untouched.sum()),), 5.0))
    # re-initialised slots keep their old sample in the buffer until update()
    assert (buf.samples == 1.0).all()


def test_counts_accumulate_over_calls():
    buf = ReplayBuffer(8, (1,), seed=3, init_count=0.0)
    buf.initialize(lambda n: torch.zeros(n, 1))
    times_drawn = torch.zeros(8)
    for _ in range(30):
        _, slots, counts = buf.sample(3, 0.0, lambda n: torch.zeros(n, 1))
        torch.testing.assert_close(counts, times_drawn[slots])  # pre-increment kappa
        times_drawn[torch.unique(slots)] += 1  # a slot drawn twice in a call counts once
    torch.testing.assert_close(buf.counts, times_drawn)


def test_update_writes_back_last_write_wins():
    buf = ReplayBuffer(6, (2,), seed=4)
    buf.initialize(lambda n: torch.zeros(n, 2))
    buf.update(torch.tensor([1, 4, 1]), torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]))
    expected = torch.zeros(6, 2)
    expected[1] = 3.0
    expected[4] = 2.0
    assert torch.equal(buf.samples, expected)
    # round trip with sample(): the drawn slots now hold what msgld-like code wrote
    x, slots, _ = buf.sample(5, 0.3, lambda n: torch.zeros(n, 2))
    buf.update(slots, x + 10.0)
    last = {int(s): k for k, s in enumerate(slots)}
    for s, k in last.items():
        assert torch.equal(buf.samples[s], x[k] + 10.0)


def test_state_dict_round_trip_continues_exactly():
    shape = (3, 4, 4)
    fresh_a, g_a = _seeded_fresh(11, shape)
    buf = ReplayBuffer(64, shape, seed=7)
    buf.initialize(fresh_a, chunk_size=16)

    def step(b, fresh):
        x, slots, counts = b.sample(16, 0.25, fresh)
        b.update(slots, x * 0.5 + counts.view(-1, 1, 1, 1))
        return x, slots, counts

    for _ in range(5):
        step(buf, fresh_a)
    state = {
        k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in buf.state_dict().items()
    }
    fresh_state = g_a.get_state()
    # the original continues
    original = [step(buf, fresh_a) for _ in range(4)]
    # a fresh object (different seed, different contents) restored from the saved state
    restored = ReplayBuffer(64, shape, seed=999)
    restored.load_state_dict(state)
    fresh_b, g_b = _seeded_fresh(0, shape)
    g_b.set_state(fresh_state)
    continued = [step(restored, fresh_b) for _ in range(4)]
    for (xa, sa, ca), (xb, sb, cb) in zip(original, continued):
        assert torch.equal(xa, xb) and torch.equal(sa, sb) and torch.equal(ca, cb)
    assert torch.equal(buf.samples, restored.samples) and torch.equal(buf.counts, restored.counts)
    # and the round trip survives torch.save / torch.load
    import io

    blob = io.BytesIO()
    torch.save(buf.state_dict(), blob)
    blob.seek(0)
    again = ReplayBuffer(64, shape)
    again.load_state_dict(torch.load(blob))
    assert torch.equal(again.sample(8, 0.0, fresh_a)[1], buf.sample(8, 0.0, fresh_a)[1])


def test_bytes_needed():
    assert ReplayBuffer.bytes_needed(50000, (3, 32, 32)) == 50000 * 3072 * 4 + 50000 * 4
    assert ReplayBuffer.bytes_needed(10, (1, 28, 28), torch.float16) == 10 * 784 * 2 + 40
    buf = ReplayBuffer(7, (2, 3))
    actual = buf.samples.numel() * buf.samples.element_size()
    actual += buf.counts.numel() * buf.counts.element_size()
    assert ReplayBuffer.bytes_needed(7, (2, 3)) == actual


def test_buffer_bad_arguments():
    for cap in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="capacity"):
            ReplayBuffer(cap, (1, 2, 2))
    with pytest.raises(ValueError, match="shape"):
        ReplayBuffer(4, (1, 0, 2))
    buf = ReplayBuffer(4, (1, 2, 2))
    with pytest.raises(RuntimeError, match="initialize"):
        buf.sample(2, 0.2, _const_fresh(0.0))
    with pytest.raises(ValueError, match="shape"):
        buf.initialize(lambda n: torch.zeros(n, 2, 2))
    buf.initialize(_const_fresh(0.0))
    for rho in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="rho"):
            buf.sample(2, rho, _const_fresh(0.0))
    with pytest.raises(ValueError, match="n must"):
        buf.sample(0, 0.2, _const_fresh(0.0))
    with pytest.raises(ValueError, match="fresh_fn"):
        buf.sample(50, 1.0, lambda n: torch.zeros(n + 1, 1, 2, 2))
    with pytest.raises(ValueError, match="slots"):
        buf.update(torch.tensor([0, 1]), torch.zeros(3, 1, 2, 2))
    with pytest.raises(RuntimeError, match="slots must be in"):  # torch._assert_async
        buf.update(torch.tensor([0, 4]), torch.zeros(2, 1, 2, 2))
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(5, (1, 2, 2)).load_state_dict(buf.state_dict())
    partial = {**buf.state_dict(), "samples": buf.samples[:3], "counts": buf.counts[:3]}
    with pytest.raises(ValueError, match="holds 3 of its 4 chains.*start a new run"):
        ReplayBuffer(4, (1, 2, 2)).load_state_dict(partial)
