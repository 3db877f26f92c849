"""What a candidate source may not call, checked before nvcc runs.

Why: the checks and the timing run a kernel the way the benchmark will, and a kernel that can
tell when it is being captured into a CUDA graph, read the environment or a file,
start host threads or streams of its own, read the GPU's global timer (how long ago it last ran
tells back-to-back timed calls apart), or hand the GEMM to cuBLAS, can behave differently
when measured than when used (or measure NVIDIA's library instead of itself); one that changes
state outliving the call (an L2 access-policy window on the caller's stream, the device's L2
set-aside or limits) acts on the libraries timed after it. None of these has
a use in an HGEMM call under the kernel ABI (all work enqueued on the caller's stream, no waits),
so the build refuses them with the line and the reason, like a compile error the debugger can
fix.

Host code in a candidate also runs when the library is *loaded* (constructors, static
initialisers) and can reach the system by other names than the obvious ones, so the policy
refuses: the forbidden functions as names anywhere (a call through parentheses or a pointer,
``(system)(...)`` or ``&system``, names them too), names built by the preprocessor (``##``,
line splicing, universal character names, digraphs, ``_Pragma``), load-time code
(``constructor``/``destructor``/``init_priority``/``section`` attributes, ``.init_array`` in
asm, namespace-scope objects with dynamic initialisers), symbol renaming (asm labels, ``alias``,
``#pragma redefine_extname``), raw system calls (``syscall``, ``svc``, ``int $0x80`` in asm), and
any include that is absolute, climbs with ``..``, is computed by a macro, or names a system
header for files, processes or sockets. This is a fast first layer, not a proof (a pointer
computed from another function's address names nothing); the OS sandbox
(:mod:`harness.sandbox`) is the wall.

Comments and string literals are blanked first (keeping line and column), so a comment that
*mentions* ``cudaDeviceSynchronize`` is fine. Trusted sources (the cuBLAS shim, the exported
library's fallback) are built with ``trusted=True`` and skip this.
"""

from __future__ import annotations

