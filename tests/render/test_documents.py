"""The one report model and the renderer protocol: Markdown escapes plain text and puts names in
code spans (checked by rendering it with markdown-it-py, as GitHub would), HTML is made from the
same blocks, and the CLI's formats, extensions and help come from the renderers' registry."""

from __future__ import annotations

import base64
import io
import re

import polars as pl
from click.testing import CliRunner
from markdown_it import MarkdownIt
from PIL import Image as PILImage

from traceanalyzer.cli import cli
from traceanalyzer.cli.options import FORMATS, TABLE_EXTENSIONS, resolve_format
from traceanalyzer.render import RENDERERS, html_format, markdown
from traceanalyzer.report import Code, FindingRow, Findings, Image, Report, Section, Strong, Text

NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
FRAME = "resnet50_profiler_api.py(42): <module>"
MD = MarkdownIt("commonmark", {"html": True}).enable("table")  # html on: what GitHub would drop shows up


def _png() -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", (4, 3), "red").save(buf, format="PNG")
    return buf.getvalue()


def _report() -> Report:
    table = pl.DataFrame({"op": [NEXT, "a|b"], "python_frame": [FRAME, None], "idle_us": [354290.0, 1.0]})
    return Report(
        "report",
        "t.json",
        {},
        (
            Section("Verdict", blocks=(Text((Strong("Trace health error"), f": most from {NEXT} at {FRAME}")),)),
            Section("Gaps", text=f"from `{NEXT}`", table=table),
            Section("Findings", blocks=(Findings((FindingRow("high", "data_loading", f"in {FRAME}", "use `x`"),)),)),
            Section("Pictures", blocks=(Image("t.png", _png(), "a <b> picture"), Text(items=((Code("<x>"),),)))),
        ),
        {},
    )


def _visible(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


def test_markdown_shows_names_verbatim_when_rendered():
    md = markdown.render(_report())
    page = MD.render(md)
    text = _visible(page)
    assert text.count(NEXT) == 3  # the verdict, the text's code span, the table cell
    assert "&lt;module&gt;" in page and "<module>" not in page  # escaped, so GitHub keeps it
    assert text.count("&lt;module&gt;") == 3  # verdict, table, finding
    assert "<em>" not in page  # __next__ is no emphasis
    assert "<strong>Trace health error</strong>" in page
    assert "<code>a|b</code>" in page  # a pipe inside a name does not split the table's cell
    assert f"<code>{NEXT}</code>" in page and "<code>&lt;x&gt;</code>" in page


def test_html_from_the_same_blocks_with_contents_style_and_inline_pictures():
    page = html_format.render(_report())
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page
    assert '<nav class="toc">' in page and '<a href="#verdict">Verdict</a>' in page
    assert '<h2 id="gaps">Gaps</h2>' in page
    (data,) = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert base64.b64decode(data) == _png()
    assert 'alt="a &lt;b&gt; picture"' in page
    assert NEXT in _visible(page) and "&lt;module&gt;" in page and "<module>" not in page
    assert '<strong class="sev-high">[high] data_loading</strong>' in page
    assert '<div class="tw"><table>' in page


def test_markdown_write_puts_pictures_beside(tmp_path):
    written = markdown.write(_report(), str(tmp_path / "r.md"))
    assert sorted(p.rsplit("/", 1)[1] for p in written) == ["r.md", "t.png"]
    assert (tmp_path / "t.png").read_bytes() == _png()
    assert "![a \\<b\\> picture](t.png)" in (tmp_path / "r.md").read_text()


def test_text_renderer_shows_every_block():
    rep = _report()
    out = RENDERERS["table"].render(rep)
    assert "[high] data_loading: in resnet50_profiler_api.py(42): <module>" in out
    assert "(picture: a <b> picture, t.png)" in out and "- <x>" in out


def test_formats_extensions_and_help_come_from_the_registry():
    assert FORMATS == tuple(RENDERERS)
    for r in RENDERERS.values():
        assert TABLE_EXTENSIONS[r.extension] == r.name and isinstance(r.binary, bool) and r.help
        assert resolve_format(None, f"out{r.extension.upper()}") == r.name
    helptext = CliRunner().invoke(cli, ["gaps", "--help"], terminal_width=200).output
    for r in RENDERERS.values():
        assert r.extension in helptext and r.name in helptext


def test_each_registry_line_is_its_module_s_renderer():
    """The registry knows a format without importing it; what it says is the module's own RENDERER."""
    for r in RENDERERS.values():
        own = r.renderer
        assert (own.name, own.extension, own.binary, own.help) == (r.name, r.extension, r.binary, r.help)


def test_any_command_writes_html(tmp_path):
    from tests.synthetic import TraceBuilder

    b = TraceBuilder()
    b.step(1, 0, 10000)
    b.kernel("a", 100, 1900, launch_ts=50)
    b.annotation(NEXT, 2100, 3700)
    b.kernel("b", 6000, 3000, launch_ts=5890)
    src = b.write(tmp_path)
    out = tmp_path / "g.html"
    r = CliRunner().invoke(cli, ["gaps", str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "<table>" in page and NEXT in _visible(page)


def test_real_report_html_keeps_dataloader_name_and_md_escapes_module(real_report_dir):
    page = (real_report_dir / "report.html").read_text()
    assert NEXT in _visible(page)  # issue #21: verbatim, not italics
    md = (real_report_dir / "report.md").read_text()
    rendered = MD.render(md)
    assert "<module>" not in rendered and rendered.count("&lt;module&gt;") >= 10
