#!/bin/bash
# The lead's consolidated H200 call, part 2 of 2 (<= 10 min): the GPU tests (pytest -m gpu, the
# agent's full loop), f16 on sample100 (pick + bench), and the export benchmark.
#
#   carry: [".whl", ".carry/final"]
#   command: L2TUI_GIT_REV=<rev> bash tools/h200_checks.sh
#
# Outputs in $OUT: pytest-gpu.xml, pytest-agent.xml, kernels-f16-sample100.json/.csv,
# export-bench.json, checks.log, rest.tar.gz.
LOG=$OUT/checks.log
W=/tmp/checks
source tools/h200_setup.sh

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
