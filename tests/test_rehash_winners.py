"""``harness.machinecode`` and ``tools/rehash_winners.py``: a winners file outlives a template edit
only where nvcc emits the same device code for every configuration it re-hashes (real nvcc,
cubins compared section by section)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import families as F
from harness import winners as W
from harness.errors import HarnessError
from harness.machinecode import elf_sections, same_code
from harness.shapes import Shape

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import rehash_winners as R  # noqa: E402

KNOBS = {"TILE_M": "64", "TILE_N": "64", "STAGES": "4", "CLUSTER_K": "1", "PDL": "0"}


def _winners_of(knobs: dict[str, str], source: str) -> W.Winners:
    cfg = F.Config.of("sm90_ksplit", {**knobs, "ACC": "ACC_F32"})
    return W.Winners("f32", "test", {cfg.name: W.Winner(cfg.name, cfg, W.sha256(source))},
                     {Shape(256, 256, 1024): cfg.name})


def test_elf_sections_reads_a_section_table():
    """The cubin reader finds named sections of an ordinary ELF file (this interpreter's)."""
    secs = elf_sections(Path(sys.executable).resolve().read_bytes())
    assert ".text" in secs or ".interp" in secs
    with pytest.raises(HarnessError):
        elf_sections(b"not an elf file at all, long enough to read a header from" * 2)


@pytest.mark.compile
@pytest.mark.slow
def test_same_code_tells_a_comment_from_a_code_change(tmp_path, monkeypatch):
    """A comment edit moves every line (another line table, another module id) yet leaves the
    machine code as it was; a knob that changes the kernel does not."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    src = F.render("sm90_ksplit", KNOBS)
    ok, why = same_code(src, "// a comment moves every line\n" + src, "sm_90a")
    assert ok, why
    other = F.render("sm90_ksplit", {**KNOBS, "STAGES": "6"})
    ok, why = same_code(src, other, "sm_90a")
    assert not ok and "differs" in why
    ok, why = same_code(src, src + "\n__device__ int l2_other_symbol;\n", "sm_90a")   # a global, no instruction
    assert not ok


@pytest.mark.slow
def test_write_rehashes_only_what_builds_the_same(tmp_path, monkeypatch):
    """Against HEAD's template: a configuration recorded with HEAD's render is left alone (its
    hash still matches); one recorded with a hash no revision renders is kept and reported."""
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    src = F.render("sm90_ksplit", KNOBS)
    current = tmp_path / "current.json"
    current.write_text(W.dump(_winners_of(KNOBS, src)))
    assert R.main([str(current), "--against", head.stdout.strip(), "--write"]) == 0
    assert json.loads(current.read_text()) == json.loads(W.dump(_winners_of(KNOBS, src)))
    stranger = tmp_path / "stranger.json"
    stranger.write_text(W.dump(_winners_of(KNOBS, "a source no template renders")))
    before = stranger.read_text()
    assert R.main([str(stranger), "--against", head.stdout.strip(), "--write"]) == 1
    assert stranger.read_text() == before


def test_an_unreadable_winners_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "w.json"
    bad.write_text("{not json")
    assert R.main([str(bad), "--against", "HEAD"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rehash_winners: ") and "\n" not in err


def test_a_template_at_a_revision_has_its_kernel_parts_pasted_from_that_revision():
    """sm90_cutlass names the split-K reduce part: the template the tool reads at HEAD (the tree
    as committed) is the one the registry renders today, part included."""
    fam = F.get_family("sm90_cutlass")
    assert R.template_at("HEAD", fam) == F._read_template(fam.file)
    assert "// l2: part" not in R.template_at("HEAD", fam)