import functools
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
    _r("lasting-state",
       r"\bcuda(StreamSetAttribute|StreamCopyAttributes|CtxResetPersistingL2Cache|DeviceSetLimit"
       r"|DeviceSetCacheConfig|DeviceSetSharedMemConfig|DeviceSetMemPool|DeviceSetGraphMemAttribute|SetDevice"
       r"|SetDeviceFlags|DeviceReset)\b"
       r"|\bcu(StreamSetAttribute|StreamCopyAttributes|CtxResetPersistingL2Cache|CtxSetLimit|CtxSetCacheConfig"
       r"|CtxSetSharedMemConfig|DeviceSetMemPool|CtxSetCurrent|CtxPushCurrent|CtxPopCurrent|DevicePrimaryCtxReset"
       r"|DevicePrimaryCtxSetFlags)\w*\b",
       "changes state that outlives the call (the caller's stream attributes, such as an L2 access-policy "
       "window, the device's limits, L2 set-aside or cache split, the current device or context): it would act on "
       "whatever runs next, the libraries it is compared with included; per-launch attributes "
       "(cudaLaunchKernelEx) and the kernel's own function attributes are the ways a GEMM sets what it needs"),
    _r("host-io",
       r"(?<![\w.>])(?:(?:secure_)?getenv|environ|__environ|setenv|putenv|unsetenv|clearenv"
       r"|f?open(?:64)?|openat2?|freopen|fdopen|creat|unlink(?:at)?|remove|rename(?:at2?)?|rmdir|mkdir|mkfifo"
       r"|symlink|link|chmod|chown|truncate|ftruncate|mmap|mprotect|read|write|pread|pwrite|dup[23]?|ioctl|fcntl"
       r"|opendir|readdir|stat|lstat|fstatat|access|chdir|ptrace|process_vm_\w+|prctl)\b"
       r"|\b[io]?fstream\b|\bfilesystem\b|\bdl(?:open|mopen|sym|vsym|info|error)\b",
       "reads the environment or files: nothing a GEMM call needs, and a way to load precomputed results "
       "or recognise the harness"),
    _r("process",
       r"(?<![\w.>])(?:system|popen|pclose|v?fork|clone3?|exec(?:l|lp|le|v|vp|vpe|ve)|fexecve|posix_spawnp?"
       r"|kill|raise|signal|sigaction|pthread_\w+)\b|\bstd::(?:thread|async|jthread)\b",
       "starts processes or threads, or sends signals: nothing a GEMM call needs"),
    _r("network",
       r"(?<![\w.>])(?:socket|socketpair|connect|bind|listen|accept4?|send|sendto|sendmsg|recv|recvfrom|recvmsg"
       r"|getaddrinfo|gethostbyname\w*|inet_\w+|htons|htonl)\b",
       "uses the network: nothing a GEMM call needs"),
    _r("raw-syscall", r"(?<![\w.>])(?:syscall|__syscall\w*|_syscall\d*)\b",
       "makes a raw system call, around every rule about what a candidate may call"),
    _r("raw-syscall-asm", r"\b(?:syscall|sysenter|svc|int\s*\$?0x80)\b",
       "makes a raw system call from inline assembly", in_strings=True),
    _r("load-time-code",
       r"\.init_array|\.fini_array|\.preinit_array|\.ctors\b|\.dtors\b|\.(?:push)?section\b",
       "places code or data in a section the loader runs or that the compiler does not choose", in_strings=True),
    _r("name-building",
       r"##|%:|\?\?[=/'()!<>-]|\\[uU][0-9A-Fa-f]|\b_Pragma\b|\b__pragma\b",
       "builds names or directives in the preprocessor (token pasting, digraphs, trigraphs, universal "
       "character names, _Pragma), which is how forbidden names get past this policy"),
    _r("load-time-attribute",
       r"\b_*(?:constructor|destructor|init_priority|weakref|ifunc|symver)_*\b|\b_*(?:section|alias)_*\s*\(",
       "runs code when the library is loaded or unloaded (constructor / destructor / init_priority), or "
       "places or aliases a symbol: the harness loads a candidate to time it, and nothing may run then"),
    _r("symbol-alias",
       r"\)\s*(?:__asm__|__asm|asm)\s*\(|#\s*pragma\s+(?:redefine_extname|weak|init|fini|section)\b",
       "renames or aliases a symbol (an asm label or a pragma), so a harmless name can stand for a forbidden one"),
    _r("directive",
       r"(?m)#\s*(?:line|include_next|import|embed)\b|^[ \t]*#[ \t]*\d",
       "rewrites file names or line numbers, or includes past the include path: diagnostics must point at the "
       "kernel's own lines"),
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
    """(line, column, message) for every use of something a candidate may not call (1-based).

    Memoised on the text (the rules are fixed for the process): a sweep asks again for every
    catalog source on every shape, and one CUTLASS render takes tens of milliseconds to scan."""
    return list(_violations(source))


@functools.lru_cache(maxsize=1024)
def _violations(source: str) -> tuple[tuple[int, int, str], ...]:
    texts = {False: blank_comments_and_strings(source), True: blank_comments_and_strings(source, keep_strings=True)}
    found: list[tuple[int, int, str]] = []
    for rule in RULES:
        text = texts[rule.in_strings]
        for m in rule.pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
            found.append((line, col, f"source policy ({rule.name}): `{m.group(0).strip()}` {rule.reason}"))
    found += _splice_violations(texts[False])
    found += _include_violations(texts[True])
    found += _static_init_violations(texts[False])
    found.sort()
    return tuple(found)


def _splice_violations(text: str) -> list[tuple[int, int, str]]:
    """Backslash-newline joins two lines before anything else is read (``sys\\`` + ``tem`` is
    ``system``). A continued preprocessor line ending in `` \\`` is fine; a splice anywhere else,
    or one that joins two halves of a word, is refused."""
    out = []
    lines = text.split("\n")
    in_directive = False
    for no, ln in enumerate(lines, 1):
        starts = in_directive or ln.lstrip().startswith("#")
        if ln.endswith("\\"):
            nxt = lines[no] if no < len(lines) else ""
            joins_word = len(ln) >= 2 and (ln[-2].isalnum() or ln[-2] == "_") and nxt[:1].isalnum() | (nxt[:1] == "_")
            if not starts or joins_word:
                out.append((no, len(ln), "source policy (name-building): a backslash at the end of a line splices it "
                                         "to the next, which can build a forbidden name; end a continued #define line "
                                         "with ' \\' and split nothing else"))
            in_directive = starts
        else:
            in_directive = False
    return out


