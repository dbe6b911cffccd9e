"""The one table writer of the evaluation commands: Markdown for reading, CSV for tools, JSON with
everything (atomically, strict), from rows (dicts) and columns ((key, title) pairs)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from solo_hyper.run.identity import write_json_atomic, write_text_atomic

Columns = list[tuple[str, str]]


def plain(key: str, value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def markdown_table(rows: list[dict], columns: Columns, cell: Callable[[str, Any], str] = plain) -> str:
    head = "| " + " | ".join(title for _, title in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(cell(k, r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def csv_text(rows: list[dict], keys: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(keys)
    for r in rows:
        writer.writerow([r.get(k) for k in keys])
    return buffer.getvalue()


def write_table(
    out: Path, stem: str, rows: list[dict], columns: Columns,
    cell: Callable[[str, Any], str] = plain, notes: str | None = None, extra: dict | None = None,
) -> None:  # fmt: skip
    """<out>/<stem>.md and .csv (the table), and .json (the rows, plus ``extra``) when ``extra``
    is given."""
    write_markdown_csv(out, stem, rows, rows, columns, cell, notes)
    if extra is not None:
        write_json_atomic(out / f"{stem}.json", {"rows": rows, **extra})


def write_markdown_csv(
    out: Path, stem: str, shown: list[dict], rows: list[dict], columns: Columns,
    cell: Callable[[str, Any], str] = plain, notes: str | None = None,
) -> None:  # fmt: skip
    """<out>/<stem>.md from ``shown`` (rows as the reader sees them, marks included) and .csv
    from ``rows`` (the values)."""
    out.mkdir(parents=True, exist_ok=True)
    text = markdown_table(shown, columns, cell) + "\n" + (f"\n{notes}\n" if notes else "")
    write_text_atomic(out / f"{stem}.md", text)
    write_text_atomic(out / f"{stem}.csv", csv_text(rows, [k for k, _ in columns]))
