"""Known kernels: the best verified kernel per (GPU model, element type, accumulator, shape), in layers.

Why a store: a track that starts from the cost model's guess on a shape the project has
already solved loses first. Every track starts from what is known instead (``l2tui.agent.loop``
times the known kernel beside the policy's own first choices), and adds its verified best back.

Layers, read in this order:

* **bundled** (read-only): one folder per measured GPU model, holding ``gpu.json`` (the key and
  what made the results) and the winners files it names (``harness.winners``). In a checkout these
  are ``results/<gpu>/``; a wheel carries them as ``harness/data/known/<gpu>/``.
* **local**: ``known.json`` in the user's data directory (``$L2TUI_KNOWN_DIR`` overrides the
  folder), written by every finished track with what made the result (timing mode, date, git
  revision, driver, GPU).

The key of an entry is what makes a result valid elsewhere: the GPU's name and SM count, the
CUDA major version, the element type (``dtype``: fp16 or bf16; an entry or winners file without
one is fp16), the accumulator and the shape: a bf16 kernel is never offered to an fp16 track, nor
the reverse. An entry of another GPU model is a
*candidate* (worth timing here), never a result here.

Every file is hostile input: sizes are bounded, every field is type-checked, a local file that
fails any check is refused as a whole in one line (and never overwritten), and a bundled entry
whose configuration no longer renders its measured source is left out.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import math
import os
import re
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from .build import ENTRY_POINTS, source_dtype
from .errors import HarnessError
from .jsonfile import read_capped
from .paths import PACKAGE_DIR
from .shapes import Shape, parse_shape

LOCAL_FORMAT = "l2tui-known/1"
GPU_FORMAT = "l2tui-known-gpu/1"
#: a local layer larger than this is not one (a full grid of sources is a few MB)
MAX_LOCAL_BYTES = 64 << 20
MAX_ENTRIES = 50_000
#: one kernel source; the largest family render is about 40 kB
MAX_SOURCE_CHARS = 256 << 10
MAX_GPU_FILE_BYTES = 64 << 10
MAX_TEXT = 200
#: SM counts of GPUs whose evaluations may be replayed without the worker's device query
KNOWN_SMS: dict[str, int] = {"NVIDIA H200": 132, "NVIDIA H100 80GB HBM3": 132, "NVIDIA H100 PCIe": 114,
                             "NVIDIA H100 NVL": 132, "NVIDIA A100-SXM4-80GB": 108, "NVIDIA A100-SXM4-40GB": 108}
#: where a checkout keeps its measured GPUs, and where a wheel carries them
CHECKOUT_RESULTS = PACKAGE_DIR.parent / "results"
WHEEL_KNOWN = PACKAGE_DIR / "data" / "known"


#: the element types an entry may take; an entry (or a winners file) without ``dtype`` is fp16
DTYPES = tuple(ENTRY_POINTS)


class KnownError(HarnessError):
    """A known-kernels file that cannot be used; the message is one line."""


@dataclass(frozen=True)
class GpuKey:
    """What makes a timing valid on another machine: the same GPU model, SM count, CUDA major."""

    name: str
    sms: int | None = None
    cuda_major: int | None = None

    def same_model(self, other: "GpuKey") -> bool:
        """Equal names, and equal SM counts and CUDA majors where both sides know them."""
        if self.name.strip().casefold() != other.name.strip().casefold():
            return False
        for a, b in ((self.sms, other.sms), (self.cuda_major, other.cuda_major)):
            if a is not None and b is not None and a != b:
                return False
        return True

    def __str__(self) -> str:
        parts = [self.name]
        if self.sms:
            parts.append(f"{self.sms} SMs")
        if self.cuda_major:
            parts.append(f"CUDA {self.cuda_major}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "sms": self.sms, "cuda_major": self.cuda_major}

    @classmethod
    def from_info(cls, info: Mapping[str, object]) -> "GpuKey | None":
        """The key of a GPU as the worker (``gpu_info``), NVML or a recording's meta describes it."""
        name = info.get("name")
        if not isinstance(name, str) or not name.strip():
            return None
        sms = info.get("sms")
        sms = sms if isinstance(sms, int) and sms > 0 else KNOWN_SMS.get(name.strip())
        cuda = info.get("cuda_driver") or info.get("cuda_runtime") or info.get("cuda")
        return cls(name.strip()[:MAX_TEXT], sms, _major(cuda))


