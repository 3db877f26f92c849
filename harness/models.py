"""A model's GEMMs as shapes: one decoder layer and the LM head, named by role.

Why: the shapes an engineer brings are a model's, not the grid's. ``--shapes`` accepts a model,
either a Hugging Face ``config.json`` path or a preset name from ``harness/data/models.toml``,
with token counts (M) and a tensor-parallel degree. Each token count gives five GEMMs
(M = tokens, N = out features, K = in features, as ``nn.Linear`` computes ``x @ W.T``):

* ``qkv``     N = (heads + 2 * kv_heads) * head_dim / tp, K = hidden (column parallel)
* ``o``       N = hidden, K = heads * head_dim / tp (row parallel)
* ``gate_up`` N = 2 * intermediate / tp, K = hidden (column parallel)
* ``down``    N = hidden, K = intermediate / tp (row parallel)
* ``lm_head`` N = vocab / tp rounded up to a multiple of 8 (the padded vocabulary shard), K = hidden

With more tensor-parallel ranks than KV heads, each rank keeps one KV head (they are replicated).
A spec may carry its token counts and degree: ``llama-3-8b@16,128,2048@tp2``.

A ``config.json`` is read as hostile input: at most 1 MB, every dimension a bounded integer.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from .errors import ShapeError
from .jsonfile import read_capped
from .paths import PACKAGE_DIR
from .gemm_shape import MAX_DIM, Shape

MODELS_FILE = PACKAGE_DIR / "data" / "models.toml"
MAX_CONFIG_BYTES = 1 << 20
DEFAULT_TOKENS: tuple[int, ...] = (16, 128, 2048)
ROLES = ("qkv", "o", "gate_up", "down", "lm_head")
_SPEC_RE = re.compile(r"^(?P<model>.+?)(?:@(?P<tokens>\d+(?:,\d+)*))?(?:@tp(?P<tp>\d+))?$")


@dataclass(frozen=True)
class ModelDims:
    """The dimensions of a decoder-only transformer that set its GEMM shapes."""

    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int


def _dim(doc: Mapping[str, object], key: str, where: str, default: int | None = None) -> int:
    v = doc.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_DIM * 4:
        raise ShapeError(f"{where}: '{key}' must be a positive integer (up to {MAX_DIM * 4})")
    return v


def dims_from_config(doc: object, name: str, where: str) -> ModelDims:
    """Validate a ``config.json`` document (or a preset table) into :class:`ModelDims`."""
    if not isinstance(doc, dict):
        raise ShapeError(f"{where}: not a model config (a JSON object with hidden_size, ...)")
    text = doc.get("text_config")
    if "hidden_size" not in doc and isinstance(text, dict):
        doc = text   # a multimodal config keeps its language model's dimensions here
    hidden = _dim(doc, "hidden_size", where)
    heads = _dim(doc, "num_attention_heads", where)
    kv = _dim(doc, "num_key_value_heads", where, heads)
    hd = doc.get("head_dim")
    head_dim = _dim(doc, "head_dim", where) if hd is not None else hidden // heads
    if hd is None and hidden % heads:
        raise ShapeError(f"{where}: hidden_size is not a multiple of num_attention_heads; give head_dim")
    if heads % kv:
        raise ShapeError(f"{where}: num_attention_heads must be a multiple of num_key_value_heads")
    return ModelDims(name, hidden, _dim(doc, "intermediate_size", where), heads, kv, head_dim,
                     _dim(doc, "vocab_size", where))


def load_config_json(path: str | Path) -> ModelDims:
    """A Hugging Face ``config.json``; one-line :class:`ShapeError` when it is not one. Errors
    name the file, never its content."""
    p = Path(path)
    data = read_capped(p, MAX_CONFIG_BYTES, ShapeError, "model config", verdict="not a config.json")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ShapeError(f"model config {str(p)!r} is not JSON") from None
    name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return dims_from_config(doc, name[:60], str(p))


@functools.lru_cache(maxsize=1)
def presets() -> dict[str, ModelDims]:
    """The named models of ``harness/data/models.toml``."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    doc = tomllib.loads(MODELS_FILE.read_text())
    return {name: dims_from_config(table, name, f"{MODELS_FILE.name} [{name}]") for name, table in doc.items()}


def _tp_share(total: int, tp: int, what: str, model: str) -> int:
    if total % tp:
        raise ShapeError(f"{model}: {what} ({total}) is not divisible by the tensor-parallel degree {tp}")
    return total // tp


