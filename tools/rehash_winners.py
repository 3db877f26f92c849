#!/usr/bin/env python3
"""Carry a winners file over a family-template edit that leaves its configurations' code as it was.

    python tools/rehash_winners.py results/h200/winners-f32.json --against f890541            # report
    python tools/rehash_winners.py results/h200/winners-f32.json --against f890541 --write    # rewrite

Why: a winners file records, per configuration, the sha256 of the source that was measured, and
``harness winners render`` refuses a template whose render no longer matches (a template edit must
not silently change what a committed figure stands for). Adding a knob to a family (``WG_K`` to
``sm90_ksplit``) changes every render's text, yet for the old knob values nvcc may emit exactly the
same device code. For each configuration whose render changed, this renders the knobs with the
template of git revision ``--against`` (whose render must hash to the recorded sha256: that is the
source that was measured) and with today's, compiles both to cubins with the project's nvcc
command and compares their device code (:mod:`harness.machinecode`: every section but the debug
ones: instructions, resources, constants, symbols). Only where it is byte-identical does
``--write`` record today's sha256; any other configuration is reported and keeps its hash
(re-measure it on a GPU). The host side (grid, block and shared-memory sizes) follows from the
same knobs; an edit that changes the launch code must not be carried over this way. Where the two
renders preprocess to the same translation unit (an edit of the template's comments), nvcc compiles
the same input and no build is needed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import families as F  # noqa: E402
from harness.build import translation_unit  # noqa: E402
from harness.errors import HarnessError  # noqa: E402
from harness.machinecode import same_code  # noqa: E402
from harness import winners as W  # noqa: E402


def template_at(rev: str, fam: F.Family) -> str:
    """``fam``'s template text at git revision ``rev``, with the kernel parts it names (``// l2: part
    FILE``) pasted from the same revision, as :func:`harness.families._read_template` does today."""
    if fam.body_from is not None:
        raise SystemExit(f"{fam.name} borrows its body from {fam.body_from}: not supported")
    return F.paste_parts(_show(rev, f"harness/kernels/{fam.file}"),
                         lambda name: _show(rev, f"harness/kernels/{name}"))


def _show(rev: str, path: str) -> str:
    """A file's text at git revision ``rev``."""
    r = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1])
    if r.returncode != 0:
        raise SystemExit(f"git show {rev}:{path}: {r.stderr.strip()}")
    return r.stdout


def carried_over(win: W.Winner, now: str, rev: str, arch: str) -> tuple[bool, str]:
    """Whether today's render ``now`` of ``win`` is the code that was measured; why, in a few words."""
    fam = F.get_family(win.config.family)
    old_template = template_at(rev, fam)
    knobs = win.config.knob_dict
    # a knob the old template lacks is one added since: it must hold its default (the old code)
    block = F.parse_knobs(old_template)
    added = {k: v for k, v in knobs.items() if k not in block}
    if any(fam.defaults().get(k) != v for k, v in added.items()):
        return False, f"sets {', '.join(added)}, which the {rev} template lacks"
    old = F.set_knobs(old_template, {k: v for k, v in knobs.items() if k in block})
    if W.sha256(old) != win.sha256:
        return False, f"the {rev} template does not render the measured source either"
    if translation_unit(old, arch) == translation_unit(now, arch):
        return True, "the same translation unit after the preprocessor (an edit of comments only)"
    return same_code(old, now, arch)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("winners", type=Path)
    ap.add_argument("--against", required=True, metavar="REV", help="git revision whose templates were measured")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--write", action="store_true", help="record today's sha256 where the code is identical")
    args = ap.parse_args(argv)
    try:
        w = W.load(args.winners)
    except HarnessError as e:
        print(f"rehash_winners: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    configs = dict(w.configs)
    changed, kept = 0, 0
    for name, win in sorted(w.configs.items()):
        try:
            now = W.render_sources(W.Winners(w.acc, w.about, {name: win}, {}), allow_changed=True)[name]
            if W.sha256(now) == win.sha256:
                continue
            ok, why = carried_over(win, now, args.against, args.arch)
        except HarnessError as e:
            ok, why = False, f"cannot check: {str(e).splitlines()[0]}"
        print(f"{name}: {why}{'' if ok else ': kept (re-measure it)'}")
        if ok:
            configs[name] = W.Winner(win.name, win.config, W.sha256(now))
            changed += 1
        else:
            kept += 1
    print(f"{changed} configurations re-hashed, {kept} kept")
    if args.write and changed:
        args.winners.write_text(W.dump(W.Winners(w.acc, w.about, configs, w.shapes)))
    return 0 if kept == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
