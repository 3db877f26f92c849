"""What a candidate source may not call, checked before nvcc runs.

Why: the checks and the timing run a kernel the way the benchmark will, and a kernel that can
tell when it is being captured into a CUDA graph, read the environment or a file,
start host threads or streams of its own, read the GPU's global timer (how long ago it last ran
tells back-to-back timed calls apart), or hand the GEMM to cuBLAS, can behave differently
when measured than when used (or measure NVIDIA's library instead of itself). None of these has
a use in an HGEMM call under the kernel ABI (all work enqueued on the caller's stream, no waits),
so the build refuses them with the line and the reason, like a compile error the debugger can
fix. This is a cheap first layer, not a proof (names pasted together by macros get past it).

Comments and string literals are blanked first (keeping line and column), so a comment that
*mentions* ``cudaDeviceSynchronize`` is fine. Trusted sources (the cuBLAS shim, the exported
library's fallback) are built with ``trusted=True`` and skip this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    reason: str
    in_strings: bool = False      # also look inside string literals (inline PTX is a string)


def _r(name: str, pattern: str, reason: str, in_strings: bool = False) -> Rule:
    return Rule(name, re.compile(pattern), reason, in_strings)


RULES: tuple[Rule, ...] = (
    _r("capture-detection",
       r"\bcuda(StreamIsCapturing|StreamGetCaptureInfo\w*|ThreadExchangeStreamCaptureMode)\b"
       r"|\bcu(StreamIsCapturing|StreamGetCaptureInfo\w*|ThreadExchangeStreamCaptureMode)\b",
       "asks whether the stream is being captured into a graph: a kernel must behave the same when timed"),
    _r("entry-point-lookup", r"\bcudaGetDriverEntryPoint\w*\b|\bcuGetProcAddress\w*\b",
       "fetches driver functions by name, around this policy"),
    _r("host-sync",
       r"\bcuda(DeviceSynchronize|StreamSynchronize|EventSynchronize|ThreadSynchronize|StreamQuery|EventQuery)\b"
       r"|\bcuCtxSynchronize\b|\bcuStreamSynchronize\b",
       "waits on the GPU from the host: the ABI enqueues all work on `stream` and returns (a graph cannot capture a wait)"),
    _r("own-stream",
       r"\bcudaStreamCreate\w*\b|\bcuStreamCreate\w*\b|\bcudaStreamPerThread\b|\bcudaStreamLegacy\b"
       r"|\bcudaLaunchHostFunc\b|\bcudaStreamAddCallback\b",
       "uses a stream or host callback of its own: work off the caller's `stream` escapes its timing"),
    _r("host-io",
       r"\b(secure_)?getenv\b|\bfopen\b|\bfreopen\b|\b[io]?fstream\b|\bdlopen\b|\bdlsym\b|(?<![\w.])system\s*\("
       r"|\bpopen\b|(?<![\w.])fork\s*\(|\bexec[lv]p?e?\s*\(|\bstd::thread\b|\bpthread_create\b|\bstd::async\b",
       "reads the environment or files, or starts processes or threads: nothing a GEMM call needs, "
       "and a way to load precomputed results or recognise the harness"),
    _r("vendor-gemm", r"#\s*include\s*[<\"]\s*cublas\w*\.h|\bcublas\w*\s*\(|\bcublasLt\w*\b",
       "calls cuBLAS / cuBLASLt: a candidate computes the GEMM itself (the libraries are the baselines)"),
    _r("wall-clock", r"%%?globaltimer\w*|\b__globaltimer\b",
       "reads the GPU's global timer: a GEMM has no use for wall-clock time, and a kernel that knows how long "
       "ago it last ran can skip the work of back-to-back calls (the timed ones)", in_strings=True),
)


def blank_comments_and_strings(source: str, keep_strings: bool = False) -> str:
    """The source with comments, string and character literals replaced by spaces (newlines kept);
    with ``keep_strings`` only the comments."""
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        nxt = source[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = source.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and nxt == "*":
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in source[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            j = min(j + 1, n)
            if keep_strings or (c == '"' and _is_include(source, i)):
                out.append(source[i:j])  # keep #include "..." visible to the rules
            else:
                out.append(c + " " * max(0, j - i - 2) + (source[j - 1] if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _is_include(source: str, quote_at: int) -> bool:
    line_start = source.rfind("\n", 0, quote_at) + 1
    return re.match(r"\s*#\s*include\s*$", source[line_start:quote_at]) is not None


def violations(source: str) -> list[tuple[int, int, str]]:
    """(line, column, message) for every use of something a candidate may not call (1-based)."""
    texts = {False: blank_comments_and_strings(source), True: blank_comments_and_strings(source, keep_strings=True)}
    found: list[tuple[int, int, str]] = []
    for rule in RULES:
        text = texts[rule.in_strings]
        for m in rule.pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
            found.append((line, col, f"source policy ({rule.name}): `{m.group(0).strip()}` {rule.reason}"))
    found.sort()
    return found