def _major(v: object) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v if v > 0 else None
    if isinstance(v, str):
        m = re.match(r"\s*(\d{1,3})(?:\.|$)", v)
        return int(m.group(1)) if m else None
    return None


@dataclass(frozen=True)
class KnownKernel:
    """One known kernel: where it was best, how fast, what made it, and its source."""

    shape: Shape
    acc: str
    gpu: GpuKey
    source: str
    name: str                                  # the configuration's name, or "kernel <sha12>"
    layer: str                                 # "bundled <dir>" or "local"
    speedup: float | None = None
    baseline: str | None = None
    time_ms: float | None = None
    made: Mapping[str, str] = field(default_factory=dict)   # timing, date, git, driver, gpu
    #: the element type the kernel takes: part of the key, so a bf16 kernel never seeds an fp16 track
    dtype: str = "fp16"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def to_entry(self) -> dict[str, object]:
        """The local layer's JSON object for this kernel."""
        return {"gpu": self.gpu.to_dict(), "dtype": self.dtype, "acc": self.acc, "shape": str(self.shape), "name": self.name,
                "sha256": self.sha256, "source": self.source, "speedup": self.speedup, "baseline": self.baseline,
                "time_ms": self.time_ms, "made": dict(self.made)}


# ----------------------------------------------------------------------------- bundled layer


def bundled_dirs() -> list[Path]:
    """Every folder holding a ``gpu.json``: the wheel's copy first, else the checkout's results."""
    for root in (WHEEL_KNOWN, CHECKOUT_RESULTS):
        if root.is_dir():
            found = sorted(p.parent for p in root.glob("*/gpu.json"))
            if found:
                return found
    return []


def _read_small_json(path: Path, limit: int, what: str) -> object:
    data = read_capped(path, limit, KnownError, what)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise KnownError(f"{path}: {what} is not JSON text: refused") from None


def _text(doc: Mapping[str, object], key: str, where: str, *, required: bool = False) -> str:
    v = doc.get(key)
    if v is None and not required:
        return ""
    if not isinstance(v, str) or len(v) > MAX_TEXT or (required and not v.strip()):
        raise KnownError(f"{where}: '{key}' must be a line of text")
    return v


def _read_gpu_file(d: Path) -> tuple[GpuKey, dict[str, str], list[str]]:
    """A bundled folder's ``gpu.json``: its key, what made its results, and its winners files."""
    where = str(d / "gpu.json")
    doc = _read_small_json(d / "gpu.json", MAX_GPU_FILE_BYTES, "known-GPU file")
    if not isinstance(doc, dict) or doc.get("format") != GPU_FORMAT:
        raise KnownError(f"{where}: not a known-GPU file (expected \"format\": \"{GPU_FORMAT}\")")
    sms, cuda = doc.get("sms"), doc.get("cuda_major")
    if not isinstance(sms, int) or not isinstance(cuda, int) or sms <= 0 or cuda <= 0:
        raise KnownError(f"{where}: 'sms' and 'cuda_major' must be positive integers")
    key = GpuKey(_text(doc, "gpu", where, required=True), sms, cuda)
    made = {k: _text(doc, k, where) for k in ("timing", "date", "git", "driver")}
    made["gpu"] = key.name
    files = doc.get("winners")
    if not isinstance(files, list) or not all(isinstance(f, str) and _FILE_RE.fullmatch(f) for f in files):
        raise KnownError(f"{where}: 'winners' must list file names in the same folder")
    return key, made, files


_FILE_RE = re.compile(r"[\w.-]+\.json")
#: a bench result file read for the bundled winners' times (the grid's is about 20 MB)
MAX_BENCH_BYTES = 64 << 20


def _bench_times(d: Path, winners_file: str, acc: str) -> tuple[dict[Shape, tuple[float, float | None]], str]:
    """Per shape, the committed winner's per-call time and its speedup over the baseline, from the
    bench file ``gpu.json`` names for this winners file (``"bench": {"winners-x.json": FILE}``),
    else for its accumulator (``"bench": {"f32": FILE}``), label ``l2``: each set of winners is
    timed by the bench that measured it, never by another set's rows for the same shape."""
    doc = _read_small_json(d / "gpu.json", MAX_GPU_FILE_BYTES, "known-GPU file")
    bench = doc.get("bench") if isinstance(doc, dict) else None
    baseline = doc.get("baseline") if isinstance(doc, dict) else None
    name = (bench.get(winners_file) or bench.get(acc)) if isinstance(bench, dict) else None
    if not isinstance(name, str) or not _FILE_RE.fullmatch(name) or not isinstance(baseline, str):
        return {}, ""
    return _bench_rows(d / name, baseline), baseline[:40]


