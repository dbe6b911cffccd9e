"""Every word the tool prints is true (issue 33): help for users, the console script's own
name, defaults the help states against the code, robust-eval's default config, and the folders
the documented commands create are ignored by git."""

from __future__ import annotations

import inspect
import subprocess
from pathlib import Path

import pytest
import yaml

from solo_hyper.cli import main as cli
from solo_hyper.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def subparser(parser, name: str):
    return next(a for a in parser._actions if a.dest == "command").choices[name]


def option(parser, name: str, flag: str):
    return next(a for a in subparser(parser, name)._actions if flag in a.option_strings)


def test_top_level_help_is_for_users(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    assert "pretrain --config configs/pretrain/fashionmnist/hcl.yaml" in text
    assert "before anything heavy is imported" not in text  # the module's docstring is not help


@pytest.mark.parametrize("argv0, prog", [("/venv/bin/solo-hyper", "solo-hyper"),
                                         ("/repo/solo_hyper/__main__.py", "python -m solo_hyper")])  # fmt: skip
def test_the_command_names_itself_as_it_was_started(monkeypatch, argv0, prog):
    monkeypatch.setattr("sys.argv", [argv0])
    assert cli.build_parser().prog == prog


def test_help_states_the_defaults_the_code_uses():
    from solo_hyper.evaluation.knn_probe import knn_eval

    parser = cli.build_parser()
    assert "full training split" in option(parser, "knn", "--train-subset").help
    assert "full test split" in option(parser, "knn", "--val-subset").help
    defaults = inspect.signature(knn_eval).parameters
    assert defaults["train_subset"].default is None and defaults["val_subset"].default is None
    k = option(parser, "knn", "--k")
    assert " ".join(map(str, k.default)) in k.help
    assert option(parser, "compare", "--epochs").help and option(parser, "sweep", "--epochs").help
    from solo_hyper.evaluation.linear import LINEAR_DEFAULTS

    commands = next(a for a in parser._actions if a.dest == "command")._choices_actions
    linear_help = next(a.help for a in commands if a.dest == "linear")
    assert LINEAR_DEFAULTS["protocol"] == "logistic" and "default: logistic regression" in linear_help


def fake_run(root: Path, dataset: str) -> Path:
    run = root / f"{dataset}-run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"data": {"dataset": dataset}}))
    (run / "last.ckpt").write_bytes(b"")
    return run


def test_robust_eval_without_config_takes_the_datasets_shipped_one_or_refuses(tmp_path):
    from solo_hyper.config.shipped import configs_root

    assert cli.default_robust_config(str(fake_run(tmp_path, "fashionmnist"))) == str(
        configs_root() / "robust" / "fashionmnist.yaml"
    )
    with pytest.raises(ConfigError, match=r"no robust-evaluation config ships for 'mnist'.*--config"):
        cli.default_robust_config(str(fake_run(tmp_path, "mnist")))


@pytest.mark.parametrize("folder", ["lightning_logs", "trained_models", "smoke", "exported", "runs",
                                    "results"])  # fmt: skip
def test_folders_the_documented_commands_create_are_ignored(folder):
    proc = subprocess.run(["git", "check-ignore", "-q", f"{folder}/x"], cwd=ROOT)
    assert proc.returncode == 0, f"{folder}/ is not in .gitignore"


def test_help_names_the_default_seed_and_the_smoke_budget():
    from solo_hyper.config import DEFAULTS
    from solo_hyper.evaluation.protocol import EVAL_BUDGETS

    parser = cli.build_parser()
    seed = f"{DEFAULTS['seed']} unless it sets one"
    assert seed in option(parser, "compare", "--seeds").help
    assert seed in option(parser, "sweep", "--configs").help
    overrides = next(a for a in subparser(parser, "pretrain")._actions if a.dest == "overrides")
    assert f"default seed: the config's, {DEFAULTS['seed']}" in overrides.help
    smoke = EVAL_BUDGETS["smoke"]
    for command in ("compare", "sweep"):
        text = option(parser, command, "--eval-budget").help
        assert f"{smoke['train_subset']:,} training and {smoke['val_subset']:,} test images" in text
        assert "full (default" in text


def test_one_flag_name_means_one_thing_across_commands():
    """--config is one YAML file wherever it appears, --configs one or more."""
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    seen = {}
    for command in sub.choices.values():
        for action in command._actions:
            for flag in action.option_strings:
                seen.setdefault(flag, set()).add(action.nargs)
    assert seen["--config"] == {None} and seen["--configs"] == {"+"}
