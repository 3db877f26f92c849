"""Timings against every baseline and the roofline, checks, ptxas resources, the NCU verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from harness.stats import speedup

from ..state import CANDIDATE_LABEL, Candidate, Track, fmt_ms, fmt_speedup
from .colors import speedup_style

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..options import WidgetOptions

FILTERED_METRICS = 6


def _section(title: str) -> Text:
    return Text(title, style="bold underline")


def timing_table(c: Candidate, baseline: str | None) -> RenderableType:
    timed = c.timed or {}
    tm: dict = timed.get("times_ms") or {}
    if not tm:
        return Text("not timed yet", style="grey50")
    cand = tm.get(CANDIDATE_LABEL)
    table = Table(box=None, padding=(0, 1), show_header=True, header_style="grey70")
    table.add_column("kernel")
    table.add_column("time", justify="right")
    table.add_column("candidate ×", justify="right")
    rows = sorted(tm.items(), key=lambda kv: (kv[0] != CANDIDATE_LABEL, kv[1]))
    for label, ms in rows:
        sp = speedup(ms, cand) if label != CANDIDATE_LABEL else None
        name = Text(label, style="bold" if label in (CANDIDATE_LABEL, baseline or timed.get("baseline")) else "")
        table.add_row(name, fmt_ms(ms), Text(fmt_speedup(sp), style=speedup_style(sp)) if sp else Text(""))
    roof = timed.get("roofline_ms")
    if roof:
        frac = f"{roof / cand:.1%} of roofline" if cand else ""
        table.add_row(Text("roofline", style="italic grey70"), fmt_ms(roof), Text(frac, style="grey70"))
    return Group(Text(f"{timed.get('mode', 'offline')} timing, median per call", style="grey62"), table)


def profiled_ancestor(tr: Track, c: Candidate) -> Candidate | None:
    """The nearest kernel ``c`` was derived from (parent, grandparent, ...) that has an NCU profile:
    delayed profiling profiles a track's best, so the newest candidates usually have none."""
    seen = {c.sha}
    sha = c.parent
    while sha and sha not in seen:
        seen.add(sha)
        a = tr.candidates.get(sha)
        if a is None:
            return None
        if a.profiled is not None:
            return a
        sha = a.parent
    return None