def _bench_rows(path: Path, baseline: str) -> dict[Shape, tuple[float, float | None]]:
    """One bench result file's ``l2`` rows: per shape, (per-call ms, speedup over ``baseline``)."""
    rows = _read_small_json(path, MAX_BENCH_BYTES, "bench result file")
    rows = rows.get("rows") if isinstance(rows, dict) else None
    out: dict[Shape, tuple[float, float | None]] = {}
    for r in rows if isinstance(rows, list) else []:
        if not isinstance(r, dict) or not isinstance(r.get("times_ms"), dict):
            continue
        dims, t = [r.get("m"), r.get("n"), r.get("k")], r["times_ms"]
        m, n, k = (x if isinstance(x, int) and not isinstance(x, bool) and x > 0 else 0 for x in dims)
        if not (m and n and k):
            continue
        ms, base = t.get("l2"), t.get(baseline)
        if isinstance(ms, (int, float)) and math.isfinite(ms) and ms > 0:
            sp = base / ms if isinstance(base, (int, float)) and math.isfinite(base) and base > 0 else None
            out[Shape(m, n, k)] = (float(ms), sp)
    return out


@functools.lru_cache(maxsize=16)
def _bundled_layer(d: Path) -> tuple[KnownKernel, ...]:
    from . import winners as W

    key, made, files = _read_gpu_file(d)
    out: list[KnownKernel] = []
    for name in files:
        try:
            w = W.load(d / name)
        except HarnessError as e:
            raise KnownError(str(e)) from None
        times, baseline = _bench_times(d, name, w.acc)
        sources: dict[str, str] = {}
        for cname, win in w.configs.items():
            try:
                src = win.source()
            except HarnessError:
                continue
            if W.sha256(src) == win.sha256:   # a template changed since: not the measured kernel
                sources[cname] = src
        for shape, cname in w.shapes.items():
            if cname in sources:
                ms, sp = times.get(shape, (None, None))
                out.append(KnownKernel(shape, w.acc, key, sources[cname], cname, f"bundled {d.name}", sp,
                                       baseline if sp else None, ms, made, w.dtype))
    return tuple(out)


# ----------------------------------------------------------------------------- local layer


def local_file() -> Path:
    """``known.json`` in ``$L2TUI_KNOWN_DIR``, else in the user's data directory."""
    env = os.environ.get("L2TUI_KNOWN_DIR")
    if env:
        return Path(env).expanduser() / "known.json"
    from platformdirs import user_data_dir

    return Path(user_data_dir("l2tui", appauthor=False)) / "known.json"


def _number(v: object, where: str, key: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise KnownError(f"{where}: '{key}' must be a positive number")
    return float(v)


def _entry(raw: object, where: str) -> KnownKernel:
    if not isinstance(raw, dict):
        raise KnownError(f"{where}: not an object")
    g = raw.get("gpu")
    if not isinstance(g, dict):
        raise KnownError(f"{where}: 'gpu' must be an object")
    sms, cuda = g.get("sms"), g.get("cuda_major")
    if any(v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0) for v in (sms, cuda)):
        raise KnownError(f"{where}: gpu 'sms' and 'cuda_major' must be positive integers")
    key = GpuKey(_text(g, "name", where, required=True), sms, cuda)
    acc = raw.get("acc")
    if acc not in ("f32", "f16"):
        raise KnownError(f"{where}: 'acc' must be f32 or f16")
    dtype = raw.get("dtype", "fp16")   # entries written before bf16 have none: fp16
    if dtype not in DTYPES:
        raise KnownError(f"{where}: 'dtype' must be {' or '.join(DTYPES)}")
    try:
        shape = parse_shape(str(raw.get("shape", ""))[:40])
    except HarnessError:
        raise KnownError(f"{where}: 'shape' must be MxNxK") from None
    src = raw.get("source")
    if not isinstance(src, str) or not src or len(src) > MAX_SOURCE_CHARS:
        raise KnownError(f"{where}: 'source' must be a kernel source of at most {MAX_SOURCE_CHARS >> 10} kB")
    if raw.get("sha256") != hashlib.sha256(src.encode()).hexdigest():
        raise KnownError(f"{where}: 'sha256' is not the sha256 of its source")
    if source_dtype(src) != dtype:
        raise KnownError(f"{where}: 'dtype' is {dtype} but its source takes {source_dtype(src)}")
    made = raw.get("made") or {}
    if not isinstance(made, dict) or not all(isinstance(k, str) and isinstance(v, str) and len(v) <= MAX_TEXT
                                             for k, v in made.items()):
        raise KnownError(f"{where}: 'made' must map names to lines of text")
    baseline = raw.get("baseline")
    if baseline is not None and (not isinstance(baseline, str) or len(baseline) > 40):
        raise KnownError(f"{where}: 'baseline' must be a baseline's name")
    return KnownKernel(shape, acc, key, src, _text(raw, "name", where, required=True), "local",
                       _number(raw.get("speedup"), where, "speedup"), baseline,
                       _number(raw.get("time_ms"), where, "time_ms"), {k: v for k, v in list(made.items())[:8]}, dtype)


