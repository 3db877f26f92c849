#!/bin/bash
# One device call: pick the best prebuilt configuration per shape (tools/sweep_gpu.py pick).
#   source tools/device-setup.sh; bash tools/grid_pick.sh [f32|f16] [shapes] [budget_s]
# Needs .carry/prebuilt (tools/prebuild.py) carried. Writes to $OUT (few files on purpose):
#   pick-<acc>.json (every timing, the winner per shape), pick-<acc>.log,
#   pick-<acc>-kernels.tar.gz (the winners as kernels/M_N_K.cu).
# Continue an interrupted pick: RESUME=path/to/pick-<acc>.json bash tools/grid_pick.sh ...
ACC=${1:-f32}
SHAPES=${2:-grid}
BUDGET=${3:-400}
python3 tools/sweep_gpu.py pick --prebuilt .carry/prebuilt --out "$OUT" --shapes "$SHAPES" --acc "$ACC" \
  --kernels-dir "/tmp/kernels-$ACC" --budget-s "$BUDGET" --top-k 5 --baselines --tag "pick-$ACC" \
  ${RESUME:+--resume "$RESUME"} > "$OUT/pick-$ACC.log" 2>&1
rc=$?
grep -E "loaded|WATCHDOG|over the time budget|slow:|failed" "$OUT/pick-$ACC.log" | head -20
tail -2 "$OUT/pick-$ACC.log"
exit $rc
