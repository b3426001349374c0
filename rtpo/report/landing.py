"""The `snakemake --report` landing page: workflow/report/workflow.rst with the run's status on top.

Snakemake renders the `report:` file (Jinja over reStructuredText, given only the config), so the
status headline is put into a copy of it when the workflow is parsed: if the results tree has
results/tables/status.md (written by the `status` rule, `rtpo report status`), its paragraphs and
tables are converted to reStructuredText under a "Status" heading and the copy is written to
.snakemake/rtpo-report/workflow.rst; the Snakefile's `report:` names that copy. Before a run has a
status, the plain workflow/report/workflow.rst is the page.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

OUT = Path(".snakemake") / "rtpo-report" / "workflow.rst"


def landing_page(workflow_dir: str | Path, tables: str | Path = "results/tables", out: str | Path = OUT) -> str:
    """The path the Snakefile's `report:` should name (module docstring)."""
    template = Path(workflow_dir) / "report" / "workflow.rst"
    status = Path(tables) / "status.md"
    if not status.is_file():
        return "report/workflow.rst"
    text = template.read_text()
    head = status_rst(status.read_text())
    title, rest = _split_title(text)
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(title + "Status (results/tables/status.md)\n" + "=" * 33 + "\n\n" + head + "\n" + rest)
    os.replace(tmp, out)
    return str(out)


def _split_title(text: str) -> tuple[str, str]:
    """(the leading paragraph of the template, the rest): the status goes right after the first paragraph."""
    first, sep, rest = text.partition("\n\n")
    return (first + sep, rest) if sep else (text + "\n\n", "")


def status_rst(md: str) -> str:
    """status.md (Markdown: paragraphs and pipe tables) as reStructuredText."""
    out: list[str] = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i])
                i += 1
            out += _table(block) + [""]
            continue
        i += 1
        if not line.strip() or line.startswith("<!--") or line.startswith("#"):
            continue
        out += [_inline(line), ""]
    return "\n".join(out)


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _table(rows: list[str]) -> list[str]:
    body = [r for r in rows if not re.fullmatch(r"\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?", r.strip())]
    out = [".. list-table::", "   :header-rows: 1", ""]
    for r in body:
        cells = _cells(r)
        out.append("   * - " + (_inline(cells[0]) or r"\ "))
        out += ["     - " + (_inline(c) or r"\ ") for c in cells[1:]]
    return out


def _inline(s: str) -> str:
    """Markdown inline text as reStructuredText: `code` -> ``code``; characters rst reads as markup
    outside code (|, *, a word's trailing _) escaped."""
    parts = re.split(r"(`[^`]*`)", s)
    out = []
    for p in parts:
        if p.startswith("`") and p.endswith("`") and len(p) >= 2:
            out.append(f"``{p[1:-1]}``" if p[1:-1] else "")
        else:
            p = p.replace("\\", "\\\\").replace("|", r"\|").replace("*", r"\*")
            out.append(re.sub(r"(\w)_(?=\W|$)", r"\1\\_", p))
    return "".join(out)