def read_local(path: Path) -> list[KnownKernel]:
    """The entries of a local layer (none when the file does not exist); one-line KnownError when
    any part of it is bad."""
    if not path.exists():
        return []
    doc = _read_small_json(path, MAX_LOCAL_BYTES, "known-kernels file")
    if not isinstance(doc, dict) or doc.get("format") != LOCAL_FORMAT or not isinstance(doc.get("entries"), list):
        raise KnownError(f"{path}: not a known-kernels file (expected \"format\": \"{LOCAL_FORMAT}\" and 'entries'): "
                         "refused, left as it is")
    entries = doc["entries"]
    if len(entries) > MAX_ENTRIES:
        raise KnownError(f"{path}: over {MAX_ENTRIES} entries: refused, left as it is")
    try:
        return [_entry(e, f"entry {i + 1}") for i, e in enumerate(entries)]
    except KnownError as e:
        raise KnownError(f"{path}: {e}: refused, left as it is") from None


# ----------------------------------------------------------------------------- the store


def log_distance(a: Shape, b: Shape) -> float:
    """Distance of two shapes in (log2 M, log2 N, log2 K): a grid step is 1 per dimension."""
    return math.sqrt(sum(math.log2(x / y) ** 2 for x, y in ((a.m, b.m), (a.n, b.n), (a.k, b.k))))


def _better(new: KnownKernel, old: KnownKernel) -> bool:
    """A new entry replaces an old one of the same key when it is faster (or the old has no time)."""
    if new.time_ms is not None and old.time_ms is not None:
        return new.time_ms < old.time_ms
    return new.time_ms is not None or old.time_ms is None


