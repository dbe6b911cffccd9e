"""A real one-node SLURM for the tests marked ``slurm``: ``scripts/slurm-local.sh`` starts it once
per session in a folder of its own (Debian's slurm-wlm and munge, installed where missing) and
stops it at the end. Where it cannot start (not root, no Debian packages) the tests skip with
the script's reason; with ``SOLO_HYPER_REQUIRE_SLURM=1`` (CI) they fail instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slurm-local.sh"


@dataclass(frozen=True)
class LocalSlurm:
    """The running cluster: its folder (slurm.conf, the daemons' logs) and partition."""

    folder: Path
    partition: str = "local"

    def run(self, *command: str) -> str:
        """A SLURM command's output (it must succeed)."""
        return subprocess.run(command, capture_output=True, text=True, check=True,
                              timeout=60).stdout  # fmt: skip

    def jobs(self) -> dict[str, str]:
        """{job id: state} of every job the cluster still lists (ended ones included)."""
        out = self.run("squeue", "--noheader", "--array", "--states=all", "--format=%i|%T")
        return dict(line.split("|", 1) for line in out.split())

    def wait_for(self, condition, what: str, timeout_s: float = 300, poll_s: float = 0.05):
        """Polls ``condition()`` until it returns something true; fails naming ``what``."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(poll_s)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


@pytest.fixture(scope="session")
def slurm() -> LocalSlurm:
    folder = Path(tempfile.mkdtemp(prefix="slurm-local-"))
    done = subprocess.run([str(SCRIPT), "start", str(folder)], capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        shutil.rmtree(folder, ignore_errors=True)
        if os.environ.get("SOLO_HYPER_REQUIRE_SLURM"):
            pytest.fail(f"the local SLURM did not start: {reason}")
        pytest.skip(f"no local SLURM (scripts/slurm-local.sh start: {reason})")
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(folder / "slurm.conf")
    try:
        yield LocalSlurm(folder)
    finally:
        subprocess.run(["scancel", "--full", "--signal=KILL", "--state=RUNNING"], timeout=60,
                       capture_output=True)  # fmt: skip
        subprocess.run(["scancel", "--state=PENDING"], timeout=60, capture_output=True)
        subprocess.run([str(SCRIPT), "stop", str(folder)], capture_output=True, timeout=120)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        shutil.rmtree(folder, ignore_errors=True)
