"""Winners files: which family configuration won each shape, stored by name, rendered on demand.

A winners file (``results/h200/winners-f32.json``) maps every shape to the configuration that
won it and records, once per configuration, its family, its full knob assignment and the
sha256 of the source it renders. Why names and not copies: every winner is a family template
with its knobs set, so the file is the whole truth in a few kilobytes, and a template edit
shows up as a hash mismatch instead of two copies of a kernel silently telling different
stories. Why full knobs and not just the name: the name is checked against the knobs, but the
render must not depend on the catalog or on a family's defaults staying as they are.

    python -m harness winners render --winners results/h200/winners-f32.json --out DIR
    python -m harness winners from-dir --kernels DIR --acc f32 --out winners.json
    python -m harness winners from-dir --kernels DIR --base old.json --out new.json

``render`` writes ``DIR/M_N_K.cu`` for each shape, the folder ``l2tui bench --kernels DIR``
reads; ``from-dir`` turns a folder of rendered family sources (a sweep's ``winners/``, a pick's
``kernels/``) into a winners file, refusing any source that its configuration does not
reproduce byte for byte (a hand-edited kernel is not a configuration); with ``--base``, every
shape the folder lacks keeps the base file's configuration (a re-pick of some of the shapes, or
one stopped before its end, updates a full winners file).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from . import families as F
from .errors import HarnessError
from .jsonfile import read_json
from .shapes import Shape, parse_shape

FORMAT = "l2tui-winners/1"


class WinnersError(HarnessError):
    """A winners file that cannot be read, or a source that is not a configuration's render."""


@dataclass(frozen=True)
class Winner:
    """One configuration of a winners file and the source it renders."""

    name: str
    config: F.Config
    sha256: str

    def source(self) -> str:
        """The family template with every knob of the configuration written out."""
        return F.render(self.config.family, self.config.knob_dict)


@dataclass(frozen=True)
class Winners:
    acc: str
    about: str
    configs: dict[str, Winner]
    shapes: dict[Shape, str]
    #: the element type of every configuration; a file without ``dtype`` is fp16
    dtype: str = "fp16"

    def by_shape(self) -> dict[Shape, Winner]:
        return {s: self.configs[n] for s, n in self.shapes.items()}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def file_name(shape: Shape) -> str:
    """``M_N_K.cu``: the per-shape name a ``--kernels`` folder uses."""
    return f"{shape.m}_{shape.n}_{shape.k}.cu"


def _config(name: str, entry: object, where: str) -> F.Config:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("family"), str) or not isinstance(entry.get("knobs"), Mapping):
        raise WinnersError(f"{where}: configuration {name!r} needs 'family' and 'knobs'")
    try:
        fam = F.get_family(entry["family"])
    except HarnessError as e:
        raise WinnersError(f"{where}: configuration {name!r}: {e}") from None
    unknown = set(entry["knobs"]) - set(fam.knob_names) - {"DTYPE"}
    if unknown:
        raise WinnersError(f"{where}: configuration {name!r}: unknown knob {sorted(unknown)[0]} for {fam.name}")
    cfg = F.Config.of(fam.name, {k: str(v) for k, v in entry["knobs"].items()})
    if cfg.name != name:
        raise WinnersError(f"{where}: configuration {name!r}: its knobs name it {cfg.name!r}")
    return cfg


