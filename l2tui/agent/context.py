"""Prompt context: role templates from ``prompts/`` filled from a :class:`TrackContext`.

Templates are plain Markdown with ``{{name}}`` placeholders (so CUDA braces in
the kernel never clash with the template syntax).  Unknown placeholders are an
error at load time, not a silent blank in a prompt.

Delayed profiling is enforced here too: ``{{profile}}`` renders NCU metrics
only when ``ctx.profiling_enabled`` and ``ctx.profile`` are set; before that the
prompt says profiling is not available yet, and holds no metrics at all.

The prompt is trimmed to ``context_tokens`` (about 4 characters a token):
the oldest history entries go first, then the compiler log.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import SupportsFloat

from ..paths import prompts_dir
from .policies.base import Attempt, Failure, TrackContext

ROLES = ("system", "planner", "coder", "debugger", "compiler")
PLACEHOLDERS = {
    "gpu", "arch", "abi", "problem", "step", "track", "kernel", "mode", "baseline", "timings", "roofline",
    "ptxas", "history", "profile", "hint", "feedback", "edit_format", "compiler", "allowed_flags", "flags",
    "failure_kind", "failure_message", "round", "max_rounds", "errors", "diff", "max_lines",
}
_PH_RE = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
CHARS_PER_TOKEN = 4

#: what each element type's kernel defines and takes: (entry point, element type, C++ type, header)
ELEMENT_TYPES = {
    "fp16": ("l2_hgemm", "fp16", "__half", "cuda_fp16.h"),
    "bf16": ("l2_hgemm_bf16", "bf16 (bfloat16)", "__nv_bfloat16", "cuda_bf16.h"),
}


def abi_text(dtype: str = "fp16") -> str:
    """The kernel contract told to the model, for the run's element type: a bf16 run's kernel
    defines ``l2_hgemm_bf16`` and an fp16 kernel would be refused at its build."""
    entry, elem, ctype, header = ELEMENT_TYPES[dtype]
    return (
        f'extern "C" int {entry}(const void* A, const void* B, void* C, int M, int N, int K, void* stream);\n'
        f"A is MxK row-major {elem}, B is KxN row-major {elem}, C is MxN row-major {elem}, overwritten (beta = 0).\n"
        + (f"The elements are {ctype} ({header}), accumulated in f32 and rounded to nearest into C.\n"
           if dtype == "bf16" else "")
        +         "Return 0 on success, non-zero if the shape is unsupported. Enqueue all work on `stream` (a cudaStream_t);\n"
        "no device-wide synchronisation and no per-call allocation after the first call. Padding, split-K and\n"
        "workspaces are the kernel's own business. CUTLASS/CuTe headers may be included.\n"
        "Checked on every run: A and B must stay bit for bit unchanged; every call must compute C from the inputs\n"
        "it is given (no reuse of an earlier call's result, even when the inputs look the same or calls come in\n"
        "quick succession: calls right after an input change are verified and timed); no host waits,\n"
        "streams or threads of its own, no graph-capture detection, no global-timer reads, no environment or file\n"
        "reads, no cuBLAS."
    )


#: the fp16 contract (the default run's)
ABI_TEXT = abi_text("fp16")

EDIT_FORMAT = """Answer with one or more SEARCH/REPLACE blocks, exactly like this:
<<<<<<< SEARCH
lines copied exactly from the current kernel (enough to match one place)
=======
the new lines
>>>>>>> REPLACE
Copy SEARCH lines verbatim (no line numbers). Change only what the plan needs."""


def rewrite_format(dtype: str = "fp16") -> str:
    """How to answer with a whole file, naming the entry point of the run's element type."""
    return ("Answer with the complete kernel file in ONE fenced block:\n```cuda\n"
            f'... the whole file, defining extern "C" int {ELEMENT_TYPES[dtype][0]}(...) ...\n```')


REWRITE_FORMAT = rewrite_format("fp16")


class PromptError(Exception):
    pass


