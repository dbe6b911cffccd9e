"""Registration into solo-learn's METHODS registry."""

from __future__ import annotations

import subprocess
import sys

import pytest

import solo_hyper
import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.solo import adapter


def test_import_registers_the_methods():
    from solo.methods import METHODS

    from solo_hyper import objectives
    from solo_hyper.solo.common import plugin_methods

    for name in ("hcl", "shcl", "rhcl", "rocl", "ebclr", "supervised"):
        assert issubclass(METHODS[name], adapter.ObjectiveMethod), name
        assert METHODS[name].METHOD == name and METHODS[name] is solo_hyper.methods.CLASSES[name]
        assert METHODS[name].OBJECTIVE is objectives.OBJECTIVES[name]
    assert plugin_methods() == solo_hyper.methods.CLASSES
    assert "simclr" in METHODS and "supcon" in METHODS


def test_registration_is_idempotent():
    from solo.methods import METHODS

    before = dict(METHODS)
    solo_hyper.register_methods()
    solo_hyper.register_methods()
    assert METHODS == before


def test_a_name_taken_by_another_class_raises():
    class Other:
        pass

    with pytest.raises(ValueError, match="already"):
        adapter.register("hcl", Other)


def test_import_without_solo_learn_says_how_to_install():
    code = "import sys; sys.modules['solo'] = None; import solo_hyper.methods"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "pip install --no-deps solo-learn==1.0.2" in proc.stderr
