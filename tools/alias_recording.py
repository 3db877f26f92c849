#!/usr/bin/env python3
"""Keep a GPU recording replayable after a family template's text changed but not its code.

    python tools/alias_recording.py sessions/demo-h200            # writes sessions/demo-h200/evaluations.json
    python tools/alias_recording.py SESSION --recording FILE --dry-run

Why: a recording (``l2tui.agent.recorded``) keys every evaluation by the sha256 of the kernel
source. Edit a family template's comments, or a branch the preprocessor drops for a configuration,
and today's render of a recorded configuration gets another sha256: a replay of the session then
finds nothing recorded for it and compiles it for real (20-60 s for CUTLASS), although the kernel
is the same. For each kernel of the session (``SESSION/kernels/*.cu``, the sources the recording
holds) that is a family configuration, this renders the same knobs with today's template and, when
``nvcc -E`` gives both the same translation unit (:func:`harness.build.translation_unit`), or, failing
that, both compile to the same machine code for every kernel (:func:`harness.machinecode.same_code`:
a knob added with a default that keeps the old code paths), adds the alias ``today's sha ->
recorded sha`` to the recording's ``aliases``. Records an earlier re-keying
copied under today's sha (the same evaluation twice) are dropped in favour of the alias. A render
whose translation unit and machine code differ is a different kernel: it is reported and gets no
alias (record it again on a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from l2tui.session import sha256_text as sha  # noqa: E402  (the key a recording uses)


def todays_render(source: str) -> str | None:
    """The current template's render of ``source``'s family and knobs (None: not a family configuration)."""
    from harness.errors import HarnessError
    from harness.families import family_of, parse_knobs, render

    fam = family_of(source)
    if fam is None:
        return None
    try:
        return render(fam, parse_knobs(source))
    except HarnessError:
        return None


def alias(doc: dict, sources: dict[str, str], arch: str, say=print) -> dict[str, int]:
    """Add the verified aliases of ``sources`` (sha -> recorded source) to the recording ``doc``
    in place; counts of what happened."""
    from harness.build import translation_unit
    from harness.errors import HarnessError
    from harness.machinecode import same_code

    records, profiles = doc.setdefault("records", {}), doc.setdefault("profiles", {})
    aliases: dict[str, str] = doc.setdefault("aliases", {})
    recorded = {k.split(":", 1)[0] for k in records}
    n = {"aliased": 0, "already aliased": 0, "unchanged": 0, "differs": 0, "not a configuration": 0,
         "dropped copies": 0}
    for old_sha, src in sorted(sources.items()):
        if old_sha not in recorded:
            continue
        now = todays_render(src)
        if now is None:
            n["not a configuration"] += 1
            continue
        new_sha = sha(now)
        if new_sha == old_sha:
            n["unchanged"] += 1
            continue
        if aliases.get(new_sha) == old_sha:
            n["already aliased"] += 1
            continue
        try:
            same = translation_unit(src, arch) == translation_unit(now, arch)
        except HarnessError as e:
            say(f"{old_sha[:12]}: cannot preprocess: {e}")
            same = False
        if not same:  # a new knob whose default keeps the old code: other text, the same instructions
            try:
                same, why = same_code(src, now, arch)
            except HarnessError as e:
                same, why = False, str(e)
            if same:
                say(f"{old_sha[:12]}: other translation unit, {why}: aliased")
        if not same:
            n["differs"] += 1
            say(f"{old_sha[:12]}: today's render is a different kernel (translation units and machine code "
                "differ): record it again")
            continue
        aliases[new_sha] = old_sha
        n["aliased"] += 1
        for table in (records, profiles):
            for key in [k for k in table if k.startswith(new_sha + ":")]:
                twin = f"{old_sha}:{key.split(':', 1)[1]}"
                if twin in table and table[twin] == table[key]:
                    del table[key]
                    n["dropped copies"] += 1
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("session", type=Path, help="the recorded session (its kernels/ hold the recorded sources)")
    ap.add_argument("--recording", type=Path, help="the recording (default SESSION/evaluations.json)")
    ap.add_argument("--arch", default=None, help="nvcc target (default: the recording's, else sm_90a)")
    ap.add_argument("--dry-run", action="store_true", help="report, write nothing")
    args = ap.parse_args(argv)
    rec = args.recording or args.session / "evaluations.json"
    try:
        doc = json.loads(rec.read_text())
    except (OSError, ValueError) as e:
        print(f"alias_recording: cannot read {rec}: {e}", file=sys.stderr)
        return 2
    kdir = args.session / "kernels"
    sources = {sha(p.read_text()): p.read_text() for p in sorted(kdir.glob("*.cu"))} if kdir.is_dir() else {}
    if not sources:
        print(f"alias_recording: no kernels in {kdir}", file=sys.stderr)
        return 2
    arch = args.arch or doc.get("meta", {}).get("arch") or "sm_90a"
    n = alias(doc, sources, arch)
    print(", ".join(f"{v} {k}" for k, v in n.items()))
    if args.dry_run or not (n["aliased"] or n["dropped copies"]):
        return 0
    doc.setdefault("meta", {})["aliased"] = {"by": "tools/alias_recording.py", "aliases": len(doc["aliases"]),
                                             "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    tmp = rec.with_suffix(rec.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
    os.replace(tmp, rec)
    print(f"wrote {rec}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
