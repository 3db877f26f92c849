"""Several candidates on one shape in one request of the harness's GPU worker.

The agent's executors (``l2tui.executors``) and the loop's seed stage (``l2tui.agent.seed_timing``:
the search policy's pick, the known kernels) call it through ``l2tui.executors.batch``; it needs
nothing of theirs.

Why one request: the worker checks every subject with the same inputs and times them
interleaved with each other and with the baselines (the harness's one checker and one timer), so
the pick's candidates are compared under the same clocks, and the per-request setup (inputs,
reference, baselines) is paid once per shape instead of once per candidate.

``evaluate_many`` returns one ``harness.evaluate.Evaluation`` per item, shaped like
``Evaluator.evaluate``'s (the item's time under ``"candidate"``, the baselines beside it), so a
caller treats a batched result exactly like a single one. A candidate that crashes the worker is
charged alone: the request is repeated without it. An evaluator that does not batch
(``can_batch`` False, :mod:`harness.evaluator_protocol`: recorded evaluations) gets one
``evaluate`` call per item.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, cast

from harness.shapes import Shape

if TYPE_CHECKING:
    from harness.evaluate import Evaluation
    from harness.evaluator_protocol import BatchEvaluator, Evaluator

Item = tuple[str, str, Sequence[str]]     # (label, source, nvcc flags)


def _msg(status: str, t: float | None, check: dict[str, object] | None) -> str:
    if status == "ok":
        return f"ok: {t:.4g} ms" if t else "ok"
    if status == "unsupported":
        return "unsupported: l2_hgemm returned non-zero for this shape"
    if status in ("crashed", "timeout"):
        return str((check or {}).get("detail") or status)[:300]
    if check:
        return f"wrong: check '{check.get('failed')}' failed: {check.get('detail')}"
    return status


def evaluate_many(evaluator: "Evaluator", items: Sequence[Item], shape: Shape, acc: str = "f32", *,
                  baselines: Sequence[str] = ()) -> dict[str, Evaluation]:
    """label -> Evaluation of every item (see the module docstring). ``baselines`` are timed in
    the same request (and reported on every item's Evaluation)."""
    if not items:
        return {}
    if not evaluator.can_batch:
        out: dict[str, Evaluation] = {}
        for i, (label, src, flags) in enumerate(items):
            out[label] = evaluator.evaluate(src, shape, acc, flags=tuple(flags), time_baselines=bool(baselines) and i == 0)
        return out
    return _batched(cast("BatchEvaluator", evaluator), items, shape, acc, baselines)


def _batched(evaluator: "BatchEvaluator", items: Sequence[Item], shape: Shape, acc: str,
             baselines: Sequence[str]) -> dict[str, Evaluation]:
    """One request for every item that builds (see the module docstring)."""
    from harness.build import build
    from harness.errors import KernelSourceError, ToolMissing
    from harness.evaluate import Evaluation, is_nondeterministic
    from harness.worker import WorkerError

    out: dict[str, Evaluation] = {}
    builds = {}
    for label, src, flags in items:
        try:
            br = build(src, arch=evaluator.arch, flags=tuple(flags))
        except KernelSourceError:
            out[label] = evaluator.evaluate(src, shape, acc, flags=tuple(flags), time_baselines=False)
            continue
        if not br.ok:
            first = br.errors[0] if br.errors else None
            out[label] = Evaluation("compile_error", br, message=f"compile error: {first}" if first else "compile error")
            continue
        builds[label] = (br, src)
    todo = dict(builds)
    while todo:
        cands = [{"label": lb, "so_path": str(br.so_path), "nondeterministic": is_nondeterministic(src)}
                 for lb, (br, src) in todo.items()]
        try:
            res = evaluator.run_shape(shape, acc, cands, list(baselines))
        except WorkerError as e:
            text = str(e).splitlines()[0]
            if "no NVIDIA GPU found" in text:
                raise ToolMissing("no NVIDIA GPU found: " + text.split("no NVIDIA GPU found:", 1)[1].strip()[:200]) from None
            if e.label in todo:
                # the worker named the subject that broke the request: charge it, time the rest again
                br, _ = todo.pop(e.label)
                out[e.label] = Evaluation("timeout" if e.kind == "timeout" else "crashed", br, message=text[:300],
                                          extra={"label": "candidate"})
                continue
            # no culprit named: one request per candidate, so each failure is its own
            for lb, (_br, src) in todo.items():
                out[lb] = evaluator.evaluate(src, shape, acc, time_baselines=bool(baselines))
            break
        base = {b: v for b, v in (res.get("times_ms") or {}).items() if v is not None and b not in todo}
        n = len(todo)
        for lb, (br, _src) in todo.items():
            st = (res.get("status") or {}).get(lb, "crashed")
            chk = (res.get("checks") or {}).get(lb)
            t = (res.get("times_ms") or {}).get(lb)
            times = dict(base)
            if t is not None:
                times["candidate"] = t
            spread = {("candidate" if k == lb else k): v for k, v in (res.get("spread") or {}).items()
                      if v is not None and (k == lb or k in base)}
            extra = {k: res.get(k) for k in ("p90_ms", "clocks", "autotune", "cublas_variant", "bound", "absent",
                                             "errors", "phases")}
            # the request's worker time, shared equally by its candidates (a track's GPU time adds up)
            extra.update(label="candidate", mode=evaluator.mode or "offline", batch=n,
                         timing=evaluator.timing, seconds=(res.get("seconds") or 0.0) / n)
            chained = res.get("times_ms_chained") or {}
            if chained.get(lb) is not None:   # the back-to-back figure, when the timing asked for it
                extra["times_ms_chained"] = {"candidate": chained[lb],
                                             **{b: v for b, v in chained.items() if b in base and v is not None}}
            out[lb] = Evaluation(st, br, chk, times, spread, res.get("roofline_ms"), _msg(st, t, chk), extra)
        break
    return {label: out[label] for label, _, _ in items}