# --------------------------------------------------------------------------- includes

_INCLUDE_RE = re.compile(r"(?m)^[ \t]*#[ \t]*include\b[ \t]*(.*)$")
_INCLUDE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./+-]*$")
#: system headers for files, processes, threads, signals, sockets and the loader
_DENIED_HEADERS = re.compile(
    r"^(?:filesystem|fstream|thread|future|dlfcn\.h|unistd\.h|spawn\.h|fcntl\.h|pthread\.h|dirent\.h|link\.h"
    r"|signal\.h|csignal|syscall\.h|netdb\.h|ifaddrs\.h|poll\.h|(?:sys|netinet|arpa|net|linux|asm|bits)/.*)$")
_QUOTED_OK = ("cutlass/", "cute/")


def _include_violations(text: str) -> list[tuple[int, int, str]]:
    """Includes name a header on the include path: ``<...>`` (CUDA, CUTLASS / CuTe, the C++ library)
    or ``"cutlass/..."`` / ``"cute/..."``; never an absolute path, a ``..``, a macro, or a system
    header for files, processes or sockets."""
    out = []
    for m in _INCLUDE_RE.finditer(text):
        arg = m.group(1).strip()
        line = text.count("\n", 0, m.start()) + 1
        col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
        why = None
        if arg[:1] == "<" and ">" in arg:
            name, quoted = arg[1:arg.index(">")], False
        elif arg[:1] == '"' and arg.count('"') >= 2:
            name, quoted = arg[1:arg.index('"', 1)], True
        else:
            name, quoted = "", False
            why = "computes the header's name with a macro"
        if why is None:
            if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
                why = "includes an absolute path"
            elif ".." in name.split("/"):
                why = "climbs out of the include path with '..'"
            elif not _INCLUDE_NAME.match(name):
                why = "names a header with characters a header name does not have"
            elif quoted and not name.startswith(_QUOTED_OK):
                why = 'uses a quoted include for something other than CUTLASS / CuTe (use <...>)'
            elif _DENIED_HEADERS.match(name):
                why = "includes a system header for files, processes, signals or sockets"
        if why:
            shown = arg if len(arg) <= 60 else arg[:57] + "..."
            out.append((line, col, f"source policy (include): `#include {shown}` {why}: a candidate includes "
                                   f"only CUDA, CUTLASS / CuTe and C++ library headers"))
    return out


# --------------------------------------------------------------------------- static initialisers

_SCALAR_WORDS = frozenset("""
static const volatile extern inline unsigned signed int long short char float double bool void size_t ptrdiff_t
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t half __half __nv_bfloat16
cudaStream_t cudaEvent_t dim3 std auto
""".split())
_DEVICE_OR_CONST = re.compile(r"\b(?:constexpr|constinit|__constant__|__device__|__shared__|__managed__|__grid_constant__)\b")
_SKIP_HEAD = re.compile(r"^\s*(?:typedef|using|template|static_assert|friend|namespace|enum|#)\b")
_CALL = re.compile(r"(?<![\w.])(?!(?:sizeof|alignof|decltype|static_cast|reinterpret_cast|const_cast|noexcept)\b)"
                   r"[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*\s*(?:<[^;{}()]*>)?\s*[({]")
#: a call through a parenthesised or subscripted expression: ``(boot)()``, ``table[0]()``
_EXPR_CALL = re.compile(r"[)\]]\s*\(")
_ACCESS = re.compile(r"^\s*(?:(?:public|private|protected)\s*:\s*)+")
_LAMBDA = re.compile(r"\]\s*(?:\([^;]*?\))?\s*(?:mutable\s*)?(?:->[^;{]*)?\{")


def _blank_directives(text: str) -> str:
    """Preprocessor lines (and their continuations) replaced by spaces, newlines kept."""
    out = []
    cont = False
    for ln in text.split("\n"):
        if cont or ln.lstrip().startswith("#"):
            cont = ln.endswith("\\")
            out.append(" " * len(ln))
        else:
            out.append(ln)
    return "\n".join(out)


