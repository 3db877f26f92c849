#!/bin/bash
# The lead's consolidated H200 call, part 2 of 2 (<= 10 min): the GPU tests (pytest -m gpu, the
# agent's full loop), f16 on sample100 (pick + bench), and the export benchmark.
#
#   carry: [".whl", ".carry/final"]
#   command: L2TUI_GIT_REV=<rev> bash tools/h200_checks.sh
#   options (environment): GPU_TESTS, GPU_TESTS_S, PICK16_S, SERVER_PICK, EXPORT_DIR + EXPORT_ARGS
#
# Outputs in $OUT: pytest-gpu.xml, pytest-agent.xml, kernels-f16-sample100.json/.csv,
# export-bench.json, checks.log, rest.tar.gz.
LOG=$OUT/checks.log
W=/tmp/checks
source tools/h200_setup.sh

# GPU_TESTS: which GPU tests (default: all but the agent's full loop, which runs next on its own)
GPU_TESTS=${GPU_TESTS:-tests --deselect tests/test_agent_gpu.py::test_full_loop_on_two_shapes_on_the_gpu}
step pytest-gpu ${GPU_TESTS_S:-200} python3 -m pytest -m gpu -v -p no:cacheprovider -o addopts="" -o timeout=90 \
  $GPU_TESTS --junitxml=$OUT/pytest-gpu.xml
step agent-gpu 90 python3 -m pytest -m gpu -v -p no:cacheprovider -o addopts="" tests/test_agent_gpu.py \
  --basetemp=$W/agent --junitxml=$OUT/pytest-agent.xml
step pick-f16 $(( ${PICK16_S:-18} + 12 )) python3 tools/sweep_gpu.py pick --prebuilt /tmp/prebuilt --out $W --shapes sample100 --acc f16 \
  --kernels-dir $W/k16 --budget-s ${PICK16_S:-18} --top-k 3 --watchdog-s 30 --full-check --tag pick-f16
step bench-f16 70 python3 -m harness bench --shapes sample100 --acc f16 --kernels $W/k16 --label l2 \
  --baselines cublas,cublaslt_heuristic,cublaslt_autotune --out $OUT/kernels-f16-sample100.json --limit-seconds 60
# SERVER_PICK (a committed pick file): server mode on sample100 with its winners
if [ -n "${SERVER_PICK:-}" ]; then
  step materialize 30 python3 tools/sweep_gpu.py materialize --pick "$SERVER_PICK" --prebuilt /tmp/prebuilt \
    --kernels-dir $W/k32 --out $W
  step server 110 python3 -m harness bench --shapes sample100 --kernels $W/k32 --label l2 \
    --baselines cublas,cublaslt_heuristic,cublaslt_autotune,torch --mode server --server-calls 10 \
    --out $OUT/kernels-server-sample100.json --limit-seconds 100
fi
if [ -n "${EXPORT_DIR:-}" ]; then
  step export-bench 120 python3 -m l2tui.export.bench "$EXPORT_DIR" --out $OUT/export-bench.json ${EXPORT_ARGS:-}
fi

cp "$LOG" $W/ 2>/dev/null
tar -C /tmp -czf $OUT/rest.tar.gz --exclude='*.so' checks 2>/dev/null
ls -la $OUT
grep -E "^== |SKIP|passed|failed" "$LOG" | tail -30
