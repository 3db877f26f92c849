"""tools/commit_winners.py: a pick's winners become one source per configuration plus links."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_winners_are_linked_to_one_source_per_configuration(tmp_path):
    pre = tmp_path / "prebuilt"
    pre.mkdir()
    (pre / "cfg-a.cu").write_text("// a\n")
    (pre / "cfg-b.cu").write_text("// b\n")
    pick = tmp_path / "pick.json"
    pick.write_text(json.dumps({"timings": [
        {"shape": [64, 64, 64], "winner": "cfg-a"},
        {"shape": [128, 64, 64], "winner": "cfg-a"},
        {"shape": [256, 64, 64], "winner": "cfg-b"},
        {"shape": [512, 64, 64], "winner": None},          # no winner: no kernel file
    ]}))
    out = tmp_path / "kernels"
    (out / "stale").mkdir(parents=True)                    # an earlier folder is replaced
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "commit_winners.py"), "--pick", str(pick),
                        "--prebuilt", str(pre), "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "3 shapes, 2 configurations" in r.stdout
    assert sorted(p.name for p in out.iterdir()) == ["128_64_64.cu", "256_64_64.cu", "64_64_64.cu", "configs"]
    link = out / "128_64_64.cu"
    assert link.is_symlink() and not Path(link.readlink()).is_absolute()
    assert link.read_text() == "// a\n" and (out / "256_64_64.cu").read_text() == "// b\n"
