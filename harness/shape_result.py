"""The answer of one shape's evaluation, assembled from what the checks and the timing left.

Pure Python on plain dicts (no GPU, no cupy), so the shape of the answer harness.evaluate and the
result files read is testable on any machine. The two cuBLAS layouts (``cublas_nn``: B as given,
``cublas_tn``: B transposed) are checked and timed as subjects of their own; the answer reports
one ``cublas``, the faster of the two, and keeps both times under ``detail_times_ms``.
"""

from __future__ import annotations

from typing import Any, Mapping

from .channel import MAX_STRING, Bool, Data, FrameError, Int, Json, ListOf, MapOf, Num, Record, Schema, Str, plain, \
    validate

CUBLAS_VARIANTS = ("cublas_nn", "cublas_tn")
#: the element types an evaluate_shape request may name (``dtype``); a request without one is fp16
DTYPES = ("fp16", "bf16")


def cublas_variant(times: dict[str, float | None]) -> tuple[dict[str, float | None], str | None]:
    """(the two cuBLAS layouts' times, the faster layout: ``"nn"``, ``"tn"`` or None when
    neither was timed); on a tie, or with only ``nn`` timed, ``nn``."""
    detail_times = {lb: times[lb] for lb in CUBLAS_VARIANTS if lb in times}
    nn, tn = detail_times.get("cublas_nn"), detail_times.get("cublas_tn")
    variant = None
    if nn is not None or tn is not None:
        variant = "tn" if (tn is not None and (nn is None or tn < nn)) else "nn"
    return detail_times, variant


def fold(d: dict[str, Any], pick: str | None, cublas_asked: bool) -> dict[str, Any]:
    """``d`` per subject, with the two cuBLAS layouts folded into one ``cublas`` entry: the
    picked layout's (None when neither was timed), only when cublas was asked for."""
    out = {lb: v for lb, v in d.items() if not lb.startswith("cublas_")}
    if cublas_asked:
        out["cublas"] = d.get(pick) if pick else None
    return out


def statuses(status: dict[str, str], pick: str | None, cublas_asked: bool, absent: dict[str, str],
             errors: dict[str, str]) -> dict[str, str]:
    """The status of every name asked for: subjects' own, then ``absent`` and ``error`` for the
    names that never became a subject (or whose setup or timing failed)."""
    stat = fold(status, pick, cublas_asked)
    if cublas_asked and pick is None:
        stat["cublas"] = status.get("cublas_nn", "error")
    for name in absent:
        stat[name] = "absent"
    for name in errors:
        stat[name] = "error"
    return stat


def shape_result(*, m: int, n: int, k: int, acc: str, mode: str, timing_mode: str, kinds: dict[str, str],
                 baselines: list[str], status: dict[str, str], summaries: dict[str, dict[str, Any]],
                 timed: dict[str, dict[str, Any]], chained: dict[str, dict[str, Any]], absent: dict[str, str],
                 errors: dict[str, str], bounds: list[float], e32s: list[float], e16s: list[float],
                 autotune: dict[str, Any] | None, clocks_before: dict[str, Any], clocks_after: dict[str, Any],
                 roofline_ms: float | None, seconds: float, phases: dict[str, float],
                 dtype: str = "fp16") -> dict[str, Any]:
    """The evaluate_shape answer. ``kinds`` is every subject's kind (``candidate`` or
    ``baseline``) in subject order; ``summaries`` each subject's harness.checks.CheckRecord
    summary; ``dtype`` the element type every subject ran in. Only candidates keep the per-check detail (``checks``) in theirs. A time is
    reported for a subject whose status is ``ok`` or ``wrong`` (a subject that failed a check
    after the timing keeps its time, so the reason can be read next to it)."""
    cublas_asked = "cublas" in baselines
    times = {lb: (timed[lb]["median_ms"] if lb in timed and status.get(lb) in ("ok", "wrong") else None) for lb in kinds}
    detail_times, variant = cublas_variant(times)
    pick = f"cublas_{variant}" if variant else None

    def f(d: dict[str, Any]) -> dict[str, Any]:
        return fold(d, pick, cublas_asked)

    summaries = dict(summaries)
    for lb in summaries:
        if kinds[lb] != "candidate":
            summaries[lb] = {k2: v for k2, v in summaries[lb].items() if k2 != "checks"}
    return {
        "shape": [m, n, k], "acc": acc, "dtype": dtype, "mode": mode,
        "status": statuses(status, pick, cublas_asked, absent, errors),
        "checks": f(summaries),
        "times_ms": f(times),
        "spread": f({lb: timed[lb]["spread"] for lb in timed}),
        "p90_ms": f({lb: timed[lb]["p90_ms"] for lb in timed}),
        "device_ms": f({lb: timed[lb].get("device_median_ms") for lb in timed}) if mode == "server" else {},
        "reps": f({lb: timed[lb].get("reps") for lb in timed}) if mode == "offline" else {},
        "timing": timing_mode if mode == "offline" else "server",
        "times_ms_chained": f({lb: (chained[lb]["median_ms"] if lb in chained and status.get(lb) in ("ok", "wrong")
                                    else None) for lb in kinds}) if timing_mode == "both" and mode == "offline" else {},
        "spread_chained": f({lb: chained[lb]["spread"] for lb in chained}) if timing_mode == "both" else {},
        "separator_ms": next((v["separator_ms"] for v in timed.values() if "separator_ms" in v), None),
        "detail_times_ms": detail_times, "cublas_variant": variant,
        "absent": absent, "errors": errors,
        "bound": min(bounds) if bounds else None, "ref_err": {"e32": e32s, "e16": e16s},
        "autotune": autotune,
        "clocks": {"before": clocks_before, "after": clocks_after},
        "roofline_ms": roofline_ms,
        "seconds": seconds, "phases": phases,
    }


