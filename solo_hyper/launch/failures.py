"""The error of a campaign some of whose jobs failed (light: the command line catches it)."""

from __future__ import annotations


class RunsFailed(Exception):
    """Some jobs of a campaign failed (the others finished); the message names each one's log."""


def failure_text(failed: list[tuple[str, str]]) -> str:
    lines = [f"  {name}: {where}" for name, where in failed]
    return (f"{len(failed)} run(s) failed, the others finished; nothing was tabulated. Each "
            "failed run's log:\n" + "\n".join(lines) + "\nFix the cause and run the same command "
            "again: finished runs are reused.")  # fmt: skip


__all__ = ["RunsFailed", "failure_text"]