class MetricsPanel(VerticalScroll):
    """Everything measured about the focused candidate; ``full`` shows every NCU metric."""

    DEFAULT_CSS = """
    MetricsPanel { height: 1fr; padding: 0 1; }
    """

    def __init__(self, **kw: Unpack[WidgetOptions]) -> None:
        super().__init__(**kw)
        self.full = False
        self.baseline: str | None = None
        self._track: Track | None = None
        self._cand: Candidate | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="mp-body")

    def show(self, track: Track | None, cand: Candidate | None) -> None:
        self._track, self._cand = track, cand
        self.query_one("#mp-body", Static).update(self._body())

    def refresh_view(self) -> None:
        self.show(self._track, self._cand)

    def _body(self) -> RenderableType:
        tr, c = self._track, self._cand
        if tr is None:
            return Text("select a shape in the grid", style="grey50")
        parts: list[RenderableType] = []
        head = Text()
        head.append(f"{tr.label}-{tr.acc}", style="bold")
        head.append(f"  {tr.state}", style={"running": "yellow", "failed": "red", "done": "green"}.get(tr.state, ""))
        if tr.stage:
            head.append(f"  step {tr.step} · {tr.stage} {tr.stage_status}", style="grey70")
        parts.append(head)
        best = tr.speedup_vs(self.baseline)
        line = Text("best ")
        line.append(f" {fmt_speedup(best)} ", style=speedup_style(best))
        line.append(f" vs {self.baseline or tr.baseline or '—'}")
        if tr.hint:
            line.append(f"   hint: {tr.hint}", style="italic magenta")
        parts.append(line)
        if tr.error:
            parts.append(Text(f"error: {tr.error}", style="red"))
        if c is None:
            parts.append(Text("no candidate yet", style="grey50"))
            return Group(*parts)
        parts.append(_section("Timing"))
        parts.append(timing_table(c, self.baseline or tr.baseline))
        parts.append(_section("Checks"))
        parts.append(self._checks(c))
        parts.append(_section("ptxas"))
        parts.append(self._ptxas(c))
        parts.append(_section("NCU"))
        parts.append(self._ncu(tr, c))
        if c.reward:
            r = c.reward
            rp = ", ".join(f"{k} {v:+.3f}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in (r.get("parts") or {}).items())
            parts.append(Text(f"reward {r.get('reward', 0):+.3f} ({r.get('kind')})  {rp}", style="grey70"))
        return Group(*parts)

    def _checks(self, c: Candidate) -> RenderableType:
        ch = c.checked
        if ch is None:
            if c.compiled is not None and not c.compiled.get("ok"):
                errs = c.compiled.get("errors") or []
                lines = [Text("compile failed", style="red")]
                for e in errs[:4]:
                    if isinstance(e, dict):
                        lines.append(Text(f"  {e.get('line', '?')}: {e.get('message', '')}", style="red"))
                    else:
                        lines.append(Text(f"  {e}", style="red"))
                return Group(*lines)
            return Text("not checked yet", style="grey50")
        if ch.get("ok"):
            return Text(f"✓ passed  rel err {ch.get('rel_err', 0):.2e} ≤ bound {ch.get('bound', 0):.2e}", style="green")
        return Text(f"✗ {ch.get('status')}: {ch.get('failed') or ''} {ch.get('detail') or ''}", style="red")

    def _ptxas(self, c: Candidate) -> RenderableType:
        comp = c.compiled
        if comp is None:
            return Text("not compiled yet", style="grey50")
        p = comp.get("ptxas") or {}
        if not p:
            return Text("no ptxas report", style="grey50")
        spill = (p.get("spill_store_bytes") or 0) + (p.get("spill_load_bytes") or 0)
        t = Text(f"{p.get('registers', '?')} regs · {(p.get('smem_bytes') or 0) / 1024:.0f} KiB smem · "
                 f"stack {p.get('stack_bytes', 0)} B · ")
        t.append(f"spills {p.get('spill_store_bytes', 0)}/{p.get('spill_load_bytes', 0)} B", style="red" if spill else "green")
        t.append(f"   built in {float(comp.get('seconds') or 0):.1f}s{' (cached)' if comp.get('cached') else ''}", style="grey62")
        return t

    def _ncu(self, tr: Track, c: Candidate) -> RenderableType:
        lines: list[RenderableType] = []
        if tr.profiling_step is not None:
            lines.append(Text(f"◆ profile in the model's context since step {tr.profiling_step} ({tr.profiling_reason})", style="magenta"))
        else:
            lines.append(Text("profile not yet in the model's context (delayed profiling)", style="grey62"))
        pr = c.profiled
        if pr is None:
            anc = profiled_ancestor(tr, c)
            if anc is None:
                lines.append(Text("not profiled, nor any kernel it was derived from (f: profile the track's best now)",
                                  style="grey50"))
                return Group(*lines)
            pr = anc.profiled or {}
            lines.append(Text(f"this candidate is not profiled; its ancestor #{anc.num} {anc.sha[:10]} is:",
                              style="italic grey70"))
        verdict = str(pr.get("verdict") or "?")
        style = {"compute": "cyan", "memory-bandwidth": "yellow", "memory-latency": "magenta"}.get(verdict, "bold")
        t = Text("bottleneck: ")
        t.append(verdict, style=f"bold {style}")
        if pr.get("in_context"):
            t.append("  (sent to the model)", style="magenta")
        lines.append(t)
        metrics: dict = pr.get("metrics") or {}
        items = list(metrics.items())
        shown = items if self.full else items[:FILTERED_METRICS]
        table = Table(box=None, padding=(0, 1), show_header=False)
        table.add_column(style="grey70")
        table.add_column(justify="right")
        for name, mv in shown:
            if isinstance(mv, dict):
                v, unit = mv.get("value"), mv.get("unit") or ""
            else:
                v, unit = mv, ""
            vs = f"{v:,.2f}" if isinstance(v, float) else str(v)
            table.add_row(name, f"{vs} {unit}".strip())
        lines.append(table)
        if not self.full and len(items) > FILTERED_METRICS:
            lines.append(Text(f"… {len(items) - FILTERED_METRICS} more (m: full table)", style="grey50"))
        return Group(*lines)