# --------------------------------------------------------------------------- the answer's schema
#
# What the parent accepts from the worker as an evaluate_shape answer (harness.channel): every
# key typed, every per-subject map keyed by a name the request asked for.

_LABEL_LEN = 200
_MS = Num(0.0, 1e7, null=True)                  # a time: finite, non-negative, or none
_ANY_NUM = Num(finite=False, null=True)         # an error measure: a wrong kernel may make it NaN
_CHECK_SUMMARY = Record(
    required={"ok": Bool(), "failed": Str(80, null=True), "detail": Str(MAX_STRING, null=True)},
    optional={"rel_err": _ANY_NUM, "bound": _ANY_NUM, "checks": MapOf(Data(max_depth=6), max_items=64, key_len=80)},
)


def _per_subject(value: Schema) -> MapOf:
    return MapOf(value, max_items=512, key_len=_LABEL_LEN)


SHAPE_RESULT = Record(
    required={
        "shape": ListOf(Int(1, 1 << 20), min_items=3, max_items=3),
        "acc": Str(8, choices=("f32", "f16")),
        "mode": Str(8, choices=("offline", "server")),
        "status": _per_subject(Str(40, pattern=r"[a-z_]+")),
        "checks": _per_subject(_CHECK_SUMMARY),
        "times_ms": _per_subject(_MS),
        "spread": _per_subject(_ANY_NUM),
        "p90_ms": _per_subject(_MS),
        "device_ms": _per_subject(_MS),
        "reps": _per_subject(Num(0.0, 1e12, null=True)),
        "timing": Str(16, choices=("isolated", "chained", "both", "server")),
        "times_ms_chained": _per_subject(_MS),
        "spread_chained": _per_subject(_ANY_NUM),
        "separator_ms": _MS,
        "detail_times_ms": _per_subject(_MS),
        "cublas_variant": Str(4, choices=("nn", "tn"), null=True),
        "absent": _per_subject(Str(MAX_STRING)),
        "errors": _per_subject(Str(MAX_STRING)),
        "bound": _ANY_NUM,
        "ref_err": Record({"e32": ListOf(_ANY_NUM, 64), "e16": ListOf(_ANY_NUM, 64)}),
        "autotune": Data(max_depth=6),
        "clocks": Record({"before": MapOf(_ANY_NUM, 16, 40), "after": MapOf(_ANY_NUM, 16, 40)}),
        "roofline_ms": _MS,
        "seconds": Num(0.0, 1e7),
        "phases": MapOf(Num(0.0, 1e7), 32, 40),
    },
    # an answer of a worker from before bf16 has no dtype: it evaluated fp16
    optional={"dtype": Str(8, choices=DTYPES)},
)

