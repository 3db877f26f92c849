#!/usr/bin/env bash
# The H100 measurements of docs/h100.md, in one run on an H100 box, everything under results/h100/.
#   tools/h100_run.sh CUDA_L2_CHECKOUT [SECONDS_PER_STEP]
# Each step is time-boxed (--max-seconds / --limit-seconds) and can be run again: the sweep
# resumes its session, and a bench rewrites its own result file.
set -euo pipefail
CUDAL2=${1:?give the path of a CUDA-L2 checkout (its kernels/h100_F32F16F16F32 folder is benched)}
BOX=${2:-3600}
OUT=results/h100
THEIRS="$CUDAL2/kernels/h100_F32F16F16F32"
[ -d "$THEIRS" ] || { echo "h100_run: no folder $THEIRS: give a CUDA-L2 checkout" >&2; exit 2; }
mkdir -p "$OUT" sessions
export L2TUI_CACHE_DIR=${L2TUI_CACHE_DIR:-$PWD/.h100-cache}   # an empty build cache on a first run
ALL=cublas,cublaslt_heuristic,cublaslt_autotune,torch

# 1. the grid sweep from an empty build cache, the README's command (the pick only: refinement
#    steps would build new variants inside every track); resumes when the session exists
if [ -d sessions/grid-h100 ]; then
  l2tui sweep --session sessions/grid-h100 --resume --max-seconds "$BOX"
else
  l2tui sweep --shapes grid --steps 0 --seeds 3 --session sessions/grid-h100 --max-seconds "$BOX"
fi
python -m harness winners from-dir --kernels sessions/grid-h100/winners --acc f32 --out "$OUT/winners-f32.json"

# 2. its winners against every library, per call and back to back in one run
#    (label l2: the known-kernels store reads the winners' per-call times from it)
l2tui bench --kernels sessions/grid-h100/winners --label l2 --baselines "$ALL" --timing both \
  --limit-seconds "$BOX" --out "$OUT/kernels-offline.json"
# the bundled H100 layer of the known-kernels store (harness/known.py): keyed by the GPU's own name
python - "$OUT" <<'PY'
import json, sys
from harness.known import KNOWN_SMS
from pathlib import Path
out = Path(sys.argv[1])
meta = json.loads((out / "kernels-offline.json").read_text())["meta"]
# the layer's other winners files (the model shapes) stay listed, each with its own bench
old = json.loads((out / "gpu.json").read_text()) if (out / "gpu.json").is_file() else {}
winners = ["winners-f32.json"] + [w for w in old.get("winners", []) if w != "winners-f32.json"]
bench = {**old.get("bench", {}), "f32": "kernels-offline.json"}
doc = {"format": "l2tui-known-gpu/1", "gpu": meta["gpu"], "sms": KNOWN_SMS[meta["gpu"]],
       "cuda_major": int(str(meta.get("cuda_driver") or meta["cuda"]).split(".")[0]),
       "timing": "offline, per call", "date": meta["date"][:10], "git": meta["git_rev"],
       "driver": meta["driver"], "winners": winners, "bench": bench,
       "baseline": "cublaslt_autotune"}
(out / "gpu.json").write_text(json.dumps(doc, indent=1) + "\n")
PY

# 3. the f16 sample100 (f16 accumulation: its own sweep and bench)
l2tui sweep --shapes sample100 --acc f16 --session sessions/sample100-f16-h100 --max-seconds "$BOX" \
  || l2tui sweep --session sessions/sample100-f16-h100 --resume --max-seconds "$BOX"
l2tui bench --kernels sessions/sample100-f16-h100/winners --label h100 --acc f16 --shapes sample100 \
  --baselines "$ALL" --timing both --limit-seconds "$BOX" --out "$OUT/kernels-f16-sample100.json"

# 4. transfer: the H200 winners beside the H100 ones on the H100, sample100
python -m harness winners render --winners results/h200/winners-f32.json --out "$OUT/.h200-winners"
l2tui bench --kernels sessions/grid-h100/winners --label h100 --kernels "$OUT/.h200-winners" --label h200 \
  --shapes sample100 --baselines "$ALL" --timing both --limit-seconds "$BOX" --out "$OUT/transfer-sample100.json"

# 5. the CUDA-L2 H100 kernels through the cuda-l2 adapter, beside ours and every library, on the
#    stratified sample100 (the grid's own sample: every M, N and K range), then all shapes if time allows
l2tui bench --kernels sessions/grid-h100/winners --label h100 --abi l2 --kernels "$THEIRS" --label cuda_l2 \
  --abi cuda-l2 --shapes sample100 --baselines "$ALL" --timing both --limit-seconds "$BOX" \
  --out "$OUT/cuda-l2-sample100.json"
l2tui bench --kernels sessions/grid-h100/winners --label h100 --abi l2 --kernels "$THEIRS" --label cuda_l2 \
  --abi cuda-l2 --shapes grid --baselines "$ALL" --timing both --limit-seconds "$BOX" \
  --out "$OUT/cuda-l2-grid.json"
echo "h100_run: done; results in $OUT"