def parse(doc: object, where: str = "winners file") -> Winners:
    """Validate a winners document (as loaded from JSON); one-line :class:`WinnersError` when bad."""
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise WinnersError(f"{where}: not a winners file (expected \"format\": \"{FORMAT}\")")
    acc = doc.get("acc")
    if acc not in ("f32", "f16"):
        raise WinnersError(f"{where}: 'acc' must be f32 or f16")
    dtype = doc.get("dtype", "fp16")
    if dtype not in F.DTYPES:
        raise WinnersError(f"{where}: 'dtype' must be {' or '.join(F.DTYPES)}")
    raw_cfgs, raw_shapes = doc.get("configs"), doc.get("shapes")
    if not isinstance(raw_cfgs, Mapping) or not isinstance(raw_shapes, Mapping):
        raise WinnersError(f"{where}: needs 'configs' and 'shapes' objects")
    configs: dict[str, Winner] = {}
    for name, entry in raw_cfgs.items():
        cfg = _config(name, entry, where)
        if cfg.acc != acc:
            raise WinnersError(f"{where}: configuration {name!r} accumulates in {cfg.acc}, the file says {acc}")
        if cfg.dtype != dtype:
            raise WinnersError(f"{where}: configuration {name!r} takes {cfg.dtype}, the file says {dtype}")
        digest = entry.get("sha256")
        if not isinstance(digest, str) or len(digest) != 64:
            raise WinnersError(f"{where}: configuration {name!r} needs the sha256 of its source")
        configs[name] = Winner(name, cfg, digest)
    shapes: dict[Shape, str] = {}
    for key, name in raw_shapes.items():
        try:
            shape = parse_shape(key)
        except HarnessError as e:
            raise WinnersError(f"{where}: {e}") from None
        if name not in configs:
            raise WinnersError(f"{where}: shape {key} names {name!r}, which is not under 'configs'")
        shapes[shape] = name
    return Winners(acc, str(doc.get("about", "")), configs, shapes, dtype)


def load(path: str | Path) -> Winners:
    doc = read_json(path, WinnersError, "winners file")
    return parse(doc, str(path))


def dump(w: Winners) -> str:
    """The JSON text of a winners file: one line per configuration and per shape, sorted, so a
    re-pick's diff shows exactly the shapes whose winner changed."""
    def line(key: str, value: object) -> str:
        return f"  {json.dumps(key)}: {json.dumps(value)}"

    cfgs = [line(n, {"family": c.config.family, "knobs": c.config.knob_dict, "sha256": c.sha256})
            for n, c in sorted(w.configs.items())]
    shapes = [line(f"{s.m}x{s.n}x{s.k}", n)
              for s, n in sorted(w.shapes.items(), key=lambda kv: (kv[0].m, kv[0].n, kv[0].k))]
    # fp16 is what a file without dtype means, so an fp16 file keeps the text it always had
    dtype = f' "dtype": {json.dumps(w.dtype)},\n' if w.dtype != "fp16" else ""
    head = (f'{{\n "format": {json.dumps(FORMAT)},\n "acc": {json.dumps(w.acc)},\n{dtype}'
            f' "about": {json.dumps(w.about)},\n')
    return (head + ' "configs": {\n' + ",\n".join(cfgs) + '\n },\n "shapes": {\n'
            + ",\n".join(shapes) + "\n }\n}\n")


def render_sources(w: Winners, *, allow_changed: bool = False) -> dict[str, str]:
    """{configuration name: source}, each checked against its recorded sha256.

    A mismatch means a template changed since the winners were measured; the caller gets one
    line naming the configuration unless ``allow_changed`` (then the current render is used).
    """
    out = {}
    for name, win in w.configs.items():
        try:
            src = win.source()
        except HarnessError as e:
            raise WinnersError(f"configuration {name}: {e}") from None
        if sha256(src) != win.sha256 and not allow_changed:
            raise WinnersError(
                f"configuration {name}: the {win.config.family} template no longer renders the measured source "
                "(sha256 differs); re-measure it, or pass --allow-changed to render it anyway")
        out[name] = src
    return out


def render_dir(winners_file: str | Path, out_dir: str | Path, *, allow_changed: bool = False) -> int:
    """Write ``out_dir/M_N_K.cu`` for every shape of ``winners_file``; returns the number written.

    Plain files with identical bytes per configuration: the build cache is keyed by source, so
    the libraries built for one shape serve every shape that shares its configuration.
    """
    w = load(winners_file)
    sources = render_sources(w, allow_changed=allow_changed)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for shape, name in w.shapes.items():
            (out / file_name(shape)).write_text(sources[name])
    except OSError as e:
        raise WinnersError(f"cannot write the kernels into {out}: {e.strerror or e}") from None
    return len(w.shapes)


