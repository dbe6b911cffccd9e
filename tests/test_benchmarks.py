"""Smoke test of the benchmark suite (benchmarks/): tiny sizes, table structure, never timings."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks import run as bench_run
from benchmarks.augment import augment_rows
from benchmarks.ddp_unused import ddp_rows
from benchmarks.loss import CHUNK, chunked_rows, geoopt_rows, loss_rows
from benchmarks.memory import peak_bytes
from benchmarks.steps import ebclr_rows, rhcl_rows
from benchmarks.throughput import head_rows, throughput_rows
from benchmarks.timing import COLUMNS, Row, Stat, format_table, interleaved, paired_ratios

MIB = 2**20


@pytest.fixture
def one_thread():
    """Timings are not asserted; one thread keeps tiny ops fast on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_suite_functions_give_one_well_formed_table(monkeypatch, one_thread):
    monkeypatch.chdir(bench_run.ROOT)
    rows = (
        loss_rows(sizes=(64,), rounds=(2,))
        + geoopt_rows(size=16, rounds=1)
        + chunked_rows(sizes=(64,), rounds=(1,))
        + head_rows(batch_size=8, rounds=2)
        + throughput_rows(batch_size=8, steps=1, rounds=1, methods=("simclr", "hcl"),
                          overrides=["backbone.kwargs={width: 8}"])
        + augment_rows(sizes=(28,), batch_size=8, batches=2, rounds=1, workers=(0,))
        + rhcl_rows(batch_size=8, steps=1, rounds=1)
        + ebclr_rows(batch_size=8, steps=3, rounds=1, sgld_steps=2)
        + ddp_rows(batch_size=8, steps=1, rounds=1)
    )  # fmt: skip
    kinds = {(r.bench, r.variant, r.metric.split(" (")[0].split(" 2N")[0]) for r in rows}
    assert {
        ("loss", "poincare fused", "time fwd+bwd"),
        ("loss", "poincare fused", "peak memory"),
        ("loss", "poincare plain", "time fwd+bwd"),
        ("loss", "geoopt dist (broadcast)", "time fwd+bwd"),
        ("chunked", f"poincare chunked K={CHUNK}", "time fwd+bwd"),
        ("chunked", f"poincare chunked K={CHUNK}", "peak memory"),
        ("chunked", "poincare chunked", "peak memory"),
        ("throughput", "hcl", "images/s, train step"),
        ("throughput", "hcl kornia augmentation", "time share"),
        ("throughput", "shcl head extra time", "time share"),
        ("augment", "kornia (cpu)", "images/s, 2 crops of 28 px"),
        ("steps", "rhcl", "step time"),
        ("steps", "rocl", "step time"),
        ("steps", "ebclr", "step time"),
        ("ddp", "find_unused_parameters=True", "HCL step time"),
    } <= kinds
    for row in rows:
        r = row.ratio
        # a difference of two timings (the heads' extra time) may come out below zero
        low = -math.inf if "extra time" in row.variant else 0
        assert r.n >= 1 and low < r.min <= r.median <= r.max < math.inf, row
        assert row.verdict in (("ok", "MISS") if row.target else ("",)), row
    lines = format_table(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    assert [c.strip() for c in lines[0].strip("|").split("|")] == list(COLUMNS)
    assert all(line.count("|") == len(COLUMNS) + 1 for line in lines)


def test_a_failing_benchmark_becomes_a_failed_row_and_the_rest_still_runs(monkeypatch):
    def broken(settings):
        raise RuntimeError("no such config")

    ok = Row("loss", "v", "b", "m", Stat(1.0, 1.0, 1.0, 1))
    monkeypatch.setitem(bench_run.BENCHMARKS, "loss", broken)
    monkeypatch.setitem(bench_run.BENCHMARKS, "geoopt", lambda settings: [ok])
    rows, failed = bench_run.run(["loss", "geoopt"], bench_run.Settings(True, "cpu"), log=lambda _: None)  # fmt: skip
    assert failed == ["loss"]
    assert rows[0].variant == "FAILED" and "no such config" in rows[0].note and rows[1] is ok
    assert "| n/a " in format_table(rows)


def test_cuda_is_refused_clearly_where_there_is_none(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        bench_run.parse_args(["--device", "cuda"])
    assert "no CUDA device" in capsys.readouterr().err


def test_peak_bytes_counts_live_cpu_tensors():
    one = peak_bytes(lambda: torch.ones(256, 1024))  # 1 MiB of float32

    def two_alive():
        a, b = torch.ones(256, 1024), torch.ones(256, 1024)
        return a, b

    def one_after_another():
        for _ in range(3):
            torch.ones(256, 1024)

    assert MIB <= one < MIB + 4096
    assert 2 * MIB <= peak_bytes(two_alive) < 2 * MIB + 4096
    assert MIB <= peak_bytes(one_after_another) < MIB + 4096


def test_interleaved_rotates_the_order_and_drops_warmup_rounds():
    calls: list[str] = []
    variants = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    times = interleaved(variants, rounds=2, warmup=1)
    assert calls == [*"abc", *"bca", *"cab"]  # the warm-up round, then rotated
    assert {k: len(v) for k, v in times.items()} == {"a": 2, "b": 2, "c": 2}
    assert paired_ratios([2.0, 6.0], [1.0, 2.0]) == [2.0, 3.0]
    with pytest.raises(ValueError, match="rounds"):
        paired_ratios([1.0], [1.0, 2.0])


def test_cli_bench_runs_the_suite_and_prints_its_table(monkeypatch, capsys, one_thread):
    from solo_hyper.cli.main import main

    row = Row(
        "loss", "poincare fused", "solo simclr_loss_func", "m", Stat(0.9, 0.8, 1.1, 3), "<= 1.5"
    )
    monkeypatch.setitem(bench_run.BENCHMARKS, "geoopt", lambda settings: [row])
    assert main(["bench", "--quick", "--only", "geoopt", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "quick run: geoopt" in out and "| 0.9x " in out and "| ok " in out
    with pytest.raises(SystemExit):
        main(["bench", "--only", "no-such-benchmark"])


def test_chunk_auto_benchmark_marks_the_fastest_path_and_auto(one_thread):
    from benchmarks.chunk_auto import chunk_rows

    rows = chunk_rows(sizes=(64, 2048), blocks=(16, 1024), rounds=1)
    assert {r.variant for r in rows} >= {"chunked K=16", "chunked K=1024"}
    for size in (64, 2048):
        notes = [r.note for r in rows if f"2N={size} " in r.metric]
        assert sum("fastest" in n for n in notes) == 1 and sum("auto" in n for n in notes) == 1
    assert any("auto" in r.note for r in rows if r.variant == "fused" and "2N=64 " in r.metric)


def test_probe_benchmark_writes_its_table(tmp_path, one_thread):
    from benchmarks.probe import evaluation_rows, main

    out = tmp_path / "probe.md"
    main(["--subset", "300", "--out", str(out)])
    text = out.read_text()
    for variant in ("logistic_probe solve", "whole probe (path + refit)", "features.embed"):
        assert f"| {variant} " in text
    assert "top-1" in text and "300 x 128" in text and "50 images" in text
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "result.json").write_text('{"wall_time_s": 20.0}')
    (run / "eval.json").write_text('{"eval_wall_time_s": 10.0}')
    (row,) = evaluation_rows(tmp_path / "runs")
    assert row.ratio.median == 0.5 and row.verdict == "ok"
def test_autoattack_benchmark_gives_per_image_ratios_to_pgd20(one_thread):
    from benchmarks.autoattack import autoattack_rows
    from solo_hyper.evaluation.autoattack import AutoAttackSpec
    from solo_hyper.evaluation.diagnostics import DiagnosticsSpec

    rows = autoattack_rows(
        images=4, rounds=1, train_steps=2, autoattack=AutoAttackSpec(8 / 255, "custom", ("apgd-ce",)),
        diagnostics=DiagnosticsSpec(images=4, steps=1, long_steps=1, restarts=1, sweep=(0.3,),
                                    square_queries=5),
    )  # fmt: skip
    assert [(r.bench, r.variant, r.baseline, r.metric) for r in rows] == [
        ("autoattack", "AA-apgd-ce 8/255 (custom)", "PGD-20 8/255", "time per image"),
        ("autoattack", "gradient-masking diagnostics", "PGD-20 8/255", "time per image"),
    ]
    assert all(r.ratio.n == 1 and r.ratio.median > 0 for r in rows)
    assert "ms/image" in rows[0].note and "4 images" in rows[0].note
    assert "| autoattack " in format_table(rows)


def test_attacked_model_benchmark_gives_fast_over_plain_per_image(one_thread):
    from benchmarks.attacked_model import attacked_rows
    from solo_hyper.evaluation.autoattack import AutoAttackSpec

    rows = attacked_rows(images=4, rounds=1, train_steps=2, width=8,
                         autoattack=AutoAttackSpec(8 / 255, "custom", ("apgd-ce",)))  # fmt: skip
    assert [(r.variant, r.baseline) for r in rows] == [
        ("PGD-20 8/255, fast attacked model", "PGD-20 8/255, plain model"),
        ("AA-apgd-ce 8/255 (custom), fast attacked model", "AA-apgd-ce 8/255 (custom), plain model"),
    ]
    assert all(r.ratio.n == 1 and r.ratio.median > 0 for r in rows)
    assert "s/image vs" in rows[0].note and "4 images" in rows[0].note
