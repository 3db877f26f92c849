"""Data that crosses back from code l2tui does not trust: a frame format and typed schemas.

Why: the GPU worker loads candidate libraries, so anything it sends back may have been written by
a candidate's host code (a library can write to any descriptor of the process it is loaded in).
What it sends must therefore be data that cannot run code when read -- JSON, never a pickle --
bounded in size, and checked field by field against a schema before anything uses it. The same
schemas check evaluations that come back from recordings and from Ray actors.

A frame is ``b"L2J1"`` + a 4-byte big-endian body length + a UTF-8 JSON body of at most
:data:`MAX_FRAME_BYTES`. The length is checked before the body is read.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Union

MAGIC = b"L2J1"
HEADER = struct.Struct(">4sI")
#: the largest frame body either side accepts; an evaluate_shape answer for a request of dozens
#: of subjects is well under a megabyte
MAX_FRAME_BYTES = 8 << 20
#: the deepest nesting a JSON document read from untrusted code may have
MAX_DEPTH = 16
#: the longest string any free-form field may hold (a compile log is capped by its own field)
MAX_STRING = 64 << 10

Json = Union[None, bool, int, float, str, list["Json"], dict[str, "Json"]]


class FrameError(ValueError):
    """A frame or document that is not what its schema says; the message is one line."""


# --------------------------------------------------------------------------- JSON text


def _reject_duplicates(pairs: list[tuple[str, Json]]) -> dict[str, Json]:
    """object_pairs_hook: a key given twice is ambiguous data, not a value to pick from."""
    out: dict[str, Json] = {}
    for k, v in pairs:
        if k in out:
            raise FrameError(f"key {k[:40]!r} appears twice")
        out[k] = v
    return out


def loads(data: bytes | str, limit: int = MAX_FRAME_BYTES) -> Json:
    """Parse JSON text of at most ``limit`` bytes as data (NaN and infinities are read as floats;
    the schema decides where they may stand). Raises FrameError."""
    if len(data) > limit:
        raise FrameError(f"{len(data)} bytes, more than the limit of {limit}")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value: Json = json.loads(text, object_pairs_hook=_reject_duplicates)
        return value
    except FrameError:
        raise
    except RecursionError:
        raise FrameError("nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise FrameError(f"not JSON ({str(e).splitlines()[0][:120]})") from None


def plain(obj: object, path: str = "$") -> Json:
    """``obj`` as JSON data: tuples become lists, numeric scalars of numpy or cupy plain numbers.
    Anything else raises TypeError naming where it is, so a result is made clean at its source."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, Mapping):
        return {_key(k, path): plain(v, f"{path}.{k}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v, f"{path}[{i}]") for i, v in enumerate(obj)]
    item = getattr(obj, "item", None)
    if callable(item) and getattr(obj, "shape", None) in ((), None):
        value = item()
        if isinstance(value, (bool, int, float)):
            return plain(value, path)
    raise TypeError(f"{path}: a {type(obj).__name__} is not JSON data")


def _key(k: object, path: str) -> str:
    """A dict key as JSON writes it: a string as it is, a number as its text; nothing else."""
    if isinstance(k, str):
        return k
    if isinstance(k, (int, float)) and not isinstance(k, bool):
        return str(k)
    raise TypeError(f"{path}: a key of type {type(k).__name__} is not JSON data")


def dumps(obj: object) -> bytes:
    """Compact JSON bytes of ``plain(obj)``."""
    return json.dumps(plain(obj), separators=(",", ":"), allow_nan=True).encode("utf-8")


def encode_frame(obj: object) -> bytes:
    """One frame: magic, length, JSON body. Raises FrameError past MAX_FRAME_BYTES."""
    body = dumps(obj)
    if len(body) > MAX_FRAME_BYTES:
        raise FrameError(f"an answer of {len(body)} bytes is more than the limit of {MAX_FRAME_BYTES}")
    return HEADER.pack(MAGIC, len(body)) + body


def frame_length(header: bytes) -> int:
    """The body length a frame header announces; refuses a wrong magic or an oversize body before
    any of the body is read."""
    if len(header) != HEADER.size:
        raise FrameError("truncated header")
    magic, n = HEADER.unpack(header)
    if magic != MAGIC:
        raise FrameError(f"not a frame (it starts with {header[:8].hex()})")
    if n > MAX_FRAME_BYTES:
        raise FrameError(f"a frame of {n} bytes announced, more than the limit of {MAX_FRAME_BYTES}")
    return int(n)


# --------------------------------------------------------------------------- schemas


class Schema(Protocol):
    def check(self, value: Json, path: str) -> None:
        """Raise FrameError naming ``path`` when ``value`` does not fit."""


def _fail(path: str, what: str, value: Json) -> FrameError:
    shown = repr(value)
    return FrameError(f"{path}: expected {what}, got {shown[:60]}")


@dataclass(frozen=True)
class Num:
    """A number in [lo, hi]; ``finite`` False lets NaN and infinities through."""

    lo: float = -1e300
    hi: float = 1e300
    finite: bool = True
    null: bool = False
    integer: bool = False

    def check(self, value: Json, path: str) -> None:
        if value is None and self.null:
            return
        kinds = (int,) if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise _fail(path, "an integer" if self.integer else "a number", value)
        if isinstance(value, float) and not math.isfinite(value):
            if self.finite:
                raise _fail(path, "a finite number", value)
            return
        if not self.lo <= value <= self.hi:
            raise _fail(path, f"a number in [{self.lo:g}, {self.hi:g}]", value)


def Int(lo: int = -(1 << 62), hi: int = 1 << 62, null: bool = False) -> Num:  # noqa: N802 - a schema constructor
    return Num(lo, hi, True, null, True)


@dataclass(frozen=True)
class Str:
    max_len: int = 200
    choices: tuple[str, ...] = ()
    pattern: str | None = None
    null: bool = False

    def check(self, value: Json, path: str) -> None:
        if value is None and self.null:
            return
        if not isinstance(value, str):
            raise _fail(path, "a string", value)
        if len(value) > self.max_len:
            raise FrameError(f"{path}: a string of {len(value)} characters, more than {self.max_len}")
        if self.choices and value not in self.choices:
            raise _fail(path, "one of " + "/".join(self.choices), value)
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise _fail(path, f"a string matching {self.pattern}", value)


@dataclass(frozen=True)
class Bool:
    null: bool = False

    def check(self, value: Json, path: str) -> None:
        if not (isinstance(value, bool) or (value is None and self.null)):
            raise _fail(path, "true or false", value)


@dataclass(frozen=True)
class Null:
    def check(self, value: Json, path: str) -> None:
        if value is not None:
            raise _fail(path, "null", value)


@dataclass(frozen=True)
class ListOf:
    item: Schema
    max_items: int = 10_000
    min_items: int = 0
    null: bool = False

    def check(self, value: Json, path: str) -> None:
        if value is None and self.null:
            return
        if not isinstance(value, list):
            raise _fail(path, "a list", value)
        if not self.min_items <= len(value) <= self.max_items:
            raise FrameError(f"{path}: a list of {len(value)} items, expected {self.min_items} to {self.max_items}")
        for i, v in enumerate(value):
            self.item.check(v, f"{path}[{i}]")


@dataclass(frozen=True)
class MapOf:
    """A dict of names (strings of at most ``key_len``) to values of one schema."""

    value: Schema
    max_items: int = 10_000
    key_len: int = 200
    null: bool = False

    def check(self, value: Json, path: str) -> None:
        if value is None and self.null:
            return
        if not isinstance(value, dict):
            raise _fail(path, "an object", value)
        if len(value) > self.max_items:
            raise FrameError(f"{path}: {len(value)} entries, more than {self.max_items}")
        for k, v in value.items():
            if len(k) > self.key_len:
                raise FrameError(f"{path}: a key of {len(k)} characters, more than {self.key_len}")
            self.value.check(v, f"{path}.{k[:40]}")


@dataclass(frozen=True)
class Record:
    """A dict with these keys: ``required`` must be there, ``optional`` may be; any other key is
    refused unless ``extra`` gives a schema for it (documents that grow over versions)."""

    required: Mapping[str, Schema]
    optional: Mapping[str, Schema] = field(default_factory=dict)
    extra: Schema | None = None
    null: bool = False

    def check(self, value: Json, path: str) -> None:
        if value is None and self.null:
            return
        if not isinstance(value, dict):
            raise _fail(path, "an object", value)
        missing = [k for k in self.required if k not in value]
        if missing:
            raise FrameError(f"{path}: the key {missing[0]!r} is missing")
        for k, v in value.items():
            schema = self.required.get(k) or self.optional.get(k) or self.extra
            if schema is None:
                raise FrameError(f"{path}: unexpected key {k[:40]!r}")
            schema.check(v, f"{path}.{k[:40]}")


@dataclass(frozen=True)
class Data:
    """Free-form JSON data of bounded depth, string length and item count (a check's detail,
    the autotune's notes): read as data, never interpreted."""

    max_depth: int = 8
    max_string: int = MAX_STRING
    max_items: int = 10_000

    def check(self, value: Json, path: str, depth: int = 0) -> None:
        if depth > self.max_depth:
            raise FrameError(f"{path}: nested deeper than {self.max_depth}")
        if value is None or isinstance(value, (bool, int, float)):
            return
        if isinstance(value, str):
            if len(value) > self.max_string:
                raise FrameError(f"{path}: a string of {len(value)} characters, more than {self.max_string}")
            return
        if isinstance(value, list):
            if len(value) > self.max_items:
                raise FrameError(f"{path}: a list of {len(value)} items, more than {self.max_items}")
            for i, v in enumerate(value):
                self.check(v, f"{path}[{i}]", depth + 1)
            return
        if isinstance(value, dict):
            if len(value) > self.max_items:
                raise FrameError(f"{path}: {len(value)} entries, more than {self.max_items}")
            for k, v in value.items():
                self.check(v, f"{path}.{k[:40]}", depth + 1)
            return
        raise _fail(path, "JSON data", value)


def validate(value: Json, schema: Schema, path: str = "$") -> Json:
    """``value`` when it fits ``schema``; FrameError (one line) otherwise."""
    schema.check(value, path)
    return value
