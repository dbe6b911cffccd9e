"""The error of a campaign some of whose jobs failed (light: the command line catches it)."""

from __future__ import annotations

CANCELLED = "cancelled (scancel), not failed"  # how a job its user cancelled is listed


class RunsFailed(Exception):
    """Some jobs of a campaign failed (the others finished); the message names each one's log."""


def failure_text(failed: list[tuple[str, str]]) -> str:
    """``failed``: (run, its log) of each run that did not finish; a cancelled job's log is
    given as ``f"{CANCELLED}; {log}"``."""
    lines = [f"  {name}: {where}" for name, where in failed]
    cancelled = sum(where.startswith(CANCELLED) for _, where in failed)
    counts = f"{len(failed) - cancelled} run(s) failed" + (f" and {cancelled} cancelled"
                                                             if cancelled else "")  # fmt: skip
    return (f"{counts}, the others finished; nothing was tabulated. Each one's log:\n"
            + "\n".join(lines) + "\nFix the cause and run the same command again: finished runs "
            "are reused, stopped ones resume.")  # fmt: skip


__all__ = ["CANCELLED", "RunsFailed", "failure_text"]
