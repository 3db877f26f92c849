#!/bin/bash
# A short device call that only picks: time chosen prebuilt configurations (and the baselines)
# on a shape list and keep the fastest that passes a quick check per shape, e.g. after new knob
# values joined the catalog, to see where they win before a full bench. The pick file it writes
# merges into the committed one (tools/merge_picks.py); the bench (tools/h200_final.sh) is the
# result of record.
#
#   carry: [".whl-min", "<prebuilt>"]   (a tools/prebuild.py folder: <config>.so/.cu + manifest.json)
#   command: PREBUILT=<prebuilt> ONLY='<regex on config names>' SHAPES=<shapes file or set> \
#            [TOP_K=40] [PICK_S=300] [WHL_DIR=.whl-min] bash tools/h200_pick.sh
# Output in $OUT: pick.json (with every timing; saved as it goes), pick-kernels.tar.gz, pick.log.
LOG=$OUT/pick.log
if [ ! -f "${PREBUILT:-}/manifest.json" ] || [ -z "${SHAPES:-}" ]; then
  echo "h200_pick.sh: set PREBUILT to a tools/prebuild.py folder (with manifest.json) and SHAPES; carry the folder" | tee "$LOG"
  exit 2
fi
export WHL_DIR=${WHL_DIR:-.whl-min}
source tools/device-setup.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee -a "$LOG"
timeout -k 5 ${PICK_S:-300} python3 tools/sweep_gpu.py pick --prebuilt "$PREBUILT" --out "$OUT" --shapes "$SHAPES" \
  --acc f32 --only "$ONLY" --top-k ${TOP_K:-40} --budget-s $(( ${PICK_S:-300} - 40 )) --watchdog-s 15 \
  --kernels-dir /tmp/pick-kernels --tag pick >> "$LOG" 2>&1
echo "rc=$?" >> "$LOG"
grep -c winner "$LOG"; tail -4 "$LOG"