def _namespace_statements(text: str) -> list[tuple[int, str]]:
    """(offset, text) of each statement at namespace scope (file scope, ``namespace {}``,
    ``extern "C" {}``), brace blocks included; function definitions are not statements."""
    stmts: list[tuple[int, str]] = []
    kinds: list[str] = []          # "ns" or "other" per open brace
    start = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        at_ns = all(k == "ns" for k in kinds)
        if c == "{":
            head = text[start:i] if at_ns else ""
            if at_ns and (re.search(r"\bnamespace\b[^;=]*$", head) or re.search(r'\bextern\s*"[^"]*"\s*$', head)):
                kinds.append("ns")
                start = i + 1
            else:
                kinds.append("other")
        elif c == "}":
            kind = kinds.pop() if kinds else "ns"
            if kind == "ns":
                start = i + 1
            elif all(k == "ns" for k in kinds):
                head = text[start:i + 1]
                # a function body ends its definition; a class body or an initialiser goes on to ';'
                pre = head[:head.find("{")] if "{" in head else head
                if re.search(r"\)\s*(?:const|noexcept|override|final|->[^{]*|__\w+__(?:\([^)]*\))?|\s)*$", pre) \
                        and "=" not in pre:
                    start = i + 1
        elif c == ";" and at_ns:
            stmts.append((start, text[start:i]))
            start = i + 1
        i += 1
    return stmts


def _is_function_declaration(stmt: str) -> bool:
    m = re.search(r"([A-Za-z_]\w*)\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*(?:const|noexcept|throw\s*\(\s*\)|\s)*$", stmt)
    if not m or "=" in stmt[:m.start()]:
        return False
    params = m.group(2).strip()
    if params in ("", "void"):
        return True
    for prm in params.split(","):
        toks = re.findall(r"[A-Za-z_]\w*|[*&]", prm)
        if not toks or re.search(r"\d|\"|'", prm):
            return False
        if len(toks) == 1 and toks[0] not in _SCALAR_WORDS:
            return False        # Foo f(x): an object constructed from x
    return True


def _calls_something(init: str) -> bool:
    """Whether an initialiser's text calls a function (by name, through an expression, or a
    constructor named with arguments); functional casts to a scalar type are not calls."""
    if _EXPR_CALL.search(init):
        return True
    return any(m.group(0).split("(")[0].split("{")[0].split("<")[0].strip() not in _SCALAR_WORDS
               for m in _CALL.finditer(init))


def _strip_template_heads(body: str) -> str | None:
    """The declaration after its ``template<...>`` heads, or None for an explicit instantiation
    or specialisation head without parameters (its definition is checked where it stands)."""
    rest = body
    while rest.startswith("template"):
        after = rest[len("template"):].lstrip()
        if not after.startswith("<"):
            return None                       # ``template int tv<0>;``: an explicit instantiation
        depth = 0
        for i, c in enumerate(after):
            depth += (c == "<") - (c == ">")
            if depth == 0:
                rest = after[i + 1:].lstrip()
                break
        else:
            return None
    return rest


def _class_body(body: str) -> str | None:
    """The text between the braces of a class definition statement, else None."""
    if not re.match(r"^(?:struct|class|union)\b[^{=;]*\{", body):
        return None
    return body[body.index("{") + 1:body.rindex("}")] if "}" in body else None


def _static_member_why(stmt: str) -> str | None:
    """Why a class member statement runs code at load time (a static data member whose
    initialiser calls something, or an inline static object of a class type), else None."""
    body = _ACCESS.sub("", stmt).strip()
    if not re.match(r"^(?:inline\s+)?static\b|^static\b", body) or _DEVICE_OR_CONST.search(body):
        return None
    if _is_function_declaration(body):
        return None                           # a static member function
    decl, eq, init = body.partition("=")
    if _LAMBDA.search(body):
        return "is initialised by a lambda"
    if eq and _calls_something(init):
        return "has an initialiser that calls a function"
    if "{" in decl and _calls_something(decl[decl.index("{"):]):
        return "has an initialiser that calls a function"
    if re.search(r"\binline\b", decl):
        words = re.findall(r"[A-Za-z_]\w*", re.split(r"[({\[]", decl, maxsplit=1)[0])
        if "*" not in decl and any(w not in _SCALAR_WORDS for w in words[:-1]):
            return "is an object of a class type (its constructor runs)"
        if "(" in decl:
            return "is constructed with arguments"
    return None


