#!/usr/bin/env python3
"""Per-call launch cost of kernels that do nothing, with a GEMM's launch traits (H200 probe).

    python tools/probes/launch_cost.py --out launch-cost.json

Why: see tools/probes/launch_cost.cu. This builds the probe with nvcc (into a temporary folder),
runs it, and writes its figures with the GPU, driver, date, git revision and command, so a
figure quoted in the gap analysis comes from a file that says how it was made.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _git_rev() -> str:
    if os.environ.get("L2TUI_GIT_REV"):
        return os.environ["L2TUI_GIT_REV"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=200, help="steps per graph (default 200)")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved replays per variant (default 15)")
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args(argv)
    out = Path(args.out)
    exe = Path(tempfile.mkdtemp(prefix="launch_cost-")) / "launch_cost"
    cc = args.arch.removeprefix("sm_")
    build = ["nvcc", "-O3", "-std=c++17", f"-gencode=arch=compute_{cc},code=sm_{cc}",
             str(HERE / "launch_cost.cu"), "-o", str(exe)]
    if subprocess.run(build).returncode != 0:
        print("launch_cost: the nvcc build failed (see above)", file=sys.stderr)
        return 1
    run = subprocess.run([str(exe), str(args.reps), str(args.rounds)], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"launch_cost: {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else 'the probe failed'}",
              file=sys.stderr)
        return 1
    doc = json.loads(run.stdout)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,uuid", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()
    driver, uuid = (smi[0].split(", ") + ["", ""])[:2] if smi else ("", "")
    doc["meta"] = {"driver": driver, "gpu_uuid": uuid, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                   "git_rev": _git_rev(), "command": "python tools/probes/launch_cost.py " + " ".join(argv or sys.argv[1:]),
                   "mode": "per call",
                   "method": "per variant: one CUDA graph of R [separator, probe] steps and one of R separators; "
                             "replayed in interleaved rounds, each replay timed with events; per call = "
                             "(probe graph - base graph) / R, median over the rounds"}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    for v in doc["variants"]:
        print(f"{v['per_call_us']:7.3f} us  {v['name']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