class KnownStore:
    """The bundled layers plus the local one; see the module docstring."""

    def __init__(self, bundled: Sequence[Path] | None = None, local: Path | None = None) -> None:
        self.bundled = list(bundled_dirs() if bundled is None else bundled)
        self.local_path = local if local is not None else local_file()
        self.problems: list[str] = []      # one line per layer that was refused
        self._lock = threading.Lock()
        self._local: list[KnownKernel] | None = None
        self._local_bad = False

    def _bundled(self) -> list[KnownKernel]:
        out: list[KnownKernel] = []
        for d in self.bundled:
            try:
                out.extend(_bundled_layer(Path(d)))
            except KnownError as e:
                if str(e) not in self.problems:
                    self.problems.append(str(e))
        return out

    def local(self) -> list[KnownKernel]:
        """The local layer (empty, with a line in ``problems``, when its file is refused)."""
        if self._local is None:
            try:
                self._local = read_local(self.local_path)
            except KnownError as e:
                self._local, self._local_bad = [], True
                self.problems.append(str(e))
        return self._local

    def entries(self) -> list[KnownKernel]:
        return self._bundled() + self.local()

    def results(self, gpu: GpuKey, acc: str | None = None, dtype: str = "fp16") -> dict[tuple[str, Shape], KnownKernel]:
        """This GPU model's best known kernel of element type ``dtype`` per (accumulator, shape): its results."""
        best: dict[tuple[str, Shape], KnownKernel] = {}
        for e in self.entries():
            if not e.gpu.same_model(gpu) or (acc is not None and e.acc != acc) or e.dtype != dtype:
                continue
            k = (e.acc, e.shape)
            if k not in best or (e.layer == "local" and _better(e, best[k])):
                best[k] = e
        return best

    def candidates(self, gpu: GpuKey, acc: str | None = None, dtype: str = "fp16") -> list[KnownKernel]:
        """Entries of other GPU models (of element type ``dtype``): worth timing here, never a result here."""
        return [e for e in self.entries()
                if not e.gpu.same_model(gpu) and (acc is None or e.acc == acc) and e.dtype == dtype]

    def seeds(self, shape: Shape, acc: str, gpu: GpuKey | None, *, limit: int = 4,
              usable: Callable[[KnownKernel], bool] | None = None, dtype: str = "fp16") -> list[KnownKernel]:
        """The kernels a track on ``shape`` times first: this GPU's known kernel for the shape; for
        a shape it does not know, the known kernels of the shape on other GPU models and this GPU's
        winners of the nearest shapes in log M, log N, log K (distinct sources, at most ``limit``).
        ``usable`` filters (a neighbour's family must run the shape). Only kernels of ``dtype`` are
        offered: a kernel of the other element type would read the track's data as garbage; for
        bf16, this GPU's fp16 winners retyped (:func:`bf16_twin`) follow the bf16 ones, the shape's
        own first."""
        ok = usable or (lambda e: True)
        mine = self.results(gpu, acc, dtype) if gpu is not None else {}
        exact = mine.get((acc, shape))
        if exact is not None and ok(exact):
            return [exact]
        out: list[KnownKernel] = []
        seen: set[str] = set()

        def add(e: KnownKernel) -> None:
            if len(out) < limit and e.sha256 not in seen and ok(e):
                seen.add(e.sha256)
                out.append(e)

        others = self.candidates(gpu, acc, dtype) if gpu is not None else self.entries()
        for e in others:
            if e.shape == shape and e.dtype == dtype:
                add(e)
        def nearest(pool: Iterable[KnownKernel]) -> list[KnownKernel]:
            return sorted(pool, key=lambda e: (log_distance(e.shape, shape), e.shape))

        fp16 = nearest(self.results(gpu, acc, "fp16").values()) if dtype == "bf16" and gpu is not None else []
        if fp16 and fp16[0].shape == shape:   # the shape's own fp16 winner, retyped, before bf16 neighbours
            self._add_twins(fp16[:1], add, out, limit)
        for e in nearest(mine.values()):
            add(e)
        self._add_twins(fp16, add, out, limit)
        return out

    @staticmethod
    def _add_twins(fp16: Sequence[KnownKernel], add: Callable[[KnownKernel], None], out: list[KnownKernel],
                   limit: int) -> None:
        """This GPU's fp16 results, nearest first, as bf16 candidates (:func:`bf16_twin`) until
        ``out`` is full: where nothing is known in bf16 yet, the configuration that won a shape in
        fp16 is the first to time for it in bf16 (the tensor cores run both at one rate), so a bf16
        track does not start cold. Retyped one at a time: only the few that are offered."""
        for e in fp16:
            if len(out) >= limit:
                return
            twin = bf16_twin(e)
            if twin is not None:
                add(twin)

    def record(self, kernel: KnownKernel) -> bool:
        """Add ``kernel`` to the local layer when it beats what is there for its key; True when
        written. A refused local file is never overwritten (``KnownError``, one line)."""
        with self._lock:
            current = self.local()
            if self._local_bad:
                raise KnownError(f"not recording into {self.local_path}: the file was refused (move it away to start a new one)")
            key = (kernel.gpu, kernel.dtype, kernel.acc, kernel.shape)
            old = next((e for e in current if (e.gpu, e.dtype, e.acc, e.shape) == key), None)
            if old is not None and not _better(kernel, old):
                return False
            new = [e for e in current if e is not old] + [kernel]
            if len(new) > MAX_ENTRIES:
                raise KnownError(f"{self.local_path}: full ({MAX_ENTRIES} entries); not recording")
            _write_atomic(self.local_path, {"format": LOCAL_FORMAT, "entries": [e.to_entry() for e in new]})
            self._local = new
            return True


def _write_atomic(path: Path, doc: dict[str, object]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".known-", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=0)
        os.replace(tmp, path)
    except OSError as e:
        raise KnownError(f"cannot write {path}: {e.strerror or e}") from None


def made_now(*, timing: str, gpu: Mapping[str, object], git: str = "") -> dict[str, str]:
    """What made a result recorded now: timing mode, date, git revision, driver and GPU."""
    return {"timing": str(timing)[:MAX_TEXT], "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "git": str(git)[:MAX_TEXT], "driver": str(gpu.get("driver") or "")[:MAX_TEXT],
            "gpu": str(gpu.get("name") or "")[:MAX_TEXT]}


