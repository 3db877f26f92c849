#!/usr/bin/env python3
"""Carry a winners file over a family-template edit that leaves its configurations' code as it was.

    python tools/rehash_winners.py results/h200/winners-f32.json --against f890541            # report
    python tools/rehash_winners.py results/h200/winners-f32.json --against f890541 --write    # rewrite

Why: a winners file records, per configuration, the sha256 of the source that was measured, and
``harness winners render`` refuses a template whose render no longer matches (a template edit must
not silently change what a committed figure stands for). Adding a knob to a family (``WG_K`` to
``sm90_ksplit``) changes every render's text, yet for the old knob values nvcc may emit exactly the
same library. For each configuration whose render changed, this renders the knobs with the
template of git revision ``--against`` (whose render must hash to the recorded sha256: that is
the source that was measured) and with today's, builds both with the project's nvcc recipe and
compares the device code (the ``.nv_fatbin`` section: the SASS and PTX the GPU runs) and the host
code (``.text``: the launch). Only where both are byte-identical does ``--write`` record today's
sha256; any other configuration is reported and keeps its hash (re-measure it on a GPU).
"""

from __future__ import annotations

import argparse
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import build as B  # noqa: E402
from harness import families as F  # noqa: E402
from harness import winners as W  # noqa: E402


def template_at(rev: str, fam: F.Family) -> str:
    """``fam``'s template text at git revision ``rev``."""
    if fam.body_from is not None:
        raise SystemExit(f"{fam.name} borrows its body from {fam.body_from}: not supported")
    path = f"harness/kernels/{fam.file}"
    r = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1])
    if r.returncode != 0:
        raise SystemExit(f"git show {rev}:{path}: {r.stderr.strip()}")
    return r.stdout


def sass(source: str, arch: str) -> dict[str, bytes]:
    """The machine code of every kernel ``source`` builds, by ELF section (``.text.<kernel>``):
    the build's own nvcc command, writing a cubin instead of a library. The line table and the
    module's id change with any edit of the text; the instructions do not unless the code does."""
    with tempfile.TemporaryDirectory(prefix="l2tui-rehash-") as d:
        src, cubin = Path(d) / B.SOURCE_NAME, Path(d) / "kernel.cubin"
        src.write_text(source)
        cmd = B.nvcc_command(B.nvcc_path(), arch, [], src, cubin, source)
        cmd = [c for c in cmd[:cmd.index("-o")] if c not in ("-shared", "-Xptxas=-v")]
        r = subprocess.run([*cmd, "-cubin", "-o", str(cubin), str(src)], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise SystemExit(f"nvcc -cubin failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
        return {name: data for name, data in elf_sections(cubin.read_bytes()).items() if name.startswith(".text.")}


def elf_sections(elf: bytes) -> dict[str, bytes]:
    """Every named section of a 64-bit little-endian ELF file (a cubin), read from its header table."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise SystemExit("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = heads[shstrndx][4]
    out = {}
    for name_off, kind, _flags, _addr, offset, size in heads:
        end = elf.index(b"\0", names_at + name_off)
        name = elf[names_at + name_off:end].decode()
        out[name] = b"" if kind == 8 else elf[offset:offset + size]  # SHT_NOBITS holds no bytes
    return out


def same_code(old: str, new: str, arch: str) -> tuple[bool, str]:
    """Whether two sources build to the same kernels, instruction for instruction; why not."""
    a, b = sass(old, arch), sass(new, arch)
    if not a:
        return False, "no kernel code found"
    if a.keys() != b.keys():
        return False, "other kernels"
    for name in a:
        if a[name] != b[name]:
            return False, f"{name[:60]} differs"
    return True, f"the same machine code ({len(a)} kernel{'s' if len(a) != 1 else ''})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("winners", type=Path)
    ap.add_argument("--against", required=True, metavar="REV", help="git revision whose templates were measured")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--write", action="store_true", help="record today's sha256 where the code is identical")
    args = ap.parse_args(argv)
    w = W.load(args.winners)
    today = W.render_sources(w, allow_changed=True)
    changed, kept = 0, 0
    configs = dict(w.configs)
    for name, win in sorted(w.configs.items()):
        if W.sha256(today[name]) == win.sha256:
            continue
        fam = F.get_family(win.config.family)
        old_template = template_at(args.against, fam)
        knobs = win.config.knob_dict
        # a knob the old template lacks is one added since: it must hold its default (the old code)
        block = F.parse_knobs(old_template)
        added = {k: v for k, v in knobs.items() if k not in block}
        if any(fam.defaults().get(k) != v for k, v in added.items()):
            print(f"{name}: sets {', '.join(added)}, which the {args.against} template lacks: kept")
            kept += 1
            continue
        old = F.set_knobs(old_template, {k: v for k, v in knobs.items() if k in block})
        if W.sha256(old) != win.sha256:
            print(f"{name}: the {args.against} template does not render the measured source either: kept")
            kept += 1
            continue
        ok, why = same_code(old, today[name], args.arch)
        print(f"{name}: {why}{'' if ok else ': kept (re-measure it)'}")
        if ok:
            configs[name] = W.Winner(win.name, win.config, W.sha256(today[name]))
            changed += 1
        else:
            kept += 1
    print(f"{changed} configurations re-hashed, {kept} kept")
    if args.write and changed:
        args.winners.write_text(W.dump(W.Winners(w.acc, w.about, configs, w.shapes)))
    return 0 if kept == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
