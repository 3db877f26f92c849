"""The known-kernels view (``K``): what this GPU already knows for the session's shapes.

Issue 52: an engineer watching a session wants to see, per track, what the track started from
(this GPU's known kernel for the shape, the fp16 twins of a bf16 track, the neighbours' winners,
or nothing) and whether the session beat it, without leaving the app for ``l2tui known``. The
store (``harness.known.KnownStore``) reads files, so it is loaded in a worker; every file it reads
is hostile input and a refused one is one line here, never a traceback.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Static

from harness.known import GpuKey, KnownKernel, KnownStore, family_usable, seed_kind
from harness.shapes import Shape

from ..state import SessionModel, Track
from .modals import CANCEL

#: the architecture whose families the app's tracks run (a neighbour's family must run the shape)
ARCH = "sm_90a"
COLUMNS = ("shape", "acc", "role", "starts from", "kernel", "known speedup", "layer", "session best")
#: a neighbour row names this many of its kernels, then how many more
SHOWN_NEIGHBOURS = 2
NO_GPU = ("this session has recorded no GPU (yet): known kernels are kept per GPU model, "
          "so there is nothing to look up")


@dataclass(frozen=True)
class TrackQuery:
    """What the worker needs of one track, copied on the UI thread (the model keeps changing)."""

    track: str
    shape: Shape | None     # None: the session's id names no usable shape
    acc: str


@dataclass(frozen=True)
class KnownLoad:
    """The worker's answer: counts per layer for this GPU, each track's seeds, the store's problems."""

    layers: Mapping[str, int]
    seeds: Mapping[str, Sequence[KnownKernel]]
    problems: Sequence[str]


def track_queries(tracks: Iterable[Track]) -> list[TrackQuery]:
    """The tracks as the worker reads them; a shape with a dimension below 1 (a malformed event)
    is kept as a row that says so rather than sent to the store's log-distance maths."""
    out = []
    for tr in tracks:
        dims = tuple(tr.shape)
        ok = len(dims) == 3 and all(isinstance(d, int) and d > 0 for d in dims)
        out.append(TrackQuery(tr.id, Shape(*dims) if ok else None, tr.acc))
    return out


def load_known(store: KnownStore, key: GpuKey, dtype: str, queries: Sequence[TrackQuery]) -> KnownLoad:
    """Read the store for this GPU (slow: it reads and checks files): counts per layer of the
    kernels in force, and what each track starts from, as a track of the loop would."""
    mine = store.results(key, None, dtype)
    layers = Counter(k.layer for k in mine.values())
    layers.setdefault("local", 0)
    seeds = {q.track: store.seeds(q.shape, q.acc, key, usable=family_usable(q.shape, ARCH), dtype=dtype)
             for q in queries if q.shape is not None}
    return KnownLoad(dict(sorted(layers.items())), seeds, tuple(store.problems))


def _speedup(x: float | None, baseline: str | None) -> str:
    return f"{x:.2f}× vs {baseline}" if x and baseline else "—"


def kernel_cells(kind: str, seeds: Sequence[KnownKernel], key: GpuKey) -> tuple[str, str, str]:
    """The kernel, known-speedup and layer cells of a row: a known kernel's own numbers; for
    twins and neighbours, their names (a neighbour's time is of another shape, so none)."""
    if not seeds:
        return "—", "—", "—"
    first = seeds[0]
    if kind == "known":
        return first.name, _speedup(first.speedup, first.baseline), first.layer
    names = [f"{k.name} ({_origin(k, key)})" for k in seeds[:SHOWN_NEIGHBOURS]]
    more = f" +{len(seeds) - SHOWN_NEIGHBOURS} more" if len(seeds) > SHOWN_NEIGHBOURS else ""
    note = "no bf16 time yet" if kind == "fp16 twins" else "no time on this shape here"
    return "; ".join(names) + more, note, first.layer


def _origin(k: KnownKernel, key: GpuKey) -> str:
    """Where a seed was best: its shape, and its GPU when that is another model (a candidate)."""
    return str(k.shape) if k.gpu.same_model(key) else f"{k.shape}, {k.gpu.name}"


def session_cell(tr: Track | None, kind: str, seeds: Sequence[KnownKernel]) -> Text:
    """The session's best on the shape, over the known kernel's baseline where the track timed
    it, so the two numbers compare: green when the session beat what was known."""
    if tr is None or tr.best_speedup is None:
        return Text("—", style="grey50")
    known = seeds[0] if kind == "known" and seeds else None
    if known is not None and known.speedup and known.baseline:
        sp = tr.speedup_vs(known.baseline)
        if sp is not None:
            beat = sp > known.speedup
            return Text(f"{sp:.2f}× {'beats it' if beat else 'below it'}",
                        style="green" if beat else "yellow")
    return Text(_speedup(tr.best_speedup, tr.baseline or None))


