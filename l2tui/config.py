"""``l2tui.toml``: loading, defaults and validation.

Looked for in the working directory, then the user config dir
(:func:`l2tui.paths.config_search_path`); the first file that exists wins and
missing keys take the defaults below.  Every unknown key and every bad value is
a :class:`~l2tui.errors.ConfigError` whose one-line message names the file, the
``[section] key`` and what is allowed, because a silently ignored typo in a
budget or an endpoint costs an engineer an afternoon.

Secrets are never read from a config file: the LLM API key comes from the
environment variable named by ``[llm] api_key_env``.  :meth:`Config.snapshot`
is what sessions store.

The schema (:data:`SCHEMA`) is also the documentation source for
``l2tui.example.toml`` (a test checks they agree).
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, TypeAlias

from .errors import ConfigError

try:
    import tomllib as tomllib  # type: ignore[import-not-found]  # re-exported: l2tui's TOML reader
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


#: one section's validated values, key -> value. Each key's type is what its :class:`Key` checker
#: returns (an int budget, a string URL, a list of baseline names...), so a reader of
#: ``cfg.loop["max_steps"]`` knows its type from :data:`SCHEMA`, not from this mapping; the values
#: are left untyped to mypy so that callers need no cast for a key whose check already fixed its type.
Section: TypeAlias = "dict[str, Any]"


# ---------------------------------------------------------------------------- validators
# Each returns the normalised value or raises ValueError("what is allowed").

def _int(lo: int | None = None, hi: int | None = None) -> Callable[[object], int]:
    def v(x: object) -> int:
        if isinstance(x, bool) or not isinstance(x, int):
            raise ValueError(f"expected an integer{_range(lo, hi)}")
        if (lo is not None and x < lo) or (hi is not None and x > hi):
            raise ValueError(f"expected an integer{_range(lo, hi)}")
        return x
    return v


def _float(lo: float | None = None, hi: float | None = None) -> Callable[[object], float]:
    def v(x: object) -> float:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(float(x)):
            raise ValueError(f"expected a number{_range(lo, hi)}")
        x = float(x)
        if (lo is not None and x < lo) or (hi is not None and x > hi):
            raise ValueError(f"expected a number{_range(lo, hi)}")
        return x
    return v


def _range(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f" between {lo} and {hi}"
    if lo is not None:
        return f" >= {lo}"
    if hi is not None:
        return f" <= {hi}"
    return ""


def _str(nonempty: bool = False) -> Callable[[object], str]:
    def v(x: object) -> str:
        if not isinstance(x, str) or (nonempty and not x.strip()):
            raise ValueError("expected a non-empty string" if nonempty else "expected a string")
        return x
    return v


def _bool(x: object) -> bool:
    if not isinstance(x, bool):
        raise ValueError("expected true or false")
    return x


def _choice(*options: str) -> Callable[[object], str]:
    def v(x: object) -> str:
        if not isinstance(x, str) or x not in options:
            raise ValueError(f"expected one of {', '.join(repr(o) for o in options)}")
        return x
    return v


def _str_list(options: tuple[str, ...] | None = None) -> Callable[[object], list[str]]:
    def v(x: object) -> list[str]:
        if not isinstance(x, list) or not all(isinstance(i, str) for i in x):
            raise ValueError("expected a list of strings")
        if options is not None:
            bad = [i for i in x if i not in options]
            if bad:
                raise ValueError(f"item {x.index(bad[0]) + 1} is not one of {', '.join(options)}")
        return list(x)
    return v


def _url(x: object) -> str:
    if not isinstance(x, str) or not (x.startswith("http://") or x.startswith("https://")):
        raise ValueError("expected an http:// or https:// URL, e.g. https://api.openai.com/v1")
    return x.rstrip("/")


def _env_name(x: object) -> str:
    import re

    if not isinstance(x, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", x):
        raise ValueError("expected the NAME of an environment variable, e.g. OPENAI_API_KEY (not the key itself)")
    return x


#: upper bounds of the budgets: far beyond any real run, low enough that a typo (``1e20``) or a
#: hostile config is one clear line instead of a run that never ends or an overflow deep inside
MAX_STEPS = 100_000
DAY_S = 86_400.0
MAX_WALL_S = 30 * DAY_S
MAX_TOKENS = 10_000_000
MAX_TOKEN_BUDGET = 10**12
#: the LLM reply cap in characters (``[llm] max_reply_chars``) and its bounds
REPLY_CAP_CHARS = 512 * 1024
REPLY_CAP_MIN_CHARS = 16 * 1024
REPLY_CAP_MAX_CHARS = 8 * 1024 * 1024

def _theme(x: object) -> str:
    name = _str(True)(x)
    from textual.theme import BUILTIN_THEMES

    if name not in BUILTIN_THEMES:
        raise ValueError(f"not a Textual theme; use one of: {', '.join(sorted(BUILTIN_THEMES))}")
    return name


BASELINES = ("cublas", "cublaslt_heuristic", "cublaslt_autotune", "torch")
FAILURE_KINDS = ("no_patch", "patch_failed", "compile_error", "wrong", "crashed", "timeout", "unsupported")


@dataclass(frozen=True)
class Key:
    default: object
    check: Callable[[object], object]
    doc: str


# [section] -> key -> Key.  Order here is the order of l2tui.example.toml.
SCHEMA: dict[str, dict[str, Key]] = {
    "llm": {
        "base_url": Key("https://api.openai.com/v1", _url, "OpenAI-compatible endpoint (vLLM, SGLang, Ollama, a proxy...)"),
        "model": Key("gpt-4.1", _str(True), "model name sent with every request"),
        "api_key_env": Key("OPENAI_API_KEY", _env_name, "NAME of the environment variable holding the API key (the key itself is never stored)"),
        "timeout_s": Key(120.0, _float(0.1, DAY_S), "seconds one request may take, streaming included, before it is abandoned (then retried)"),
        "max_retries": Key(4, _int(0, 20), "retries on HTTP 429 / 5xx / timeouts / connection errors"),
        "backoff_s": Key(1.0, _float(0.0, 600.0), "first retry delay; doubles every retry (capped at 60 s; Retry-After honoured)"),
        "temperature": Key(0.2, _float(0.0, 2.0), "sampling temperature"),
        "max_tokens": Key(4096, _int(1, MAX_TOKENS), "completion token limit per call"),
        "stream": Key(True, _bool, "stream tokens (shown live as llm_delta events)"),
        "max_reply_chars": Key(REPLY_CAP_CHARS, _int(REPLY_CAP_MIN_CHARS, REPLY_CAP_MAX_CHARS),
                               "a reply longer than this many characters is refused and reading stops there"),
    },
    "loop": {
        "max_steps": Key(20, _int(1, MAX_STEPS), "refinement steps per track"),
        "debug_rounds": Key(3, _int(0, 20), "debug attempts for a failing candidate before it is dropped"),
        "profile_after": Key(6, _int(0, MAX_STEPS), "delayed profiling: NCU metrics enter the context after this many refinement steps (0 = from the start)"),
        "stable_steps": Key(3, _int(0, MAX_STEPS), "delayed profiling also triggers when the kernel's structure did not change for this many steps (0 = off)"),
        "wall_time_s": Key(0.0, _float(0.0, MAX_WALL_S), "wall-time budget per track in seconds (0 = unlimited)"),
        "token_budget": Key(0, _int(0, MAX_TOKEN_BUDGET), "LLM token budget per track (prompt + completion; 0 = unlimited)"),
        "global_wall_time_s": Key(0.0, _float(0.0, MAX_WALL_S), "wall-time budget for the whole run (0 = unlimited)"),
        "global_token_budget": Key(0, _int(0, MAX_TOKEN_BUDGET), "LLM token budget for the whole run (0 = unlimited)"),
        "context_tokens": Key(24000, _int(1000, MAX_TOKENS), "prompt size cap; the history is trimmed first (about 4 characters a token)"),
        "debug_max_lines": Key(40, _int(1, 100_000), "debugger patches may change at most this many lines"),
        "seed": Key("", _str(), "seed kernel: a .cu path or a harness family name ('' = the policy's default)"),
        "known": Key(True, _bool, "start every track from the known kernels for its shape (harness.known) and "
                     "record each finished track's verified best into the local layer"),
        "allowed_flags": Key(["-O3", "-O2", "-maxrregcount=255", "-maxrregcount=168", "-maxrregcount=128", "-Xptxas=-v", "--use_fast_math"],
                             _str_list(), "nvcc flags the compiler role may choose from"),
        "acc": Key("f32", _choice("f32", "f16"), "default accumulator of new tracks"),
        "dtype": Key("fp16", _choice("fp16", "bf16"), "element type of A, B and C (bf16 accumulates in f32 only)"),
        "telemetry_s": Key(5.0, _float(0.0, DAY_S), "seconds between NVML telemetry events in the session (0 = none; needs a GPU)"),
        "parallel_tracks": Key(4, _int(1, 1024), "tracks worked on at once (round-robin between stages); the rest wait queued"),
    },
    "harness": {
        "baselines": Key(list(BASELINES), _str_list(BASELINES), "baselines timed next to every candidate"),
        "baseline": Key("cublas", _choice(*BASELINES), "the baseline rewards and speedups are measured against"),
        "mode": Key("offline", _choice("offline", "server"), "timing mode: offline (device time) or server (Poisson arrivals, host time)"),
        "timing": Key("isolated", _choice("isolated", "chained", "both"),
                      "offline timing: isolated = per call, each call after an unrelated kernel (the headline); "
                      "chained = back to back (a pipeline figure); both = each way, per call first"),
        "arch": Key("", _str(), "GPU architecture, e.g. sm_90a ('' = detect)"),
        "timeout_s": Key(60.0, _float(1.0, DAY_S), "seconds one GPU evaluation may take before it counts as a timeout"),
    },
    "rewards": {
        "error_weight": Key(0.5, _float(0.0), "penalty per unit of log10(rel_err / baseline rel_err) above the baseline's error"),
        "length_weight": Key(0.1, _float(0.0), "penalty per 100% of code length above the seed's (in lines)"),
        "no_patch": Key(-1.0, _float(), "reward of a step whose reply held no usable code"),
        "patch_failed": Key(-0.8, _float(), "reward of a patch that did not apply or was rejected"),
        "compile_error": Key(-0.6, _float(), "reward of a candidate that did not compile (after debugging)"),
        "wrong": Key(-0.7, _float(), "reward of a wrong result"),
        "crashed": Key(-0.9, _float(), "reward of a crash (illegal address, ...)"),
        "timeout": Key(-0.9, _float(), "reward of a candidate that hung"),
        "unsupported": Key(-0.5, _float(), "reward of a kernel that refused the shape"),
    },
    "search": {
        "seed": Key(0, _int(0, 2**63 - 1), "random seed of the built-in search policy"),
        "candidates_per_step": Key(4, _int(1, 64), "candidates the search policy proposes per step"),
        "pick_top": Key(5, _int(0, 64), "the pick: the cost model's top N catalog configurations timed together "
                        "before the search refines the fastest (0 = seed from the cost model alone)"),
        "pick_kinds": Key(True, _bool, "the pick also times the best of each kind the cost model is least sure of"),
    },
    "ui": {
        "theme": Key("textual-dark", _theme, "Textual theme name"),
        "refresh_ms": Key(100, _int(10, 5000), "how often the screen batches incoming events"),
        "show_telemetry": Key(True, _bool, "show the NVML telemetry strip"),
        "diff_context": Key(3, _int(0, 50), "context lines in kernel diffs"),
    },
}
#: [loop] keys that bound how long a run goes on; a resumed session keeps its own
BUDGET_KEYS = ("max_steps", "wall_time_s", "token_budget", "global_wall_time_s", "global_token_budget")

# [keys] is free-form: binding id -> key string (consumed by the TUI); only the value type is checked.
FREE_SECTIONS = ("keys",)


def defaults() -> dict[str, Section]:
    d: dict[str, Section] = {s: {k: copy.deepcopy(v.default) for k, v in keys.items()} for s, keys in SCHEMA.items()}
    d["keys"] = {}
    return d


@dataclass
class Config:
    """The validated configuration: one dict per section, plus where it came from."""

    data: dict[str, Section] = field(default_factory=defaults)
    source: Path | None = None
    #: found in the working directory (not the user's own config, not ``--config``): trusted
    #: with neither secrets nor files (:func:`check_untrusted`)
    from_workdir: bool = False

    def __getattr__(self, name: str) -> Section:
        data = self.__dict__.get("data")
        if data is not None and name in data:
            section: Section = data[name]
            return section
        raise AttributeError(name)

    def get(self, dotted: str) -> object:
        sec, key = dotted.split(".", 1)
        return self.data[sec][key]

    def with_overrides(self, overrides: Mapping[str, object]) -> "Config":
        """A copy with ``{"section.key": value}`` overrides (validated like the file)."""
        data = copy.deepcopy(self.data)
        for dotted, value in overrides.items():
            if value is None:
                continue
            sec, key = dotted.split(".", 1)
            data[sec][key] = _check(sec, key, value, "command line")
        check_dtype_acc(data["loop"]["dtype"], data["loop"]["acc"], "command line")
        return Config(data, self.source, self.from_workdir)

    def with_session_budgets(self, session_config: object, explicit: set[str] | frozenset[str] = frozenset(),
                             where: str = "session.toml") -> "Config":
        """A copy whose budgets are the resumed session's own, except those the command line set,
        and whose element type is the session's (fp16 for a session recorded without one).

        A session is resumed to finish what it was started for: a run that ended at
        ``max_steps = 1`` stays at one step unless ``--max-steps`` asks for more, whatever
        the current ``l2tui.toml`` says.  The recorded values are validated like a file's
        (one line naming the key on a bad one).
        """
        data = copy.deepcopy(self.data)
        saved = session_config.get("loop") if isinstance(session_config, dict) else None
        if saved is not None and not isinstance(saved, dict):
            raise ConfigError(f"{where}: [config.loop] is not a table; the session file is damaged")
        for key in BUDGET_KEYS:
            dotted = f"loop.{key}"
            if dotted in explicit or not saved or key not in saved:
                continue
            data["loop"][key] = _check("loop", key, saved[key], f"{where} [config]")
        data["loop"]["dtype"] = session_dtype(session_config)   # a session keeps its element type
        check_dtype_acc(data["loop"]["dtype"], data["loop"]["acc"], where)
        return Config(data, self.source, self.from_workdir)

    def snapshot(self) -> dict[str, object]:
        """What a session stores: every section, no secrets (there are none by construction)."""
        sections = copy.deepcopy(self.data)
        import re

        # credentials embedded in a URL (https://user:secret@host/v1) never reach a snapshot
        sections["llm"]["base_url"] = re.sub(r"^(https?://)[^/@]*@", r"\1", sections["llm"]["base_url"])
        snap: dict[str, object] = dict(sections)
        if self.source is not None:
            snap["source"] = str(self.source)
        return snap

    def api_key(self) -> str | None:
        """The API key from the environment (never stored anywhere)."""
        import os

        return os.environ.get(self.data["llm"]["api_key_env"]) or None


def _check(section: str, key: str, value: object, where: str) -> object:
    if section in FREE_SECTIONS:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where}: [{section}] {key}: expected a key name string, e.g. \"ctrl+p\"")
        return value
    spec = SCHEMA[section].get(key)
    if spec is None:
        if section == "llm" and key.lower() in ("api_key", "key", "token", "apikey", "password"):
            raise ConfigError(
                f"{where}: [llm] {key}: secrets are never read from config files; export the key and set "
                f"api_key_env to the variable's name"
            )
        raise ConfigError(
            f"{where}: unknown key [{section}] {key}; allowed: {', '.join(SCHEMA[section])}"
        )
    try:
        return spec.check(value)
    except ValueError as e:
        raise ConfigError(f"{where}: [{section}] {key} = {shown(section, key, value)}: {e}") from None


_SECRETISH: re.Pattern[str] | None = None


def shown(section: str, key: str, value: object) -> str:
    """How an error message may show a bad value: never a string that could be a secret.

    Numbers and booleans are shown; short plain words are shown; anything else (an API
    key pasted into ``api_key_env``, a URL with credentials, long text) is described by
    its type and length only, because error lines end up in terminals and logs.
    """
    import re

    global _SECRETISH
    if _SECRETISH is None:
        _SECRETISH = re.compile(r"(sk-|key|token|secret|pass|bearer|://|@)", re.I)
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        if section == "llm" and key in ("api_key_env", "base_url"):
            return f"(a string of {len(value)} characters, not shown)"
        if len(value) <= 24 and re.fullmatch(r"[A-Za-z0-9_.+ -]*", value) and not _SECRETISH.search(value):
            return repr(value)
        return f"(a string of {len(value)} characters, not shown)"
    if isinstance(value, list):
        return f"(a list of {len(value)} items)"
    return f"(a {type(value).__name__})"


def check_dtype_acc(dtype: str, acc: str, where: str) -> None:
    """Refuse bf16 with f16 accumulation in one line: bf16 kernels accumulate in f32 only (bf16's
    7-bit mantissa loses a long K's sum), and no bf16 kernel or library is timed that way."""
    if dtype == "bf16" and acc == "f16":
        raise ConfigError(f"{where}: acc f16 with dtype bf16: bf16 accumulates in f32 only "
                          "(use --acc f32, or --dtype fp16 for f16 accumulation)")


def session_dtype(session_config: object) -> str:
    """The element type a session runs in: its ``[loop] dtype``; a session recorded before bf16 has
    none, and ran fp16."""
    loop = session_config.get("loop") if isinstance(session_config, dict) else None
    dtype = loop.get("dtype", "fp16") if isinstance(loop, dict) else "fp16"
    if dtype not in ("fp16", "bf16"):
        raise ConfigError(f"session.toml: [loop] dtype is {str(dtype)[:20]!r}, not fp16 or bf16")
    return str(dtype)


def parse_config(doc: Mapping[str, object], where: str = "l2tui.toml") -> Config:
    """Validate a parsed TOML document into a :class:`Config` (defaults filled in)."""
    data = defaults()
    for section, body in doc.items():
        if section not in SCHEMA and section not in FREE_SECTIONS:
            allowed = ", ".join(f"[{s}]" for s in (*SCHEMA, *FREE_SECTIONS))
            raise ConfigError(f"{where}: unknown section [{section}]; allowed: {allowed}")
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: {section} must be a table ([{section}]), not a value")
        for key, value in body.items():
            if isinstance(value, dict):
                raise ConfigError(f"{where}: [{section}] {key}: nested tables are not allowed here")
            data[section][key] = _check(section, key, value, where)
    check_dtype_acc(data["loop"]["dtype"], data["loop"]["acc"], where)
    if data["harness"]["baseline"] not in data["harness"]["baselines"]:
        raise ConfigError(
            f"{where}: [harness] baseline = {data['harness']['baseline']!r} must be one of [harness] baselines "
            f"({', '.join(data['harness']['baselines'])})"
        )
    return Config(data)


#: what ``api_key_env`` may name in a config found in the working directory
_KEYLIKE_ENV = re.compile(r"[A-Za-z0-9_]*(?:_API_KEY|_TOKEN)")
#: the largest seed kernel read from a config (a CUTLASS kernel is tens of kB)
MAX_SEED_BYTES = 1 << 20


def load_config(path: str | Path | None = None, *, notice: Callable[[str], None] | None = None) -> Config:
    """Load ``path``, or the first existing file of the search path, or the defaults.

    A file found in the working directory (a cloned repository's, say) is named through
    ``notice`` (stderr by default) and held to :func:`check_untrusted`; every file's seed
    kernel is checked by :func:`check_seed` before anything runs."""
    from .paths import config_search_path

    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} not found; check --config")
        candidates = [p]
    else:
        candidates = [c for c in config_search_path() if c.is_file()][:1]
    if not candidates:
        return Config()
    p = candidates[0]
    workdir = path is None and p == Path.cwd() / p.name
    if workdir:
        (notice or _stderr)(f"l2tui: using ./{p.name} from the working directory")
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {str(e).splitlines()[0]}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read: {e}") from None
    cfg = parse_config(doc, str(p))
    cfg.source = p
    cfg.from_workdir = workdir
    if workdir:
        check_untrusted(cfg, str(p))
    check_seed(cfg.loop["seed"], str(p))
    return cfg


