"""A config's keys are checked before solo-learn and Lightning load: a misspelt key is one error
line in a command's first seconds, and the early check is never stricter than the full one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from solo_hyper.config.trainer_keys import trainer_arg_names

ROOT = Path(__file__).resolve().parents[2]
HCL = "configs/pretrain/fashionmnist/hcl.yaml"
# runs a command in this fresh interpreter, then names the frameworks loaded by then
PROBE = (
    "import sys\n"
    "from solo_hyper.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "print('loaded:', sorted({m.split('.')[0] for m in sys.modules} & "
    "{'solo', 'pytorch_lightning', 'lightning', 'pl_bolts'}))\n"
    "sys.exit(code)\n"
)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["pretrain", "--config", HCL, "optimizer.lrr=0.1"], "unknown config key 'optimizer.lrr' (did you mean 'lr'?)"),
        (["pretrain", "--config", HCL, "max_epoch=1"], "unknown config key 'max_epoch' (did you mean 'max_epochs'?)"),
        (["compare", "--configs", "configs/pretrain/fashionmnist/simclr.yaml", HCL, "--set", "data.trian_subset=10"],
         "unknown config key 'data.trian_subset' (did you mean 'train_subset'?)"),
        (["sweep", "curvature", "--configs", HCL, "--set", "optimiser.lr=1"], "unknown config key 'optimiser'"),
    ],
)  # fmt: skip
def test_a_misspelt_key_is_reported_before_solo_learn_is_imported(argv, message):
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr
    assert "loaded: []" in proc.stdout


def test_the_early_check_knows_every_argument_of_the_installed_trainer():
    from solo_hyper.solo import adapter

    names = trainer_arg_names()
    assert names is not None and "max_epochs" in names and "limit_train_batches" in names
    assert adapter.trainer_arg_names() <= names