@functools.lru_cache(maxsize=16)
def _load(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def template(role: str, directory: Path | None = None) -> str:
    """The template text of a role; unknown placeholders raise :class:`PromptError`."""
    d = directory or prompts_dir()
    p = d / f"{role}.md"
    try:
        text = _load(str(p))
    except OSError:
        raise PromptError(f"prompt template {p} missing: reinstall l2tui or restore prompts/{role}.md") from None
    bad = sorted(set(_PH_RE.findall(text)) - PLACEHOLDERS)
    if bad:
        raise PromptError(f"{p}: unknown placeholder(s) {', '.join(bad)}; allowed: {', '.join(sorted(PLACEHOLDERS))}")
    return text


def render(role: str, values: Mapping[str, object], directory: Path | None = None) -> str:
    text = template(role, directory)
    return _PH_RE.sub(lambda m: str(values.get(m.group(1), "")), text)


def numbered(source: str | None) -> str:
    if not source:
        return "(no kernel yet)"
    return "\n".join(f"{i:4d}| {line}" for i, line in enumerate(source.splitlines(), 1))


def _fmt_ms(v: object) -> str:
    """A time as the prompt shows it; ``n/a`` for anything that is not a number."""
    if not isinstance(v, (str, SupportsFloat)):
        return "n/a"
    try:
        return f"{float(v):.4f} ms"
    except (TypeError, ValueError):
        return "n/a"


def timings_text(ctx: TrackContext) -> str:
    if not ctx.times_ms:
        return "(not timed yet)"
    cand = ctx.times_ms.get("candidate")
    lines = []
    for label, ms in sorted(ctx.times_ms.items(), key=lambda kv: (kv[0] != "candidate", kv[0])):
        extra = ""
        if label != "candidate" and cand:
            try:
                extra = f"  (kernel speedup vs this: {float(ms) / float(cand):.3f}x)"
            except (TypeError, ValueError, ZeroDivisionError):
                extra = ""
        lines.append(f"- {label}: {_fmt_ms(ms)}{extra}")
    if ctx.speedup is not None:
        lines.append(f"Speedup over {ctx.baseline}: {ctx.speedup:.3f}x")
    return "\n".join(lines)


def history_text(history: list[Attempt], limit: int | None = None) -> str:
    items = history if limit is None else history[-limit:] if limit > 0 else []
    if not items:
        return "(none yet)"
    out = []
    skipped = len(history) - len(items)
    if skipped > 0:
        out.append(f"({skipped} older entries omitted)")
    for a in items:
        sp = f", speedup {a.speedup:.3f}x" if a.speedup is not None else ""
        acc = " [new best]" if a.accepted else ""
        plan = " ".join((a.plan or a.origin).split())[:200]
        note = f" - {a.note}" if a.note else ""
        out.append(f"- step {a.step} ({a.origin}): {plan} => {a.kind}{sp}{acc}{note}")
    return "\n".join(out)


def profile_text(ctx: TrackContext) -> str:
    if not ctx.profiling_enabled or not ctx.profile:
        return "(not available yet: profiling enters the context once the kernel's structure has stabilised)"
    p = ctx.profile
    lines = [f"Bottleneck verdict: {p.get('verdict', 'unknown')}"]
    for name, m in (p.get("metrics") or {}).items():
        if isinstance(m, dict):
            lines.append(f"- {name}: {m.get('value')} {m.get('unit') or ''}".rstrip())
        else:
            lines.append(f"- {name}: {m}")
    return "\n".join(lines)


def ptxas_text(ptxas: dict | None) -> str:
    if not ptxas:
        return "(none)"
    return (f"{ptxas.get('registers', '?')} registers, {ptxas.get('smem_bytes', '?')} B shared memory, "
            f"spills {ptxas.get('spill_store_bytes', 0)} B store / {ptxas.get('spill_load_bytes', 0)} B load, "
            f"stack {ptxas.get('stack_bytes', 0)} B")


def problem_text(ctx: TrackContext) -> str:
    s = ctx.shape
    acc = "fp32 accumulation" if ctx.acc == "f32" else "fp16 accumulation"
    return f"M={s.m}, N={s.n}, K={s.k}, {ELEMENT_TYPES[ctx.dtype][1]} inputs and output, {acc}"


def base_values(ctx: TrackContext, gpu: dict | None = None) -> dict[str, object]:
    gpu = gpu or {}
    return {
        "gpu": gpu.get("name") or "NVIDIA GPU",
        "arch": ctx.arch or gpu.get("arch") or "sm_90a",
        "abi": abi_text(ctx.dtype),
        "problem": problem_text(ctx),
        "step": ctx.step,
        "track": ctx.track,
        "kernel": numbered(ctx.source),
        "mode": ctx.mode,
        "baseline": ctx.baseline,
        "timings": timings_text(ctx),
        "roofline": _fmt_ms(ctx.roofline_ms) if ctx.roofline_ms else "(unknown)",
        "ptxas": ptxas_text(ctx.ptxas),
        "history": history_text(ctx.history),
        "profile": profile_text(ctx),
        "hint": ctx.hint or "(none)",
        "feedback": f"\nYour previous answer could not be used: {ctx.feedback}\n" if ctx.feedback else "",
        "edit_format": EDIT_FORMAT,
        "allowed_flags": " ".join(ctx.allowed_flags) or "(none)",
        "flags": " ".join(ctx.flags) or "(none)",
    }


def estimate_tokens(messages: list[dict]) -> int:
    return sum(len(str(m.get("content", ""))) for m in messages) // CHARS_PER_TOKEN + 4 * len(messages)


def planner_messages(ctx: TrackContext, *, context_tokens: int, gpu: dict | None = None) -> list[dict]:
    """System + planner prompt, trimmed to the token budget (oldest history first)."""
    v = base_values(ctx, gpu)
    system = render("system", v)
    limit: int | None = None
    while True:
        v["history"] = history_text(ctx.history, limit)
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": render("planner", v)}]
        if estimate_tokens(msgs) <= context_tokens or limit == 0:
            return msgs
        limit = len(ctx.history) // 2 if limit is None else limit // 2


def coder_followup(ctx: TrackContext, *, rewrite: bool) -> str:
    v = base_values(ctx)
    v["edit_format"] = rewrite_format(ctx.dtype) if rewrite else EDIT_FORMAT
    v["compiler"] = render("compiler", v)
    return render("coder", v)


def seed_messages(ctx: TrackContext, gpu: dict | None = None) -> list[dict]:
    """First generation (no kernel yet): a whole file."""
    v = base_values(ctx, gpu)
    v["edit_format"] = rewrite_format(ctx.dtype)
    v["compiler"] = render("compiler", v)
    user = (
        "ROLE: coder\n\nWrite a first, correct and reasonably fast HGEMM kernel for "
        f"{problem_text(ctx)}. Put its tunable constants between `// l2: knobs begin` and "
        "`// l2: knobs end` as #define lines.\n\n" + rewrite_format(ctx.dtype)
    )
    return [{"role": "system", "content": render("system", v)}, {"role": "user", "content": user}]


def debugger_messages(ctx: TrackContext, failure: Failure, *, max_rounds: int, max_lines: int,
                      context_tokens: int, diff: str = "", gpu: dict | None = None) -> list[dict]:
    v = base_values(ctx, gpu)
    v.update(
        failure_kind=failure.kind,
        failure_message=failure.message,
        round=failure.round,
        max_rounds=max_rounds,
        kernel=numbered(failure.source),
        diff=diff or "(no diff available)",
        max_lines=max_lines,
        feedback=f"\nYour previous fix was rejected: {failure.feedback}\n" if failure.feedback else "",
    )
    errors = failure.log or ""
    if failure.errors:
        errors = "\n".join(_err_line(e) for e in failure.errors[:30])
    if failure.check and not failure.errors:
        c = failure.check
        errors = (f"check {c.get('failed')!r} failed: {c.get('detail', '')}\n"
                  f"relative error {c.get('rel_err')} (bound {c.get('bound')})")
    system = render("system", v)
    budget_chars = max(2000, context_tokens * CHARS_PER_TOKEN - len(system) - 6000)
    v["errors"] = errors[:budget_chars] or "(no diagnostics)"
    return [{"role": "system", "content": system}, {"role": "user", "content": render("debugger", v)}]


def _err_line(e: object) -> str:
    if isinstance(e, dict):
        loc = e.get("file", "")
        if e.get("line") is not None:
            loc += f":{e['line']}"
        return f"{loc}: {e.get('severity', 'error')}: {e.get('message', '')}"
    return str(e)