class KnownScreen(ModalScreen[None]):
    """Known kernels for the session's GPU: counts per layer, then one row per track with what it
    starts from and the session's best beside it."""

    BINDINGS = [CANCEL]

    @dataclass
    class Loaded(Message):
        """The store was read (``error``: the one line saying why it could not be)."""

        load: KnownLoad | None
        error: str = ""

    def __init__(self, model: SessionModel) -> None:
        super().__init__()
        self.model = model
        self.key = GpuKey.from_info(model.gpu)
        self.dtype = model.dtype

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog known-dialog"):
            yield Label(self._title(), id="known-title", classes="dialog-title")
            yield Static(NO_GPU if self.key is None else "reading the known kernels …", id="known-summary")
            yield Static("", id="known-problems")
            yield DataTable(id="known-table", cursor_type="row", zebra_stripes=True)
            yield Label("escape: close · `l2tui known` lists every kernel this GPU knows", classes="dialog-help")

    def _title(self) -> str:
        accs = sorted({t.acc for t in self.model.tracks.values()}) or ["—"]
        gpu = str(self.key) if self.key is not None else "no GPU recorded"
        return f"Known kernels for {gpu}  ·  {self.dtype}  ·  accumulator {', '.join(accs)}"

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(*COLUMNS)
        table.display = False
        self.query_one("#known-problems", Static).display = False
        if self.key is not None:
            self._load(self.key, self.dtype, track_queries(self.model.tracks.values()))

    @work(thread=True, group="known", exclusive=True, exit_on_error=False, name="known")
    def _load(self, key: GpuKey, dtype: str, queries: list[TrackQuery]) -> None:
        """Runs in a worker thread; reports back only by message. The store validates what it
        reads; anything else that goes wrong in it is still one line, never a dead view."""
        try:
            self.post_message(self.Loaded(load_known(KnownStore(), key, dtype, queries)))
        except Exception as e:  # noqa: BLE001 - the boundary between hostile files and the UI
            self.post_message(self.Loaded(None, f"cannot read the known kernels: {str(e).splitlines()[0] if str(e) else type(e).__name__}"))

    @on(Loaded)
    def _loaded(self, msg: "KnownScreen.Loaded") -> None:
        msg.stop()
        if msg.load is None:
            self.query_one("#known-summary", Static).update(Text(msg.error, style="red"))
            return
        self._show_problems(msg.load.problems)
        self.query_one("#known-summary", Static).update(self._summary(msg.load))
        self._fill(msg.load)

    def _show_problems(self, problems: Sequence[str]) -> None:
        """One line per refused layer (the store's own words), folded to the view's width."""
        box = self.query_one("#known-problems", Static)
        lines = [" ".join(p.split()) for p in problems]
        box.update(Text("\n".join(lines), style="yellow", no_wrap=True, overflow="ellipsis"))
        box.display = bool(lines)

    def _summary(self, load: KnownLoad) -> str:
        total = sum(load.layers.values())
        per = " · ".join(f"{layer}: {n}" for layer, n in load.layers.items())
        return f"{total} {self.dtype} kernels known for this GPU ({per}); {len(self.model.tracks)} tracks in the session"

    def _fill(self, load: KnownLoad) -> None:
        assert self.key is not None
        table = self.query_one(DataTable)
        for q in track_queries(self.model.tracks.values()):
            table.add_row(*self._row(q, load), key=q.track)
        table.display = True
        table.focus()

    def _row(self, q: TrackQuery, load: KnownLoad) -> tuple[str | Text, ...]:
        assert self.key is not None
        role = self.model.roles.get(str(q.shape), "") if q.shape is not None else ""
        if q.shape is None or q.track not in load.seeds:
            return (q.track, q.acc, role, "not a shape", "—", "—", "—", Text("—"))
        seeds = load.seeds[q.track]
        kind = seed_kind(seeds, q.shape, self.key)
        kernel, known, layer = kernel_cells(kind, seeds, self.key)
        return (str(q.shape), q.acc, role, kind, kernel, known, layer,
                session_cell(self.model.tracks.get(q.track), kind, seeds))

    def action_cancel(self) -> None:
        self.dismiss(None)

