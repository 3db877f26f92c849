#!/bin/bash
# GPU side of tools/probes/family_variants.py: bench every variant folder against cuBLASLt
# autotuned (every harness check), optionally profile some with ncu, print one line per
# (variant, shape); result files land in $RESULTS (default variants-results/).
#   CFGS="name name" VARIANTS=variants [CAP=40] [PROFILE="name:MxNxK"] bash tools/probes/family_variants.sh
D=${VARIANTS:-variants}
R=${RESULTS:-variants-results}; mkdir -p $R
for c in $CFGS; do
  echo "== $c at $SECONDS s"
  timeout -k 5 ${CAP:-40} python3 -m harness bench --shapes $D/shapes --kernels $D/$c --label $c \
    --baselines cublaslt_autotune --out $R/$c.json --limit-seconds $(( ${CAP:-40} - 10 )) > $R/$c.log 2>&1
  echo "rc=$?"
done
for p in ${PROFILE:-}; do  # name:MxNxK
  c=${p%%:*}; s=${p##*:}
  timeout 60 python3 -m harness profile --shape $s --kernel $D/$c.cu --out $R/ncu-$c-$s.json > $R/ncu-$c-$s.log 2>&1
  echo "ncu $p rc=$?"
done
python3 - <<'PY'
import glob, json, os
for f in sorted(glob.glob(os.environ.get("RESULTS", "variants-results") + "/*.json")):
    lab = os.path.basename(f)[:-5]
    if lab.startswith("ncu-"):
        continue
    for r in json.load(open(f))["rows"]:
        t, st = r["times_ms"], r["status"].get(lab)
        l, b = t.get(lab), t.get("cublaslt_autotune")
        det = (r["checks"].get(lab) or {}).get("detail", "")[:80]
        print(f"{lab:15s} {r['m']:>6}x{r['n']:<5}x{r['k']:<5} {str(st):7s} {(l or 0) * 1e3:8.2f} "
              f"{(b or 0) * 1e3:8.2f} x{(b / l if l and b else 0):.3f} {det if st != 'ok' else ''}")
PY