def layer_gemms(d: ModelDims, tokens: int, tp: int = 1) -> list[tuple[str, Shape]]:
    """The five GEMMs of one decoder layer and the LM head at ``tokens`` rows, per TP rank."""
    if tp < 1:
        raise ShapeError("the tensor-parallel degree must be at least 1")
    if not 1 <= tokens <= MAX_DIM:
        raise ShapeError(f"token count {tokens} is out of range (1 to {MAX_DIM})")
    heads = _tp_share(d.heads, tp, "num_attention_heads", d.name)
    if d.kv_heads >= tp:
        kv = _tp_share(d.kv_heads, tp, "num_key_value_heads", d.name)
    elif tp % d.kv_heads == 0:
        kv = 1
    else:
        raise ShapeError(f"{d.name}: the tensor-parallel degree {tp} neither divides nor is a multiple of "
                         f"num_key_value_heads ({d.kv_heads})")
    inter = _tp_share(d.intermediate, tp, "intermediate_size", d.name)
    vocab = -(-d.vocab // tp)
    vocab = -(-vocab // 8) * 8
    out = [("qkv", Shape(tokens, (heads + 2 * kv) * d.head_dim, d.hidden)),
           ("o", Shape(tokens, d.hidden, heads * d.head_dim)),
           ("gate_up", Shape(tokens, 2 * inter, d.hidden)),
           ("down", Shape(tokens, d.hidden, inter)),
           ("lm_head", Shape(tokens, vocab, d.hidden))]
    for role, s in out:
        if max(s.n, s.k) > MAX_DIM:
            raise ShapeError(f"{d.name}: the {role} GEMM {s} has a dimension over {MAX_DIM}; use --tp")
    return out


@dataclass(frozen=True)
class ModelSpec:
    dims: ModelDims
    tokens: tuple[int, ...]
    tp: int

    def shapes(self) -> list[tuple[Shape, str]]:
        """(shape, role) per GEMM; the role reads ``llama-3-8b qkv t16`` (``/tp2`` when split)."""
        tp = f" tp{self.tp}" if self.tp > 1 else ""
        return [(s, f"{self.dims.name} {role} t{t}{tp}") for t in self.tokens for role, s in
                layer_gemms(self.dims, t, self.tp)]


def parse_tokens(text: str) -> tuple[int, ...]:
    """``16,128,2048`` -> (16, 128, 2048); one line when it is not a list of token counts."""
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ShapeError(f"bad token counts {text[:40]!r}: write e.g. 16,128,2048") from None
    if not vals or any(not 1 <= v <= MAX_DIM for v in vals):
        raise ShapeError(f"bad token counts {text[:40]!r}: each between 1 and {MAX_DIM}")
    return vals


def _is_config_path(text: str) -> bool:
    try:
        return text.endswith(".json") and Path(text).is_file()
    except (OSError, ValueError):
        return False


def model_spec(spec: str, tokens: Sequence[int] | None = None, tp: int | None = None) -> ModelSpec | None:
    """The model a ``--shapes`` spec names (a preset or a config.json path, with optional
    ``@tokens`` and ``@tpN``), or None when the spec names no model. ``tokens`` and ``tp`` are the
    command line's ``--tokens`` / ``--tp``; the spec's own win."""
    m = _SPEC_RE.match(spec.strip())
    if not m:
        return None
    name = m.group("model")
    key = name.lower().removeprefix("model:")
    table = presets()
    if key in table:
        dims = table[key]
    elif _is_config_path(name):
        dims = load_config_json(name)
    else:
        return None
    toks = parse_tokens(m.group("tokens")) if m.group("tokens") else tuple(tokens or DEFAULT_TOKENS)
    degree = int(m.group("tp")) if m.group("tp") else int(tp or 1)
    return ModelSpec(dims, toks, degree)


def shapes_file_text(spec: ModelSpec) -> str:
    """A shapes file (``M,N,K  # role``), one line per distinct GEMM, roles joined where shared."""
    roles: dict[Shape, list[str]] = {}
    for s, role in spec.shapes():
        roles.setdefault(s, []).append(role)
    d = spec.dims
    head = (f"# {d.name}: hidden {d.hidden}, intermediate {d.intermediate}, heads {d.heads}, kv heads {d.kv_heads}, "
            f"head_dim {d.head_dim}, vocab {d.vocab}; tokens {','.join(map(str, spec.tokens))}; tp {spec.tp}\n"
            "# M = tokens, N = out features, K = in features (nn.Linear: y = x @ W.T)\n")
    return head + "".join(f"{s.m},{s.n},{s.k}  # {', '.join(r)}\n" for s, r in roles.items())


# ----------------------------------------------------------------------------- command line


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="a preset (see --list) or a config.json path")
    p.add_argument("--tokens", default=None, metavar="LIST", help="token counts, e.g. 16,128,2048 (M of every GEMM)")
    p.add_argument("--tp", type=int, default=1, metavar="N", help="tensor-parallel degree (shapes per rank)")
    p.add_argument("--out", metavar="FILE", help="write the shapes file here (default: print it)")
    p.add_argument("--list", action="store_true", help="list the presets")


def main(args: argparse.Namespace) -> int:
    if args.list or not args.model:
        for name, d in presets().items():
            print(f"{name:<14} hidden {d.hidden:>5}  intermediate {d.intermediate:>5}  heads {d.heads:>3}/{d.kv_heads:<2} "
                  f"head_dim {d.head_dim}  vocab {d.vocab}")
        return 0
    tokens = parse_tokens(args.tokens) if args.tokens else None
    spec = model_spec(args.model, tokens, args.tp)
    if spec is None:
        raise ShapeError(f"unknown model {args.model[:60]!r}: a preset ({', '.join(presets())}) or a config.json path")
    text = shapes_file_text(spec)
    if not args.out:
        print(text, end="")
        return 0
    try:
        Path(args.out).write_text(text)
    except OSError as e:
        raise ShapeError(f"cannot write {args.out}: {e.strerror or e}") from None
    print(f"{text.count(chr(10)) - 2} shapes in {args.out}")
    return 0
