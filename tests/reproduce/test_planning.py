"""Planning a campaign: ``reproduce TABLE --scale gpu --executor slurm --dry-run`` prints the jobs
it would submit, their resources and an estimate of GPU-hours labelled as one, on a machine
without the table's data (nothing is read, downloaded or submitted); a robust table's jobs wait
for the runs they need."""

from __future__ import annotations

import pytest

import solo_hyper.data as data
import solo_hyper.launch.cluster as cluster
import solo_hyper.reproduce.gpu_hours as estimate
from solo_hyper.cli.main import main
from solo_hyper.run.train import prepare


def test_a_gpu_table_is_planned_for_slurm_without_its_data(tmp_path, monkeypatch, capsys):
    def no_data(*args, **kwargs):
        raise AssertionError("a dry run must not look for data")

    monkeypatch.setattr(data, "ensure_dataset", no_data)
    monkeypatch.setattr("solo_hyper.run.train.ensure_dataset", no_data)
    monkeypatch.setattr(cluster, "submit", no_data)
    monkeypatch.setattr(estimate, "count_step", lambda prep: estimate.StepCount(8e9, True))
    code = main(["reproduce", "hcl-table4", "--scale", "gpu", "--executor", "slurm", "--dry-run",
                 "--out", str(tmp_path), "--cluster-set", "partition=gpu", "time_min=600"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "--executor slurm: 30 job(s) to submit as one job array" in out
    assert "1 GPU(s), 8 CPU(s), 32 GB, 600 min time limit on partition gpu" in out
    assert "nothing was submitted" in out
    # 30 runs x 200 epochs x 97 steps x 512 images x 8 GFLOP / (312 TFLOP/s x utilisation)
    hours = 30 * 200 * 97 * 512 * 8e9 / (312e12 * estimate.UTILISATION) / 3600
    assert f"GPU-hours (an ESTIMATE, not a measurement): {hours:.1f} " in out
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_step_is_counted_from_the_recipe_and_scaled_to_its_steps():
    prep = prepare("configs/pretrain/cifar10/hcl.yaml")
    assert estimate.steps(prep.cfg, {"cifar10": 50000}) == 200 * (50000 // 512)
    assert estimate.steps(prep.cfg, {}) is None  # a data set of unknown size is not guessed
    count = estimate.count_step(prepare("configs/pretrain/cifar10/hcl.yaml",
                                        ["backbone.name=resnet18", "optimizer.batch_size=8"]))
    # ResNet-18 on 32 x 32 crops (CIFAR stem): 0.56 GMAC forward per image, a backward about
    # twice that: two crops' forward and backward are 6.7 GFLOP, the heads and loss a little more
    assert count.whole_step and 6.5e9 < count.flops_per_image < 9.5e9


def test_a_step_that_needs_its_trainer_is_counted_on_the_installed_versions_backbone(monkeypatch):
    """The fallback (a training step that cannot run outside a Trainer) counts the backbone alone,
    found where the installed solo-learn keeps it (1.0.2: ``encoder``; main: ``backbone``)."""
    from solo_hyper.solo import adapter

    def no_step(self, *args, **kwargs):
        raise RuntimeError("needs its Trainer")

    prep = prepare("configs/pretrain/cifar10/simclr.yaml", ["backbone.name=resnet18", "optimizer.batch_size=8"])
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops, prep.args, prep.crops)
    monkeypatch.setattr(type(model), "training_step", no_step)
    count = estimate.count_step(prep)
    # the ResNet-18 of the whole step above (6.7 GFLOP for two crops' forward and backward), without heads
    assert not count.whole_step and 5.5e9 < count.flops_per_image < 8.5e9
    grey = prepare("configs/pretrain/fashionmnist/simclr.yaml")  # 1-channel images, a 3-channel backbone
    monkeypatch.setattr(type(adapter.build_method(grey.cfg, 10, grey.small_images, grey.num_crops, grey.args,
                                                  grey.crops)), "training_step", no_step)  # fmt: skip
    count = estimate.count_step(grey)
    assert not count.whole_step and count.flops_per_image > 0


@pytest.mark.parametrize("precision, bits", [("16-mixed", "16"), ("bf16-mixed", "16"), (32, "32")])
def test_the_rate_follows_the_runs_precision(precision, bits):
    assert estimate.precision_bits({"precision": precision}) == bits


def test_a_robust_tables_jobs_wait_for_their_twin_and_their_base_run(tmp_path):
    """HCL Table 3 as jobs: HCL after SimCLR and RHCL after RoCL (their diagnostics attack from
    the twin of the other geometry), RHCL+AT, which fine-tunes RHCL's run, after RHCL; SimCLR's
    and RoCL's transfer checks (crafted on HCL and RHCL) are jobs of their own after their twin's,
    so that no two jobs wait for each other. Each job trains, evaluates and robust-evaluates, and
    a run is trained by one job only; a cluster submits them in that order, wave by wave.
    Planned without data."""
    from solo_hyper.launch.jobs import waves
    from solo_hyper.reproduce import cells, jobs

    planned = cells.plan("hcl-table3", "cpu", seeds=[0], out=str(tmp_path), machine=False)
    todo = jobs.cell_jobs(planned)
    by_name = {j.name: j for j in todo}
    run = {key: f"fashionmnist-{key}-t3-s0" for key in ("simclr", "hcl", "rocl", "rhcl")}
    assert by_name[run["hcl"]].after == (run["simclr"],)
    assert by_name[run["rhcl"]].after == (run["rocl"],)
    assert set(by_name[f"{run['rhcl']}-finetune"].after) == {run["rhcl"], run["rocl"]}
    assert by_name[run["rocl"]].after == () and by_name[run["simclr"]].after == ()
    for first, second in (("simclr", "hcl"), ("rocl", "rhcl")):
        transfer = by_name[f"{run[first]}-transfer"]
        assert set(transfer.after) == {run[first], run[second]}
        assert transfer.run_dir == by_name[run[first]].run_dir and len(transfer.steps) == 1
        # the first job evaluates without its twin, the transfer job with it; the second with the first
        assert transfer.steps[0].keywords["twin"] == str(by_name[run[second]].run_dir)
        assert by_name[run[first]].steps[1].keywords["twin"] is None
        assert by_name[run[second]].steps[1].keywords["twin"] == str(by_name[run[first]].run_dir)
    main = [j for j in todo if not j.name.endswith("-transfer")]
    assert all(len(j.steps) == 2 for j in main)  # evaluation, robust evaluation
    # seven rows, six runs: the fine-tuning's job reuses RHCL's run
    assert len(main) == 7 and len({j.run_dir for j in main}) == 6 and len(todo) == 9
    assert by_name[f"{run['rhcl']}-finetune"].run_dir == by_name[run["rhcl"]].run_dir
    names = jobs.job_names(planned)
    row = {names[id(c)]: c.row.key for c in planned}
    row.update({f"{name}-transfer": f"{key} transfer" for name, key in row.items()})
    assert [sorted(row[j.name] for j in wave) for wave in waves(todo)] == [
        ["hcl-rhcl-recipe", "rocl", "simclr", "simclr-rocl-recipe"], ["hcl", "rhcl"],
        ["rhcl-at", "rocl transfer", "simclr transfer"]]
