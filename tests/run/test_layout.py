"""Channels-last training (``channels_last: true``) computes what the default layout computes,
within float rounding; the option does not change a run's identity."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config

from solo_hyper.backbones import build_backbone
from solo_hyper.run.identity import config_hash
from solo_hyper.run.train import prepare, pretrain
from solo_hyper.solo import adapter

pl = adapter.LIGHTNING


def assert_equal_within_rounding(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    """Equal up to float32 rounding of reductions summed in another order: a relative error of
    the whole tensor far below any training effect (1e-4 of its norm; float32 eps is 1.2e-7, and a
    gradient sums 12,544 products per channel)."""
    error = (a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-12)
    assert error < 1e-4, f"{what}: relative difference {error:.2e}"


def test_a_channels_last_step_gives_the_default_gradients():
    torch.manual_seed(0)
    x = torch.randn(16, 3, 28, 28)
    grads = []
    for layout in (torch.contiguous_format, torch.channels_last):
        torch.manual_seed(1)
        net = build_backbone("small_cnn", width=8).to(memory_format=layout)
        net(x.contiguous(memory_format=layout)).pow(2).sum().backward()
        grads.append([p.grad for p in net.parameters()])
    for i, (a, b) in enumerate(zip(*grads)):
        assert_equal_within_rounding(b, a, f"gradient {i}")


class Final(pl.Callback):
    def on_train_end(self, trainer, pl_module) -> None:
        self.weights = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
        self.layout = next(p for p in pl_module.parameters() if p.dim() == 4).is_contiguous(
            memory_format=torch.channels_last
        )


@pytest.mark.parametrize("steps", [3])
def test_channels_last_training_ends_at_the_default_weights(steps, tmp_path, fashion_mnist_available):
    finals = []
    for last in (False, True):
        final = Final()
        cfg = tiny_config("hcl", max_steps=steps, channels_last=last, knn_eval={"enabled": False},
                          checkpoint={"enabled": False, "dir": str(tmp_path / str(last))})  # fmt: skip
        pretrain(prepare(None, base=cfg), quiet=True, callbacks=[final])
        finals.append(final)
    assert (finals[0].layout, finals[1].layout) == (False, True)
    for key, value in finals[0].weights.items():
        if value.is_floating_point():
            assert_equal_within_rounding(finals[1].weights[key], value, key)


def test_the_layout_keys_are_not_part_of_a_runs_identity():
    base = prepare(None, base=tiny_config("hcl")).cfg
    fast = prepare(None, base=tiny_config("hcl", channels_last=True, compile=True)).cfg
    assert config_hash(base) == config_hash(fast)


def test_channels_last_is_applied_before_ddp_wraps_the_module(tmp_path, monkeypatch, fashion_mnist_available):
    """DDP's gradient buckets take the strides the parameters have when it wraps the module: the
    weights must already be channels-last then (one gloo process)."""
    seen = []
    original = torch.nn.parallel.DistributedDataParallel.__init__

    def wrap(self, module, *args, **kwargs):
        conv = next(p for p in module.parameters() if p.dim() == 4)
        seen.append(conv.is_contiguous(memory_format=torch.channels_last))
        original(self, module, *args, **kwargs)

    monkeypatch.setattr(torch.nn.parallel.DistributedDataParallel, "__init__", wrap)
    cfg = tiny_config("hcl", max_steps=1, channels_last=True, strategy="ddp", knn_eval={"enabled": False},
                      checkpoint={"enabled": False, "dir": str(tmp_path)})  # fmt: skip
    try:
        pretrain(prepare(None, base=cfg), quiet=True)
    finally:  # Lightning leaves its one-process group behind: forked DDP tests after this need none
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    assert seen == [True]


def test_the_cuda_math_modes_are_set_for_a_cuda_run_and_restored_after_it(monkeypatch):
    from types import SimpleNamespace

    from solo_hyper.run import layout

    before = layout.cuda_math_modes()
    cuda = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cuda", 0)))
    cpu = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu")))
    try:
        layout.set_cuda_math_modes({"matmul_tf32": False, "cudnn_tf32": False, "cudnn_benchmark": False})
        callback = layout.TrainingLayout(tf32=True, cudnn_benchmark=True)
        callback.setup(cuda, torch.nn.Linear(2, 2))
        assert layout.cuda_math_modes() == {"matmul_tf32": True, "cudnn_tf32": True, "cudnn_benchmark": True}
        callback.teardown(cuda, None)
        assert not any(layout.cuda_math_modes().values())
        off = layout.TrainingLayout(tf32=False, cudnn_benchmark=True)
        off.setup(cuda, torch.nn.Linear(2, 2))
        assert layout.cuda_math_modes() == {"matmul_tf32": False, "cudnn_tf32": False, "cudnn_benchmark": True}
        off.teardown(cuda, None)
        layout.TrainingLayout().setup(cpu, torch.nn.Linear(2, 2))  # the CPU: nothing changes
        assert not any(layout.cuda_math_modes().values())
    finally:
        layout.set_cuda_math_modes(before)


def test_the_math_mode_keys_are_not_part_of_a_runs_identity():
    base = prepare(None, base=tiny_config("hcl")).cfg
    off = prepare(None, base=tiny_config("hcl", tf32=False, cudnn_benchmark=False)).cfg
    assert config_hash(base) == config_hash(off)