def _stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def check_untrusted(cfg: Config, where: str) -> None:
    """A config found in the working directory may point ``api_key_env`` only at a variable that
    looks like an API key: whatever it names is sent to ``base_url`` as the Bearer token, so a
    cloned repository's config naming ``AWS_SECRET_ACCESS_KEY`` or ``HOME`` would send that."""
    name = cfg.llm["api_key_env"]
    if not _KEYLIKE_ENV.fullmatch(name):
        raise ConfigError(f"{where}: [llm] api_key_env = {shown('llm', 'api_key_env', name)}: a config found in "
                          "the working directory may name only a variable like *_API_KEY or *_TOKEN; set it in "
                          "your own config (l2tui doctor names it) or pass --config FILE")


def check_seed(seed: str, where: str, *, base: Path | None = None, key: str = "[loop] seed") -> None:
    """A seed that is a file must be a ``.cu`` kernel with the ABI entry point that the source
    policy admits, checked when the config is read (before any LLM call or build): its text goes
    into prompts, the session and RL data. A harness family name passes (it is checked where it
    is looked up). ``key`` names the setting in the message (``--seed`` for the command line's
    option, with an empty ``where``)."""
    if not seed or not (any(c in seed for c in "/.\\") or Path(seed).expanduser().is_file()):
        return
    from harness.build import check_abi
    from harness.errors import KernelSourceError
    from harness.source_policy import violations

    said = f"{where}: {key}" if where else key
    p = Path(seed).expanduser()
    if base is not None and not p.is_absolute():
        p = base / p
    if p.suffix != ".cu":
        raise ConfigError(f"{said}: expected a .cu kernel file or a harness family name")
    try:
        st = p.stat()
        if not p.is_file() or st.st_size > MAX_SEED_BYTES:
            raise ConfigError(f"{said} {p.name}: not a kernel file of at most 1 MiB")
        source = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{said} {p.name}: cannot read it ({getattr(e, 'strerror', None) or 'not UTF-8 text'})") from None
    try:
        check_abi(source)
    except KernelSourceError:
        raise ConfigError(f"{said} {p.name}: no extern \"C\" l2_hgemm entry point; not a kernel") from None
    bad = violations(source)
    if bad:
        line, _, msg = bad[0]
        raise ConfigError(f"{said} {p.name} line {line}: {msg}")


def example_toml() -> str:
    """Render a documented example file from :data:`SCHEMA` (source of l2tui.example.toml)."""
    import json

    def fmt(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        return json.dumps(v)

    lines = [
        "# l2tui configuration.  Copy to ./l2tui.toml (or the user config dir, e.g.",
        "# ~/.config/l2tui/l2tui.toml) and change what you need; every key is optional",
        "# and shows its default here.  Unknown keys are errors.",
        "# Secrets never go in this file: export the API key in the environment",
        "# variable named by [llm] api_key_env.",
        "",
    ]
    for section, keys in SCHEMA.items():
        lines.append(f"[{section}]")
        for key, spec in keys.items():
            lines.append(f"# {spec.doc}")
            lines.append(f"{key} = {fmt(spec.default)}")
        lines.append("")
    lines += [
        "[keys]",
        "# Key bindings of the terminal UI: binding id = key (strings only), e.g.",
        '# pause = "p"',
        '# hint = "h"',
        "",
    ]
    return "\n".join(lines)
