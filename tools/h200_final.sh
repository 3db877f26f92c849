#!/bin/bash
# The lead's consolidated H200 call, part 1 of 2 (one device call, <= 10 min): pick the best
# prebuilt configuration per grid shape, bench the winners against every baseline on all 1,000
# shapes (offline), then server mode on sample100. Part 2 is tools/h200_checks.sh.
#
#   carry: [".whl", ".carry/final"]     (.carry/final = build-cache entries of the catalog +
#                                        its manifest, made by tools/final_carry.py)
#   command: L2TUI_GIT_REV=<rev> bash tools/h200_final.sh
#   options (environment): PRE_TESTS, BASE_PICK + PICK_SHAPES, PICK_S, TOP_K (configurations the
#   pick times per shape beyond the always-timed kinds, default 6), ONLY (regex on configuration
#   names), BENCH_SHAPES (default grid; a subset's results merge into a grid file with
#   python -m harness.results merge; "changed" = the shapes whose winner the pick changed from
#   BASE_PICK's, for tools/confirm_picks.py; with AB=1 the bench times each changed shape's
#   earlier winner too, label "incumbent", in the same rounds: confirm_picks --earlier-label
#   incumbent --later-label l2 reads both from that one file), BENCH_LIMIT_S (the grid bench's time limit, default
#   280: 1,000 shapes took 217-235 s),
#   SERVER_S (0 = no server step), EXPORT_DIR + EXPORT_ARGS (the export
#   benchmark of an export built here), PROFILE_SHAPES, BENCH=0, PICK_ARGS (more options of the pick, e.g.
#   "--target-ms 200": big shapes are power-bound, their SM clock falls from ~1,965 to 1,305-1,545 MHz
#   within one shape's bench timing (6e4ba9c bench, clocks before/after), and a pick's shorter
#   bursts rank kernels before that happens)
#
# Every step has a time cap so the call ends inside the device limit; a pick that hangs is ended
# by its watchdog and resumed without the configuration that hung. Outputs land in $OUT:
# kernels-offline.json/.csv, kernels-server-sample100.json/.csv, final.log and rest.tar.gz
# (the pick file and the winners).
LOG=$OUT/final.log
W=/tmp/final
source tools/h200_setup.sh
B="cublas,cublaslt_heuristic,cublaslt_autotune,torch"

# PRE_TESTS: GPU tests to run first (pytest node ids / -k expressions), e.g. the tests of kernel
# code that changed since the last call; capped at PRE_TESTS_S seconds
if [ -n "${PRE_TESTS:-}" ]; then
  step pre-tests ${PRE_TESTS_S:-100} python3 -m pytest -m gpu -v -o addopts="" -p no:cacheprovider $PRE_TESTS
fi

# BASE_PICK (a pick file from an earlier call) + PICK_SHAPES: start from the earlier winners and
# re-pick only those shapes (e.g. after configurations joined the catalog); each shape's earlier
# winner is timed again beside the candidates (--incumbents), so ONLY can narrow a re-pick safely
PICK_SHAPES=${PICK_SHAPES:-grid}
if [ -n "${BASE_PICK:-}" ]; then
  step materialize-base 30 python3 tools/sweep_gpu.py materialize --pick "$BASE_PICK" --prebuilt /tmp/prebuilt \
    --kernels-dir $W/k32 --out $W
fi
# the pick, resumed after a watchdog exit (a hang) until it completes or its time is up
PICK_END=$(( SECONDS + ${PICK_S:-175} ))
while [ $SECONDS -lt $PICK_END ]; do
  RES=""; [ -f $W/pick-f32.json ] && RES="--resume $W/pick-f32.json"
  step pick-f32 $(( PICK_END - SECONDS )) python3 tools/sweep_gpu.py pick --prebuilt /tmp/prebuilt --out $W \
    --shapes $PICK_SHAPES --acc f32 --kernels-dir $W/k32 --budget-s $(( PICK_END - SECONDS - 10 )) --top-k ${TOP_K:-6} \
    --only="${ONLY:-}" ${BASE_PICK:+--incumbents "$BASE_PICK"} --watchdog-s 15 --tag pick-f32 $RES ${PICK_ARGS:-}
  grep -q "^WATCHDOG:" "$LOG" && [ "$(grep -c "^WATCHDOG:" "$LOG")" -gt "${NDOG:-0}" ] && { NDOG=$(grep -c "^WATCHDOG:" "$LOG"); continue; }
  break
done
# BENCH=0: stop after the pick (a re-pick too long to share a call with the bench)
if [ "${BENCH_SHAPES:-}" = "changed" ]; then
  python3 tools/repick_shapes.py --changed-from "$BASE_PICK" --changed-to $W/pick-f32.json --out $W/changed.shapes
  BENCH_SHAPES=$W/changed.shapes
  [ "$(grep -vc '^#' $W/changed.shapes)" = "0" ] && BENCH=0
fi
INCUMBENTS=()
if [ "${AB:-0}" = "1" ] && [ -n "${BASE_PICK:-}" ] && [ "${BENCH:-1}" = "1" ]; then
  step materialize-incumbents 30 python3 tools/sweep_gpu.py materialize --pick "$BASE_PICK" --prebuilt /tmp/prebuilt \
    --kernels-dir $W/k32base --out $W
  INCUMBENTS=(--kernels $W/k32base --label incumbent)
fi
if [ "${BENCH:-1}" = "1" ]; then
step bench-grid $(( ${BENCH_LIMIT_S:-280} + 15 )) python3 -m harness bench --shapes ${BENCH_SHAPES:-grid} --kernels $W/k32 \
  --label l2 "${INCUMBENTS[@]}" --baselines $B --out $OUT/kernels-offline.json --limit-seconds ${BENCH_LIMIT_S:-280}
step server ${SERVER_S:-140} python3 -m harness bench --shapes sample100 --kernels $W/k32 --label l2 --baselines $B \
  --mode server --server-calls 10 --out $OUT/kernels-server-sample100.json --limit-seconds 130
fi

# EXPORT_DIR (an export made by `l2tui export --build`) + EXPORT_ARGS: the export benchmark
if [ -n "${EXPORT_DIR:-}" ]; then
  step export-bench ${EXPORT_S:-120} python3 -m l2tui.export.bench "$EXPORT_DIR" --out $OUT/export-bench.json ${EXPORT_ARGS:-}
fi

# PROFILE_SHAPES ("MxNxK MxNxK ..."): Nsight Compute profiles of the winner and of cuBLASLt autotuned
for shp in ${PROFILE_SHAPES:-}; do
  f=$W/k32/$(echo $shp | tr x _).cu
  step "ncu-l2-$shp" 40 python3 -m harness profile --shape $shp --kernel $f --out $OUT/ncu-l2-$shp.json
  step "ncu-lt-$shp" 40 python3 -m harness profile --shape $shp --baseline cublaslt_autotune --out $OUT/ncu-cublaslt-$shp.json
done

# the device hands back a limited number of files: the profiles travel as one archive
if ls $OUT/ncu-*.json >/dev/null 2>&1; then
  tar -C $OUT -czf $OUT/ncu.tar.gz $(cd $OUT && ls ncu-*.json) && rm -f $OUT/ncu-*.json
fi
cp "$LOG" $W/ 2>/dev/null
tar -C /tmp -czf $OUT/rest.tar.gz --exclude='*.so' final 2>/dev/null
ls -la $OUT
grep -E "^== |SKIP|passed|failed" "$LOG" | tail -30
