# Shared setup of the device scripts (tools/h200_final.sh, tools/h200_checks.sh); source it with
# LOG and W set: installs the carried wheels, unpacks the carried build cache, links a prebuilt
# folder for the pick tool and defines `step NAME CAP CMD...` (time-capped, logged to $LOG).
set -u
source tools/device-setup.sh
export CARRY_FINAL=${CARRY_FINAL:-.carry/final}
export L2TUI_GIT_REV=${L2TUI_GIT_REV:-unknown}
DEADLINE=${DEADLINE:-565}
mkdir -p $W
mkdir -p /tmp/l2cache
if [ -f $CARRY_FINAL/cache.tar.xz ]; then   # packed by tools/final_carry.py --pack
  tar -C /tmp/l2cache -xJf $CARRY_FINAL/cache.tar.xz --strip-components=1
else
  cp -r $CARRY_FINAL/cache/builds /tmp/l2cache/
fi
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