def git_revision() -> str:
    """The checkout's short revision when running from one (empty for an installed wheel);
    ``$L2TUI_GIT_REV`` wins, as in the bench's result files: a tree copied to another machine may
    carry a stale ``.git``."""
    if os.environ.get("L2TUI_GIT_REV"):
        return os.environ["L2TUI_GIT_REV"][:MAX_TEXT]
    head = PACKAGE_DIR.parent / ".git"
    try:
        if head.is_file():   # a worktree: "gitdir: PATH"
            head = Path(head.read_text().split(":", 1)[1].strip())
        ref = (head / "HEAD").read_text().strip()
        if ref.startswith("ref: "):
            target = head / ref[5:]
            if not target.is_file():
                common = head / "commondir"
                base = (head / common.read_text().strip()) if common.is_file() else head
                target = base / ref[5:]
            ref = target.read_text().strip()
        return ref[:12] if re.fullmatch(r"[0-9a-f]{40}", ref) else ""
    except (OSError, IndexError):
        return ""


def bf16_twin(kernel: KnownKernel) -> KnownKernel | None:
    """The bf16 render of an fp16 family configuration with f32 accumulation, as a candidate with
    no time of its own (a bf16 time is only ever measured); None for a kernel that is not a family
    render (its code cannot be retyped safely) or that accumulates in f16 (bf16 accumulates in f32)."""
    if kernel.dtype != "fp16" or kernel.acc != "f32":
        return None
    retyped = _bf16_render(kernel.source)
    if retyped is None:
        return None
    name, source = retyped
    return KnownKernel(kernel.shape, kernel.acc, kernel.gpu, source, name, f"{kernel.layer}, fp16 twin",
                       made=kernel.made, dtype="bf16")


@functools.lru_cache(maxsize=2048)
def _bf16_render(source: str) -> tuple[str, str] | None:
    """The bf16 configuration's name and source for an fp16 family render, else None. Cached by
    source: a bf16 track's seeds retype every fp16 winner of the GPU (about a thousand on the
    H200, a few seconds of rendering), and the app's known view asks for every track at once."""
    from . import families as F

    cfg = F.Config.from_source(source)
    if cfg is None or cfg.source() != source:
        return None
    try:
        twin = F.Config.of(cfg.family, {**cfg.knob_dict, "DTYPE": F.dtype_knob("bf16")})
        return twin.name, twin.source()
    except F.FamilyError:
        return None


def family_usable(shape: Shape, arch: str | None) -> Callable[[KnownKernel], bool]:
    """A ``seeds`` filter: a kernel of a seed family must be applicable to ``shape`` on ``arch``;
    any other kernel only where it was measured on this very shape."""
    from . import families as F

    def ok(e: KnownKernel) -> bool:
        cfg = F.Config.from_source(e.source)
        if cfg is None:
            return e.shape == shape
        return F.applicable(cfg.family, shape, arch)
    return ok


#: what a track starts from, by its first seed (:func:`seed_kind`)
SEED_KINDS = ("known", "fp16 twins", "from neighbours", "nothing known")


def seed_kind(seeds: Sequence[KnownKernel], shape: Shape, gpu: GpuKey) -> str:
    """One of :data:`SEED_KINDS` for the ``seeds`` of a track on ``shape``: this GPU's own entry
    for the shape, the fp16 twins a bf16 track times, the neighbours' (or other GPU models')
    kernels, or nothing. The ``known`` command and the app's known view say it in these words."""
    if not seeds:
        return "nothing known"
    first = seeds[0]
    if first.layer.endswith("fp16 twin"):
        return "fp16 twins"
    if first.shape == shape and first.gpu.same_model(gpu):
        return "known"
    return "from neighbours"


def describe(entries: Iterable[KnownKernel]) -> list[str]:
    """One line per kernel, for the ``known`` command."""
    lines = []
    for e in sorted(entries, key=lambda e: (e.dtype, e.acc, e.shape)):
        sp = f"{e.speedup:.3f}x vs {e.baseline}" if e.speedup and e.baseline else "-"
        t = f"{e.time_ms * 1e3:.1f} us" if e.time_ms else "-"
        lines.append(f"{str(e.shape):<20} {e.dtype:<4} {e.acc:<4} {e.name[:48]:<48} {t:>10}  {sp:<28} {e.layer}")
    return lines
