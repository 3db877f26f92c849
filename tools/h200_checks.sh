#!/bin/bash
# The lead's consolidated H200 call, part 2 of 2 (<= 10 min): the GPU tests (pytest -m gpu, the
# agent's full loop), f16 on sample100 (pick + bench), and the export benchmark.
#
#   carry: [".whl", ".carry/final"]
#   command: L2TUI_GIT_REV=<rev> bash tools/h200_checks.sh
#
# Outputs in $OUT: pytest-gpu.xml, pytest-agent.xml, kernels-f16-sample100.json/.csv,
# export-bench.json, checks.log, rest.tar.gz.
set -u
source tools/device-setup.sh
export CARRY_FINAL=${CARRY_FINAL:-.carry/final}
export L2TUI_GIT_REV=${L2TUI_GIT_REV:-unknown}
DEADLINE=${DEADLINE:-565}
LOG=$OUT/checks.log
W=/tmp/checks; mkdir -p $W
mkdir -p /tmp/l2cache && cp -r ${CARRY_FINAL:-.carry/final}/cache/builds /tmp/l2cache/
export L2TUI_CACHE_DIR=/tmp/l2cache

# the pick tool wants a prebuilt folder (<config>.so/.cu + manifest.json): link it from the cache
python3 - <<'PY'
import json, os
from pathlib import Path
m = json.loads((Path(os.environ.get("CARRY_FINAL", ".carry/final")) / "manifest.json").read_text())
pre = Path("/tmp/prebuilt"); pre.mkdir(exist_ok=True)
for name, e in m.items():
    entry = Path("/tmp/l2cache/builds") / e["key"][:2] / e["key"]
    for ext, f in ((".so", "kernel.so"), (".cu", "kernel.cu")):
        dst = pre / (name + ext)
        if not dst.exists():
            os.symlink(entry / f, dst)
(pre / "manifest.json").write_text(json.dumps(m))
print(f"{len(m)} prebuilt configurations linked")
PY

step() {
  local name=$1 cap=$2; shift 2
  local left=$(( DEADLINE - SECONDS )); local t=$(( left < cap ? left : cap ))
  if [ "$t" -lt 15 ]; then echo "SKIP $name (no time left)" | tee -a "$LOG"; return; fi
  echo "== $name (cap ${t}s) at ${SECONDS}s" | tee -a "$LOG"
  timeout -k 5 "$t" "$@" >> "$LOG" 2>&1
  echo "== $name rc=$? at ${SECONDS}s" | tee -a "$LOG"
}

step pytest-gpu 200 python3 -m pytest -m gpu -v -p no:cacheprovider -o addopts="" -o timeout=90 tests \
  --deselect tests/test_agent_gpu.py::test_full_loop_on_two_shapes_on_the_gpu --junitxml=$OUT/pytest-gpu.xml
step agent-gpu 90 python3 -m pytest -m gpu -v -p no:cacheprovider -o addopts="" tests/test_agent_gpu.py \
  --basetemp=$W/agent --junitxml=$OUT/pytest-agent.xml
step pick-f16 30 python3 tools/sweep_gpu.py pick --prebuilt /tmp/prebuilt --out $W --shapes sample100 --acc f16 \
  --kernels-dir $W/k16 --budget-s 18 --top-k 3 --watchdog-s 15 --tag pick-f16
step bench-f16 70 python3 -m harness bench --shapes sample100 --acc f16 --kernels $W/k16 --label l2 \
  --baselines cublas,cublaslt_heuristic,cublaslt_autotune --out $OUT/kernels-f16-sample100.json --limit-seconds 60
if [ -n "${EXPORT_DIR:-}" ]; then
  step export-bench 120 python3 -m l2tui.export.bench "$EXPORT_DIR" --out $OUT/export-bench.json ${EXPORT_ARGS:-}
fi

cp "$LOG" $W/ 2>/dev/null
tar -C /tmp -czf $OUT/rest.tar.gz --exclude='*.so' checks 2>/dev/null
ls -la $OUT
grep -E "^== |SKIP|passed|failed" "$LOG" | tail -30
