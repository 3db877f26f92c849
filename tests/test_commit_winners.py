"""tools/commit_winners.py: a sweep's winners become one source per configuration plus links."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.families import catalog

ROOT = Path(__file__).resolve().parent.parent


def test_winners_are_linked_to_one_source_per_configuration(tmp_path):
    a, b = catalog("f32", "sm_90a")[:2]
    win = tmp_path / "session" / "winners"        # what l2tui sweep writes
    win.mkdir(parents=True)
    (win / "64_64_64.cu").write_text(a.source())
    (win / "128_64_64.cu").write_text(a.source())
    (win / "256_64_64.cu").write_text(b.source())
    hand = "// edited by hand\n" + b.source().replace("// l2: knobs begin", "// (knobs)")
    (win / "512_64_64.cu").write_text(hand)        # not a family configuration: kept as is
    out = tmp_path / "kernels"
    (out / "stale").mkdir(parents=True)            # an earlier folder is replaced
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "commit_winners.py"), "--winners", str(win),
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "4 shapes, 2 configurations" in r.stdout
    assert sorted(p.name for p in out.iterdir()) == ["128_64_64.cu", "256_64_64.cu", "512_64_64.cu",
                                                     "64_64_64.cu", "configs"]
    link = out / "128_64_64.cu"
    assert link.is_symlink() and not Path(link.readlink()).is_absolute()
    assert link.read_text() == a.source() and (out / "256_64_64.cu").read_text() == b.source()
    assert not (out / "512_64_64.cu").is_symlink() and (out / "512_64_64.cu").read_text() == hand


def test_an_empty_winners_folder_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "commit_winners.py"), "--winners", str(tmp_path),
                        "--out", str(tmp_path / "k")], capture_output=True, text=True)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "no M_N_K.cu" in r.stderr
