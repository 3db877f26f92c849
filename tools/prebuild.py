"""Compile the catalog of seed configurations once, in parallel, for carrying to a GPU box.

    python tools/prebuild.py --out .carry/prebuilt [--arch sm_90a] [--acc f32 f16] [--jobs 2]

Writes ``<out>/<config-name>.cu``, ``<out>/<config-name>.so`` and ``<out>/manifest.json``
(family, knobs, acc, sha256 of the source, ptxas registers/spills, build seconds).  Uses
``harness.build.build_many`` when it is available (so the harness build cache is warmed too,
under $L2TUI_CACHE_DIR) and plain nvcc otherwise.  The GPU-side tools (tools/sweep_gpu.py) load
the ``.so`` files directly, so no compiler is needed on the GPU machine.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.families import build_arch_for, catalog  # noqa: E402


def cutlass_includes() -> list[str]:
    import cutlass_library  # the nvidia-cutlass package ships the C++ headers

    root = Path(cutlass_library.__file__).resolve().parent / "source"
    return [f"-I{root / 'include'}", f"-I{root / 'tools' / 'util' / 'include'}"]


def nvcc_build(src: Path, so: Path, arch: str) -> dict:
    cc = arch.replace("sm_", "")
    cmd = ["nvcc", "-std=c++17", "-O3", "--expt-relaxed-constexpr", "-shared", "-Xcompiler", "-fPIC",
           f"-gencode=arch=compute_{cc},code=sm_{cc}", "-Xptxas", "-v", *cutlass_includes(),
           str(src), "-o", str(so)]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    log = p.stdout + p.stderr
    regs = [int(x) for x in re.findall(r"Used (\d+) registers", log)]
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill stores", log)]
    return {"ok": p.returncode == 0, "seconds": round(time.time() - t0, 1),
            "registers": max(regs) if regs else None, "spill_store_bytes": max(spills) if spills else None,
            "serialized_wgmma": "C7510" in log, "log": log[-3000:] if p.returncode else ""}


def harness_build(src: Path, so: Path, arch: str) -> dict:
    """Build through the harness (warms its content-addressed cache) and copy the library."""
    from harness.build import build

    t0 = time.time()
    r = build(src.read_text(), arch=arch, name=src.stem)
    if r.ok:
        shutil.copyfile(r.so_path, so)
        # host symbol tables are not needed to dlopen the library: keep the carry small
        subprocess.run(["strip", "--strip-unneeded", str(so)], capture_output=True)
    p = r.ptxas
    log = r.log or ""
    return {"ok": r.ok, "seconds": round(time.time() - t0, 1), "cached": r.cached,
            "registers": getattr(p, "registers", None) if p else None,
            "spill_store_bytes": getattr(p, "spill_store_bytes", None) if p else None,
            "serialized_wgmma": "C7510" in log, "key": r.key, "log": "" if r.ok else log[-3000:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".carry/prebuilt")
    ap.add_argument("--arch", default="sm_90a", help="GPU arch to build for (default sm_90a = H100/H200)")
    ap.add_argument("--acc", nargs="+", default=["f32", "f16"])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", default="", help="regex on config names")
    ap.add_argument("--first", default="", help="regex: build matching configurations first")
    ap.add_argument("--plain-nvcc", action="store_true", help="bypass the harness build cache")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mpath = out / "manifest.json"
    manifest = json.loads(mpath.read_text()) if mpath.exists() else {}
    todo = []
    for acc in args.acc:
        for cfg in catalog(acc, args.arch):
            if args.only and not re.search(args.only, cfg.name):
                continue
            src = cfg.source()
            sha = hashlib.sha256(src.encode()).hexdigest()
            arch = build_arch_for(cfg.family, args.arch)
            entry = manifest.get(cfg.name)
            if entry and entry.get("sha") == sha and entry.get("ok") and (out / f"{cfg.name}.so").exists():
                continue
            (out / f"{cfg.name}.cu").write_text(src)
            todo.append((cfg, sha, arch))
    # priority: f32 CUTLASS (catalog order), then the fast mma families, then f16 CUTLASS, then
    # the no-PDL comparison builds; a device run can start with whatever is done
    def prio(t):
        c = t[0]
        k = c.knob_dict
        if c.family != "sm90_cutlass":
            return 1
        if k.get("PDL") == "0":
            return 3
        return 0 if c.acc == "f32" else 2
    todo.sort(key=lambda t: (not (args.first and re.search(args.first, t[0].name)), prio(t)))
    print(f"building {len(todo)} configurations with {args.jobs} jobs", flush=True)
    t0 = time.time()
    with cf.ThreadPoolExecutor(args.jobs) as pool:
        try:
            import harness.build  # noqa: F401
            builder = nvcc_build if args.plain_nvcc else harness_build
        except ImportError:
            builder = nvcc_build
        futs = {pool.submit(builder, out / f"{c.name}.cu", out / f"{c.name}.so", a): (c, s, a) for c, s, a in todo}
        for i, fut in enumerate(cf.as_completed(futs), 1):
            c, sha, arch = futs[fut]
            r = fut.result()
            manifest[c.name] = {"family": c.family, "knobs": c.knob_dict, "acc": c.acc, "sha": sha,
                                "arch": arch, **{k: v for k, v in r.items() if k != "log"}}
            status = "ok" if r["ok"] else "FAILED"
            print(f"[{i}/{len(todo)}] {c.name}: {status} {r['seconds']}s regs={r['registers']} "
                  f"spill={r['spill_store_bytes']}{' SERIALIZED-WGMMA' if r['serialized_wgmma'] else ''}"
                  f"  (elapsed {time.time() - t0:.0f}s)", flush=True)
            if not r["ok"]:
                print(r["log"], flush=True)
            mpath.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return 0 if all(v.get("ok") for v in manifest.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
