"""``manifest.json`` of an export: what each shape runs, and why it is safe to.

The manifest is the single source of truth for both dispatchers (Python
runtime and the generated C library), so it is validated on write *and* on
load.  Schema (``"schema": "l2tui-export/1"``)::

    {
      "schema": "l2tui-export/1",
      "created": "2026-11-29T08:30:00Z",
      "exporter": {"l2tui": "0.1.0", "git_revision": "abc123…" | null},
      "session": {"path": "/…/sessions/run-1", "git_revision": … | null, "versions": {…}},
      "gpu": {"name": …, "driver": …, "arch": …, "uuid": …},
      "arch": "sm_90a", "driver": "580.159",
      "abi": "extern \"C\" int l2_hgemm(const void* A, …)",
      "only_accepted": false,
      "dtype": "fp16" | "bf16",                  # optional (older exports: absent, fp16)
      "fallback_margin": 0.02,                   # optional (older exports: 0)
      "kernels": [ {entry}, … ],                 # sorted by shape
      "library": null | {"file": "lib/libl2hgemm.so", "header": "include/l2hgemm.h",
                         "arch": "sm_90a", "nvcc": "13.0.88", "sha256": …}
    }

    entry = {
      "shape": [M, N, K], "name": "M_N_K", "sha256": …,
      "file": "kernels/M_N_K.cu" | null (a fallback shape: its kernel is not shipped),
      "symbol": "l2_hgemm_M_N_K" (bf16: "l2_hgemm_bf16_M_N_K"), "acc": "f32" | "f16", "family": … | null,
      "flags": [nvcc flags], "track": "MxNxK-acc", "step": int | null,
      "origin": …, "policy": …, "selected_by": "accepted" | "best_passed",
      "accepted_by": "user" | "policy" | null,
      "rel_err": float | null, "bound": float | null, "nondeterministic": bool,
      "timing_mode": "offline" | "server" | null, "times_ms": {label: ms},
      "baseline": reward baseline label | null,
      "speedup": {baseline label: baseline_ms / kernel_ms},
      "fastest_baseline": label | null,
      "slower_than": [labels of baselines that were faster than the kernel],
      "fallback": null | "cublaslt" | "cublas",
      "role": "llama-3-8b qkv t16",             # optional: the shape's GEMM role, where the session knows it
      "fallback_pin": null | {"library": "cublas", "measured": label}   # optional (older exports: absent)
                    | {"library": "cublaslt", "measured": label, "index": i, "count": n,
                       "requested": r, "cublaslt_version": v}
    }

``fallback`` non-null means a library was faster than the kernel on this shape, or
less than ``fallback_margin`` slower (a kernel must win by that margin to be dispatched:
one session's timing of a shape moves by a few per cent in the next run), so both
dispatchers send it to their fallback (autotuned cuBLASLt) instead.  Exports
write ``"cublaslt"``; ``"cublas"`` is what exports wrote while the fallback was
plain cuBLAS, and is read with the same meaning.

``fallback_pin`` is what the fallback runs on this shape instead of tuning at its first
call: the fastest library the session measured here, timed by the harness (graph replays,
the session's timing mode) beside the kernel.  ``cublas`` is cublasGemmEx; ``cublaslt`` is
the algorithm at ``index`` in cuBLASLt's heuristic list, valid only while that cuBLASLt
(``cublaslt_version``) lists ``count`` algorithms when asked for ``requested`` (the C fallback
checks both and tunes when they differ).  ``measured`` names the library whose time chose it
(``torch``'s time is not reproducible by the fallback, so it never chooses).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from harness.shapes import MAX_ROLE_CHARS
from harness.stats import speedup
from l2tui.errors import UserError

SCHEMA = "l2tui-export/1"
MANIFEST_NAME = "manifest.json"
CANDIDATE_LABEL = "candidate"
ABI = ('extern "C" int l2_hgemm(const void* A, const void* B, void* C, '
       "int M, int N, int K, void* stream)")
#: the element types an export can hold (one per export); a manifest without ``dtype`` is fp16
DTYPES = ("fp16", "bf16")
#: the kernel entry point of each element type (harness.build.ENTRY_POINTS)
ENTRY_POINTS = {"fp16": "l2_hgemm", "bf16": "l2_hgemm_bf16"}


def abi_of(dtype: str) -> str:
    """The kernel ABI line of an export of ``dtype``: the entry point names the element type."""
    return ABI.replace("l2_hgemm(", f"{ENTRY_POINTS[dtype]}(", 1)


def manifest_dtype(doc: dict, where: str = MANIFEST_NAME) -> str:
    """The element type of a manifest: its ``dtype``, fp16 when absent (exports before bf16)."""
    dtype = doc.get("dtype", "fp16")
    if dtype not in DTYPES:
        raise ManifestError(f"{where}: dtype must be {' or '.join(DTYPES)}; re-run l2tui export")
    return str(dtype)

_NAME_RE = re.compile(r"^[1-9][0-9]*_[1-9][0-9]*_[1-9][0-9]*$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(UserError):
    """A manifest.json that is missing or does not follow the schema."""


def kernel_name(m: int, n: int, k: int) -> str:
    """File stem and symbol suffix of a shape: digits and underscores only."""
    for d in (m, n, k):
        if not isinstance(d, int) or isinstance(d, bool) or d <= 0:
            raise ManifestError(f"bad shape {m}x{n}x{k} in the export: dimensions must be positive integers")
    return f"{m}_{n}_{k}"


def symbol_name(m: int, n: int, k: int, *, dtype: str = "fp16") -> str:
    """The exported symbol of a shape's kernel: its entry point (by element type) and the shape, so a
    C caller that links a kernel of the wrong element type by name fails at link time."""
    return f"{ENTRY_POINTS[dtype]}_{kernel_name(m, n, k)}"


def safe_label(text: object, limit: int = 64) -> str:
    """A string safe inside a C comment, a file name or a CMake string: [A-Za-z0-9_.-] only."""
    s = re.sub(r"[^A-Za-z0-9_.\-]", "_", str(text))[:limit]
    return s or "_"


def speedups(times_ms: dict[str, float], baseline: str | None, reported: float | None) -> tuple[float | None, dict[str, float]]:
    """The kernel's time and its speedup over every baseline label in ``times_ms``.

    The kernel's time is ``times_ms["candidate"]``; events that lack it give it
    back from the reported speedup over the reward baseline.
    """
    cand = times_ms.get(CANDIDATE_LABEL)
    if cand is None and baseline and reported and times_ms.get(baseline):
        cand = times_ms[baseline] / reported
    if not cand or cand <= 0:
        return None, {}
    return cand, {lab: sp for lab, t in sorted(times_ms.items())
                  if lab != CANDIDATE_LABEL and (sp := speedup(t, cand)) is not None}


#: the marker exports write; FALLBACK_MARKERS are the values a manifest may hold
FALLBACK_MARKER = "cublaslt"
FALLBACK_MARKERS = ("cublaslt", "cublas")

#: baseline labels whose algorithms the fallback (cuBLASLt, fastest of its heuristic
#: candidates timed per shape) chooses among: cuBLAS and torch run cuBLAS(Lt) kernels too
FALLBACK_LABELS = ("cublaslt_autotune", "cublaslt_heuristic", "cublas", "torch")


#: how much faster than every library an exported kernel must have been measured (0.02: by 2 %)
DEFAULT_FALLBACK_MARGIN = 0.02


def fallback_for(times_ms: dict[str, float], kernel_ms: float | None,
                 margin: float = 0.0) -> tuple[str | None, list[str]]:
    """(``"cublaslt"`` when the fallback is to run this shape else None, labels of every faster baseline).

    The dispatchers' fallback autotunes cuBLASLt per shape, so it runs about as
    fast as the best of the cuBLAS-family baselines: any of them beating the
    kernel, or trailing it by less than ``margin`` (a fraction of its time),
    sends the shape to the fallback.  The margin is there because the session
    measured each shape once: a kernel 1 % ahead there can be 2 % behind in the
    next run, and the library promises not to lose to the libraries.  A faster
    baseline outside that family (none today) could not be matched by the
    fallback: it would only show in ``slower_than``, and the export bench would
    report the shape.
    """
    if not kernel_ms:
        return None, []
    faster = sorted(lab for lab, t in times_ms.items() if lab != CANDIDATE_LABEL and 0 < t < kernel_ms)
    refs = [times_ms[lab] for lab in FALLBACK_LABELS if times_ms.get(lab)]
    return (FALLBACK_MARKER if refs and min(refs) < kernel_ms * (1.0 + margin) else None), faster


#: the libraries a pin can reproduce, and how: cublasGemmEx, or a cuBLASLt heuristic index
PIN_LABELS = ("cublaslt_autotune", "cublaslt_heuristic", "cublas")
#: the most heuristic algorithms a pin may ask cuBLASLt for (the C fallback's kMaxPinRequest)
MAX_PIN_REQUEST = 256


def fallback_pin(times_ms: dict[str, float], autotune: dict | None, acc: str,
                 cublas_variant: str | None = None) -> dict | None:
    """The library the fallback should run on this shape, from the session's own measurement.

    The fastest of the libraries it can reproduce (PIN_LABELS) on the times the kernel was
    timed with, and only where the session timed autotuned cuBLASLt: a pin replaces the
    fallback's own tuning, so the session must have measured what that tuning would find.
    cuBLASLt's two subjects become a heuristic index (0 for the heuristic, the autotune's pick
    for the autotuned one), which needs the autotune's record of the list it indexed
    (``autotune``: best_index, available, requested, cublaslt_version); without it, or for f16
    accumulation (the fallback computes in fp32), there is no pin and the fallback tunes.
    cuBLAS's time counts only when it was the ``nn`` layout (``cublas_variant``): the harness
    also times cuBLAS on a transposed copy of B, a call the fallback does not make.
    """
    if acc != "f32":
        return None
    timed = {lab: times_ms[lab] for lab in PIN_LABELS
             if isinstance(times_ms.get(lab), (int, float)) and times_ms[lab] > 0}
    if "cublaslt_autotune" not in timed:
        return None
    if cublas_variant != "nn":
        timed.pop("cublas", None)
    lab = min(timed, key=lambda k: timed[k])
    if lab == "cublas":
        return {"library": "cublas", "measured": lab}
    rec = autotune if isinstance(autotune, dict) else {}
    fields: dict[str, int] = {}
    for k in ("best_index", "available", "requested", "cublaslt_version"):
        v = rec.get(k)
        if not isinstance(v, int) or isinstance(v, bool):
            return None
        fields[k] = v
    index = fields["best_index"] if lab == "cublaslt_autotune" else 0
    if not 0 <= index < fields["available"] <= fields["requested"] <= MAX_PIN_REQUEST:
        return None
    return {"library": "cublaslt", "measured": lab, "index": index, "count": fields["available"],
            "requested": fields["requested"], "cublaslt_version": fields["cublaslt_version"]}


def check_pin(pin: object, where: str) -> None:
    """A manifest's ``fallback_pin``: null or one of the two forms, integers in range (it goes into C)."""
    if pin is None:
        return
    bad = ManifestError(f"{where}: fallback_pin is malformed; re-run l2tui export")
    if not isinstance(pin, dict) or pin.get("library") not in ("cublas", "cublaslt"):
        raise bad
    if pin.get("measured") not in (None, *PIN_LABELS):   # printed by l2tui export: a known label only
        raise bad
    if pin["library"] == "cublas":
        return
    vals: list[int] = []
    for k in ("index", "count", "requested", "cublaslt_version"):
        v = pin.get(k)
        if not isinstance(v, int) or isinstance(v, bool):
            raise bad
        vals.append(v)
    index, count, requested, version = vals
    if not (0 <= index < count <= requested <= MAX_PIN_REQUEST and 0 < version < 2**31):
        raise bad


