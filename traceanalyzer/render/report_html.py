"""The incident report as one self-contained HTML page: the images inline as base64 data URIs,
the little Markdown its texts use turned into HTML, wide tables in their own scrolling box."""

from __future__ import annotations

import base64
import html
import re

import polars as pl

from traceanalyzer.redact import scrub_text
from traceanalyzer.render.report_md import Block, IncidentReport
from traceanalyzer.render.values import cell
from traceanalyzer.version import __version__


def _inline_md(text: str) -> str:
    """The little Markdown our texts use (**bold**, `code`, _italic_), as HTML."""

    t = html.escape(text)
    t = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", t)
    t = re.sub(r"`(.+?)`", r"<code>\1</code>", t)
    return re.sub(r"(?<!\w)_(.+?)_(?!\w)", r"<em>\1</em>", t)


def _html_table(df: pl.DataFrame) -> str:
    if df.height == 0:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    rows = []
    for r in df.iter_rows():
        tds = "".join(
            f'<td class="{"num" if df.schema[c].is_numeric() else ""}">{html.escape(cell(v, c))}</td>'
            for c, v in zip(df.columns, r)
        )
        rows.append(f"<tr>{tds}</tr>")
    # A wide table scrolls inside its own box, not the whole page.
    return f'<div class="tw"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


STYLE = """body{font-family:system-ui,sans-serif;max-width:1700px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}th,td{border:1px solid #ddd;padding:3px 6px;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f4f4}img{max-width:100%;border:1px solid #eee}
code{background:#f4f4f4;padding:0 3px}.tw{overflow-x:auto;max-width:100%}figure{margin:1em 0}"""


def to_html(rep: IncidentReport) -> str:
    """One self-contained page: the images inline as base64 data URIs."""
    out = [
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(rep.title)}</title><style>{STYLE}</style></head><body>',
        f"<h1>{html.escape(rep.title)}</h1><p><em>traceanalyzer {__version__}</em></p>",
    ]
    for b in rep.blocks:
        if b.kind != "image":
            b = Block(b.kind, scrub_text(b.text), b.table, tuple(scrub_text(i) for i in b.items), b.image)
        if b.kind == "heading":
            out.append(f"<h2>{html.escape(b.text)}</h2>")
        elif b.kind == "text":
            body = b.text
            if body.startswith("- "):
                out.append("<ul>" + "".join(f"<li>{_inline_md(x[2:])}</li>" for x in body.split("\n")) + "</ul>")
            else:
                out.append(f"<p>{_inline_md(body)}</p>")
        elif b.kind == "table" and b.table is not None:
            out.append(scrub_text(_html_table(b.table)))
        elif b.kind == "items":
            out.append("<ul>" + "".join(f"<li>{_inline_md(i)}</li>" for i in b.items) + "</ul>")
        elif b.kind == "image":
            data = base64.b64encode(rep.images[b.image]).decode()
            out.append(
                f'<figure><img alt="{html.escape(b.text)}" src="data:image/png;base64,{data}"><figcaption>{html.escape(b.text)}</figcaption></figure>'
            )
    out.append("</body></html>")
    return "\n".join(out)