_PER_SUBJECT_KEYS = ("status", "checks", "times_ms", "spread", "p90_ms", "device_ms", "reps", "times_ms_chained",
                     "spread_chained", "absent", "errors")


def check_shape_result(result: Json, request: Mapping[str, object], path: str = "$") -> None:
    """Raise FrameError unless ``result`` is an evaluate_shape answer to ``request``: its schema,
    its shape and accumulator the request's, and every subject it names one the request asked
    for (a forged answer cannot invent a subject or move one to another shape)."""
    validate(result, SHAPE_RESULT, path)
    assert isinstance(result, dict)
    if result["shape"] != [request.get("m"), request.get("n"), request.get("k")]:
        raise FrameError(f"{path}.shape: {result['shape']} is not the shape asked for")
    if result["acc"] != request.get("acc", "f32"):
        raise FrameError(f"{path}.acc: {result['acc']!r} is not the accumulator asked for")
    if result.get("dtype", "fp16") != request_dtype(request):
        raise FrameError(f"{path}.dtype: {result.get('dtype', 'fp16')!r} is not the element type asked for")
    asked = {str(c.get("label")) for c in _dicts(request.get("candidates"))}
    baselines = request.get("baselines") or []
    asked |= {str(b) for b in baselines} if isinstance(baselines, (list, tuple)) else set()
    asked |= set(CUBLAS_VARIANTS) | {"cublas"}
    for key in _PER_SUBJECT_KEYS:
        stray = sorted(_names(result[key]) - asked)
        if stray:
            raise FrameError(f"{path}.{key}: names {stray[0][:40]!r}, which the request did not ask for")
    stray = sorted(_names(result["detail_times_ms"]) - set(CUBLAS_VARIANTS))
    if stray:
        raise FrameError(f"{path}.detail_times_ms: names {stray[0][:40]!r}, not a cuBLAS layout")


def _names(value: Json) -> set[str]:
    """The keys of a per-subject map (the schema has already made it one)."""
    return set(value) if isinstance(value, dict) else set()


def _dicts(value: object) -> list[dict[str, object]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, (list, tuple)) else []


# --------------------------------------------------------------------------- the request's schema
#
# What the worker accepts as the arguments of an evaluate_shape request: the keys it reads, each
# typed; a key it does not know stays free-form data (callers of other versions add keys).

_CANDIDATE = Record({"label": Str(_LABEL_LEN), "so_path": Str(4096)},
                    optional={"nondeterministic": Bool(), "pdl": Bool()}, extra=Data(max_depth=4))
SHAPE_REQUEST = Record(
    required={"m": Int(1, 1 << 20), "n": Int(1, 1 << 20), "k": Int(1, 1 << 20), "shim_path": Str(4096)},
    optional={
        "acc": Str(8, choices=("f32", "f16")),
        "dtype": Str(8, choices=DTYPES),
        "candidates": ListOf(_CANDIDATE, 512),
        "baselines": ListOf(Str(64), 64),
        "mode": Str(8, choices=("offline", "server")),
        "checks": Str(8, choices=("full", "fast")),
        "timing": Str(16, choices=("isolated", "chained", "both")),
        "seeds": ListOf(Int(), 64, min_items=1),
        "replays": Int(1, 10_000),
        "qps": Num(1e-6, 1e9),
        "server_calls": Int(1, 1_000_000),
        "seed": Int(),
        "autotune_budget_s": Num(0.0, 1e6, null=True),
    },
    extra=Data(max_depth=4),
)


def request_dtype(request: Mapping[str, object]) -> str:
    """The element type an evaluate_shape request asks for: its ``dtype``, fp16 when it has none
    (a request of a caller from before bf16)."""
    dtype = request.get("dtype")
    return dtype if isinstance(dtype, str) else "fp16"


def check_shape_request(args: Mapping[str, object], path: str = "$.args") -> None:
    """Raise FrameError (one line) unless ``args`` are the arguments of an evaluate_shape request:
    :data:`SHAPE_REQUEST`, and bf16 with f32 accumulation only (bf16 has no f16-accumulate mode)."""
    validate(plain(args), SHAPE_REQUEST, path)
    if request_dtype(args) == "bf16" and args.get("acc", "f32") != "f32":
        raise FrameError(f"{path}.acc: bf16 accumulates in f32 only, not {args.get('acc')!r}")