def check_margin(margin: float, what: str = "--margin") -> float:
    """A fallback margin must be a fraction in [0, 1); anything else is one clear error."""
    if not isinstance(margin, (int, float)) or isinstance(margin, bool) or not 0.0 <= float(margin) < 1.0:
        raise ManifestError(f"{what} must be a fraction from 0 to below 1 (0.02 = the kernel must win by 2 %)")
    return float(margin)


def _req(d: dict, key: str, types: tuple, where: str, nullable: bool = False) -> Any:
    if key not in d:
        raise ManifestError(f"{where}: missing {key!r}; re-run l2tui export")
    v = d[key]
    if v is None and nullable:
        return v
    if not isinstance(v, types) or isinstance(v, bool) and bool not in types:
        raise ManifestError(f"{where}: {key!r} has the wrong type; re-run l2tui export")
    return v


def validate(doc: object, root: Path | None = None) -> dict:
    """Check a manifest against the schema (and, with ``root``, that files exist). Returns it."""
    where = str(root / MANIFEST_NAME) if root else MANIFEST_NAME
    if not isinstance(doc, dict):
        raise ManifestError(f"{where}: not a JSON object; re-run l2tui export")
    if doc.get("schema") != SCHEMA:
        raise ManifestError(f"{where}: schema {doc.get('schema')!r} is not {SCHEMA!r}; re-export with this l2tui")
    for key, types in (("created", (str,)), ("arch", (str,)), ("abi", (str,)), ("gpu", (dict,)),
                       ("session", (dict,)), ("exporter", (dict,)), ("kernels", (list,))):
        _req(doc, key, types, where)
    _req(doc, "driver", (str,), where, nullable=True)
    dtype = manifest_dtype(doc, where)
    if "fallback_margin" in doc:
        check_margin(doc["fallback_margin"], f"{where}: fallback_margin")
    lib = doc.get("library")
    if lib is not None:
        for key in ("file", "header", "arch", "sha256"):
            _req(lib, key, (str,), where + ": library")
    seen: set[tuple[int, int, int]] = set()
    for i, e in enumerate(doc["kernels"]):
        w = f"{where}: kernels[{i}]"
        if not isinstance(e, dict):
            raise ManifestError(f"{w}: not an object; re-run l2tui export")
        shape = _req(e, "shape", (list,), w)
        if len(shape) != 3 or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in shape):
            raise ManifestError(f"{w}: shape must be [M, N, K] positive integers")
        t = tuple(shape)
        if t in seen:
            raise ManifestError(f"{w}: shape {t} appears twice")
        seen.add(t)
        name = _req(e, "name", (str,), w)
        if not _NAME_RE.match(name) or name != kernel_name(*shape):
            raise ManifestError(f"{w}: name {name!r} does not match shape {t}")
        _check_file(e, name, w)
        if _req(e, "symbol", (str,), w) != symbol_name(*shape, dtype=dtype):
            raise ManifestError(f"{w}: symbol must be {symbol_name(*shape, dtype=dtype)}")
        if not _SHA_RE.match(_req(e, "sha256", (str,), w)):
            raise ManifestError(f"{w}: sha256 is not a sha256 hex digest")
        if _req(e, "acc", (str,), w) not in ("f32", "f16"):
            raise ManifestError(f"{w}: acc must be f32 or f16")
        if _req(e, "selected_by", (str,), w) not in ("accepted", "best_passed"):
            raise ManifestError(f"{w}: selected_by must be accepted or best_passed")
        _req(e, "flags", (list,), w)
        _req(e, "times_ms", (dict,), w)
        _req(e, "speedup", (dict,), w)
        _req(e, "rel_err", (int, float), w, nullable=True)
        _req(e, "family", (str,), w, nullable=True)
        _req(e, "nondeterministic", (bool,), w)
        if "role" in e and not (isinstance(e["role"], str) and 0 < len(e["role"]) <= MAX_ROLE_CHARS
                                and e["role"].isprintable()):
            raise ManifestError(f"{w}: role must be one line of at most {MAX_ROLE_CHARS} printable characters")
        if e.get("fallback") not in (None, *FALLBACK_MARKERS):
            raise ManifestError(f"{w}: fallback must be null, \"cublaslt\" or \"cublas\"")
        check_pin(e.get("fallback_pin"), w)
        if root is not None and e["file"] and not (root / e["file"]).is_file():
            raise ManifestError(f"{w}: {e['file']} is missing from {root}; re-run l2tui export")
    return doc


def _check_file(e: dict, name: str, w: str) -> None:
    """A shape that runs its kernel names ``kernels/M_N_K.cu``; a fallback shape names none (its
    kernel is not shipped: the library never calls it), or that file (older exports)."""
    file = _req(e, "file", (str,), w, nullable=bool(e.get("fallback")))
    if file is not None and file != f"kernels/{name}.cu":
        raise ManifestError(f"{w}: file must be kernels/{name}.cu" + (" or null" if e.get("fallback") else ""))


def load(root: str | Path) -> dict:
    """Read and validate ``DIR/manifest.json``."""
    r = Path(root)
    f = r / MANIFEST_NAME
    try:
        doc = json.loads(f.read_text())
    except FileNotFoundError:
        raise ManifestError(f"{r} has no {MANIFEST_NAME}: point at a folder written by l2tui export") from None
    except (OSError, ValueError) as e:
        raise ManifestError(f"{f}: cannot read ({e}); re-run l2tui export") from None
    return validate(doc, r)