def from_dir(kernels_dir: str | Path, acc: str, about: str = "", dtype: str = "fp16") -> Winners:
    """A winners file from a folder of ``M_N_K.cu`` family renders (symlinks are followed)."""
    d = Path(kernels_dir)
    files = sorted(d.glob("*_*_*.cu"))   # M_N_K.cu, or M_N_K_f16.cu as a sweep names its f16 winners
    if not files:
        raise WinnersError(f"{d}: no M_N_K.cu files")
    configs: dict[str, Winner] = {}
    shapes: dict[Shape, str] = {}
    for p in files:
        try:
            shape = parse_shape(p.stem.removesuffix("_f16"))
        except HarnessError as e:
            raise WinnersError(f"{p}: {e}") from None
        text = p.read_text()
        cfg = F.Config.from_source(text)
        if cfg is None:
            raise WinnersError(f"{p}: not a seed-family source (no family header or knob block)")
        if cfg.acc != acc:
            raise WinnersError(f"{p}: accumulates in {cfg.acc}, not {acc}")
        if cfg.dtype != dtype:
            raise WinnersError(f"{p}: takes {cfg.dtype}, not {dtype} (pass --dtype {cfg.dtype})")
        win = Winner(cfg.name, cfg, sha256(text))
        if win.source() != text:
            raise WinnersError(f"{p}: {cfg.name} does not render this source byte for byte (edited by hand, or an older template)")
        configs[cfg.name] = win
        shapes[shape] = cfg.name
    return Winners(acc, about, configs, shapes, dtype)


def with_base(w: Winners, base: Winners) -> tuple[Winners, int]:
    """``w`` plus every shape of ``base`` that ``w`` lacks (with its configuration); how many."""
    if base.acc != w.acc:
        raise WinnersError(f"the base file accumulates in {base.acc}, the kernels in {w.acc}")
    if base.dtype != w.dtype:
        raise WinnersError(f"the base file takes {base.dtype}, the kernels {w.dtype}")
    shapes, configs = dict(w.shapes), dict(w.configs)
    kept = 0
    for shape, name in base.shapes.items():
        if shape not in shapes:
            shapes[shape] = name
            configs.setdefault(name, base.configs[name])
            kept += 1
    ordered = dict(sorted(shapes.items(), key=lambda kv: (kv[0].m, kv[0].n, kv[0].k)))
    return Winners(w.acc, w.about, configs, ordered, w.dtype), kept


# ----------------------------------------------------------------------------- command line


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="winners_command", required=True, metavar="ACTION")
    r = sub.add_parser("render", help="write DIR/M_N_K.cu for each shape of a winners file")
    r.add_argument("--winners", required=True, metavar="FILE", help="e.g. results/h200/winners-f32.json")
    r.add_argument("--out", required=True, metavar="DIR", help="folder for the per-shape sources (created)")
    r.add_argument("--allow-changed", action="store_true",
                   help="render even where a template no longer gives the measured source")
    f = sub.add_parser("from-dir", help="a winners file from a folder of rendered M_N_K.cu sources")
    f.add_argument("--kernels", required=True, metavar="DIR")
    f.add_argument("--acc", choices=("f32", "f16"), default="f32")
    f.add_argument("--dtype", choices=F.DTYPES, default="fp16", help="element type of the kernels (default fp16)")
    f.add_argument("--about", default="", help="one line: where the winners come from")
    f.add_argument("--base", metavar="FILE", help="a winners file whose shapes the folder lacks are kept as they are")
    f.add_argument("--out", required=True, metavar="FILE")


def main(args: argparse.Namespace) -> int:
    if args.winners_command == "render":
        n = render_dir(args.winners, args.out, allow_changed=args.allow_changed)
        print(f"{n} kernels in {args.out}")
        return 0
    w = from_dir(args.kernels, args.acc, args.about, args.dtype)
    kept = 0
    if args.base:
        w, kept = with_base(w, load(args.base))
    try:
        Path(args.out).write_text(dump(w))
    except OSError as e:
        raise WinnersError(f"cannot write {args.out}: {e.strerror or e}") from None
    print(f"{len(w.shapes)} shapes, {len(w.configs)} configurations in {args.out}"
          + (f" ({kept} kept from {args.base})" if args.base else ""))
    return 0
