"""HTML: one self-contained page made from the report's Markdown by markdown-it-py (CommonMark
with GFM tables, raw HTML off), so the page says exactly what report.md says, escaped the same
way: a small stylesheet, a table of contents, the pictures inline as base64 data URIs, wide
tables in their own scrolling box, severities coloured."""

from __future__ import annotations

import base64
import functools
import html
import re
from typing import TYPE_CHECKING

from traceanalyzer.render import markdown
from traceanalyzer.render.base import Format
from traceanalyzer.report import Report
from traceanalyzer.version import __version__

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

STYLE = """body{font-family:system-ui,-apple-system,sans-serif;max-width:1400px;margin:2em auto;padding:0 1.5em;
color:#1d1d1f;line-height:1.45}h1{font-size:1.6em;border-bottom:2px solid #e5e5e5;padding-bottom:.3em}
h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #eee;padding-bottom:.2em}
nav.toc{background:#f7f7f9;border:1px solid #e5e5e5;padding:.5em 1em;display:inline-block;font-size:14px}
nav.toc ol{margin:.3em 0;padding-left:1.4em}nav.toc a{color:#0b57d0;text-decoration:none}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}th,td{border:1px solid #ddd;padding:3px 7px}
th{background:#f4f4f6;text-align:left}td{font-variant-numeric:tabular-nums;vertical-align:top}
tr:nth-child(even) td{background:#fbfbfc}code{background:#f2f2f4;padding:0 3px;border-radius:3px;
font-size:.92em;overflow-wrap:anywhere}td code{background:none;padding:0;overflow-wrap:normal;word-break:normal}.tw{overflow-x:auto;max-width:100%}
img{max-width:100%;border:1px solid #eee}p.version{color:#777;font-size:13px}
strong.sev-high{color:#b3261e}strong.sev-medium{color:#b26a00}strong.sev-low{color:#5f6368}
strong.sev-error{color:#b3261e}strong.sev-warning{color:#b26a00}strong.sev-info{color:#5f6368}"""


@functools.cache
def _markdown_it() -> MarkdownIt:
    """The CommonMark parser with tables, made when a page is first rendered (not at start-up)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _slug(text: str, seen: dict[str, int]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"
    n = seen[base] = seen.get(base, 0) + 1
    return base if n == 1 else f"{base}-{n}"


def body(report: Report) -> tuple[str, list[tuple[str, str]]]:
    """The page's body from the report's Markdown, and its table of contents (id, title)."""
    md = _markdown_it()
    tokens = md.parse(markdown.render(report))
    images = {img.name: img.data for img in report.images()}
    toc: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for k, t in enumerate(tokens):
        if t.type == "heading_open":
            title = tokens[k + 1].content
            plain = "".join(c.content for c in tokens[k + 1].children or [] if c.type in ("text", "code_inline"))
            ident = _slug(plain or title, seen)
            t.attrSet("id", ident)
            if t.tag == "h2":
                toc.append((ident, plain or title))
        if t.type == "inline":
            for c in t.children or []:
                if c.type == "image" and str(c.attrGet("src")) in images:
                    data = base64.b64encode(images[str(c.attrGet("src"))]).decode()
                    c.attrSet("src", f"data:image/png;base64,{data}")
    out = md.renderer.render(tokens, md.options, {})
    # Raw HTML is off, so these tags can only be the renderer's own.
    out = out.replace("<table>", '<div class="tw"><table>').replace("</table>", "</table></div>")
    out = re.sub(r"<strong>\[(high|medium|low|error|warning|info)\]", r'<strong class="sev-\1">[\1]', out)
    return out, toc


def render(report: Report) -> str:
    """The report as one self-contained HTML page."""
    content, toc = body(report)
    title, _, rest = content.partition("</h1>")
    nav = "".join(f'<li><a href="#{i}">{html.escape(t)}</a></li>' for i, t in toc)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{html.escape(report.heading)}</title><style>{STYLE}</style></head><body>\n"
        f'{title}</h1>\n<p class="version">traceanalyzer {__version__}</p>\n'
        + (f'<nav class="toc"><strong>Contents</strong><ol>{nav}</ol></nav>\n' if len(toc) > 1 else "")
        + rest
        + "</body></html>\n"
    )


RENDERER = Format("html", ".html", False, "one self-contained HTML page", render)
