"""Step cost of the heavier methods, through their own benchmark scripts' functions.

- RHCL and RoCL against HCL: ``benchmarks/rhcl_step.py`` (``step_times``: forward, backward and
  optimiser step of one batch, Lightning-timed). Its own estimate: about 4x with a 7-step attack.
- EBCLR against SimCLR, and its MSGLD sampler with against without parameter gradients:
  ``benchmarks/ebclr_step.py`` (``build``, ``loaders``, ``time_fit``, ``sampler_official_way``),
  with the overrides its ``main`` uses. Target: at most 6.5x SimCLR at T = 10, the official
  code's cost.

Both scripts run on the CPU only; the methods alternate in rounds here as in the scripts.
"""

from __future__ import annotations

import statistics

from benchmarks.timing import Row, paired_ratios, summarize, timed


def rhcl_rows(batch_size: int = 128, steps: int = 6, rounds: int = 3) -> list[Row]:
    """RHCL/HCL and RoCL/HCL step-time ratios (per round, each the median of ``steps`` steps)."""
    from benchmarks import rhcl_step

    methods = ("hcl", "rhcl", "rocl")
    step: dict[str, list[float]] = {m: [] for m in methods}
    for r in range(rounds):
        shift = r % len(methods)
        for method in methods[shift:] + methods[:shift]:
            step[method].append(statistics.median(rhcl_step.step_times(method, batch_size, steps)))
    where = f"small_cnn, batch {batch_size}, cpu"
    return [
        Row("steps", m, "hcl", f"step time ({where})",
            summarize(paired_ratios(step[m], step["hcl"])), None,
            f"{1000 * summarize(step[m]).median:.0f} vs {1000 * summarize(step['hcl']).median:.0f} ms")
        for m in ("rhcl", "rocl")
    ]  # fmt: skip


def ebclr_rows(
    batch_size: int = 128, steps: int = 8, rounds: int = 3, sgld_steps: int = 10
) -> list[Row]:
    """EBCLR/SimCLR step-time ratio and the sampler's cost with parameter gradients / without."""
    from benchmarks import ebclr_step as eb

    if steps < 3:
        raise ValueError(f"ebclr_step.time_fit drops 2 warm-up steps: need steps >= 3, got {steps}")
    b = batch_size
    common = [f"optimizer.batch_size={b}", "knn_eval.enabled=false", "checkpoint.enabled=false"]
    ebclr_overrides = common + [f"method_kwargs.sgld_steps={sgld_steps}", "method_kwargs.buffer_size=2048"]  # fmt: skip
    backbone = eb.build(eb.EBCLR_CONFIG, ebclr_overrides).solo_hyper_config["backbone"]
    kwargs = ", ".join(f"{k}: {v}" for k, v in backbone["kwargs"].items())
    simclr_overrides = common + [f"backbone.kwargs={{{kwargs}}}", "scheduler.name=none"]
    loader = eb.loaders((steps + 2) * b, b)
    t_simclr, t_ebclr = [], []
    for r in range(rounds):
        pair = [("simclr", eb.SIMCLR_CONFIG, simclr_overrides, t_simclr),
                ("ebclr", eb.EBCLR_CONFIG, ebclr_overrides, t_ebclr)]  # fmt: skip
        for _, config, overrides, out in pair[r % 2 :] + pair[: r % 2]:
            out.append(statistics.median(eb.time_fit(eb.build(config, overrides), loader, steps)))

    ebclr = eb.build(eb.EBCLR_CONFIG, ebclr_overrides)
    x, counts, z_ref, g = eb.sampler_inputs(ebclr, b)
    ours, official = [], []
    for _ in range(rounds + 1):  # the first pair is a warm-up
        ebclr.zero_grad(set_to_none=True)
        ours.append(timed(lambda: ebclr.objective.sample_negatives(ebclr, x, counts, z_ref, g)))
        official.append(timed(lambda: eb.sampler_official_way(ebclr, x, counts, z_ref)))

    where = f"{backbone['name']}, batch {b}, T={sgld_steps}, cpu"
    return [
        Row("steps", "ebclr", "simclr", f"step time ({where})",
            summarize(paired_ratios(t_ebclr, t_simclr)), "<= 6.5",
            f"{1000 * summarize(t_ebclr).median:.0f} vs {1000 * summarize(t_simclr).median:.0f} ms"),
        Row("steps", "MSGLD + parameter grads (official)", "MSGLD input grads only (ours)",
            f"sampler time ({b} chains, T={sgld_steps}, cpu)",
            summarize(paired_ratios(official[1:], ours[1:])), None,
            f"{1000 * summarize(official[1:]).median:.0f} vs {1000 * summarize(ours[1:]).median:.0f} ms"),
    ]  # fmt: skip