def _member_violations(text: str, body: str, offset: int) -> list[tuple[int, int, str]]:
    """Static data members of a class defined at namespace scope (and of the classes nested in it)."""
    inner = _class_body(body)
    if inner is None:
        return []
    base = offset + body.index("{") + 1
    out = []
    for off, stmt in _namespace_statements(inner):
        member = _ACCESS.sub("", stmt).strip()
        if _class_body(member) is not None:
            out += _member_violations(text, member, base + off + stmt.index(member[:1]))
            continue
        why = _static_member_why(stmt)
        if why:
            out.append(_finding(text, base + off, stmt, why, "a static data member"))
    return out


def _finding(text: str, off: int, stmt: str, why: str, what: str) -> tuple[int, int, str]:
    lead = len(stmt) - len(stmt.lstrip())
    pos = off + lead
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    first = stmt.strip().splitlines()[0].strip()
    shown = first if len(first) <= 60 else first[:57] + "..."
    return (line, col, f"source policy (static-init): `{shown}` {why}: {what} initialised at load time runs "
                       f"code before anything is measured; make it constexpr, a plain value, or a static "
                       f"inside l2_hgemm")


def _object_why(body: str) -> str | None:
    """Why a namespace-scope declaration runs code at load time, else None."""
    decl, _, init = body.partition("=")
    if _LAMBDA.search(body):
        return "is initialised by a lambda"
    if init and _calls_something(init):
        return "has an initialiser that calls a function"
    if init and re.fullmatch(r"\s*(?:nullptr|NULL|[-+]?[\d.]+[uUlLfF]*|true|false)\s*", init):
        return None          # a constant: no code runs
    head = re.split(r"[({\[]", decl, maxsplit=1)[0]
    words = re.findall(r"[A-Za-z_]\w*", head)
    if "*" not in head and words[:-1] and any(w not in _SCALAR_WORDS for w in words[:-1]):
        return "is an object of a class type (its constructor runs)"
    if "{" in decl and _calls_something(decl[decl.index("{"):]):
        return "has an initialiser that calls a function"
    if "(" in decl and not _is_function_declaration(body):
        return "is constructed with arguments"
    return None


def _static_init_violations(text: str) -> list[tuple[int, int, str]]:
    """Namespace-scope objects whose initialisation runs code when the library is loaded: an
    initialiser that calls something (by name or through an expression, ``(boot)()``) or is a
    lambda, an object of a class type (its constructor), a variable template so initialised
    (``template<int N> int tv = f();``), and a class's static data member so initialised
    (``static inline int v = f();``). Function-local statics are fine (they are initialised on
    the first call)."""
    text = _blank_directives(text)
    out = []
    for off, stmt in _namespace_statements(text):
        body = stmt.strip()
        if body.startswith("template"):
            stripped = _strip_template_heads(body)
            if stripped is None:
                continue
            off += stmt.index(body) + (len(body) - len(stripped))
            stmt = body = stripped
        if not body or _SKIP_HEAD.match(body):
            continue
        if _class_body(body) is not None:
            out += _member_violations(text, body, off + stmt.index(body[:1]))
            declarators = body[body.rindex("}") + 1:].strip()
            if declarators and not _DEVICE_OR_CONST.search(body):
                out.append(_finding(text, off, stmt, "is an object of a class type (its constructor runs)",
                                    "a namespace-scope object"))
            continue
        if _DEVICE_OR_CONST.search(body):
            continue
        if re.match(r"^(?:struct|class|union)\s+\w+\s*$", body):
            continue            # a forward declaration, no object
        if re.match(r'^extern\b(?!\s*"[^"]*"\s*\{)', body) and "=" not in body:
            continue            # a declaration of something defined elsewhere
        if _is_function_declaration(body):
            continue
        why = _object_why(body)
        if why:
            out.append(_finding(text, off, stmt, why, "a namespace-scope object"))
    return out
