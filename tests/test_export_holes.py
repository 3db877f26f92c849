"""Export holds kernels to the candidate rules (issue 51): the source policy refuses a kernel in
one line, --build compiles each kernel through the build driver's sandbox with a scrubbed log,
an unwritable --out is one line, and the summary says how many shapes run a kernel."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from harness import sandbox
from l2tui.cli import main as cli_main
from l2tui.export.cdispatch import compile_kernel_object
from tests.cli_support import one_line_error
from tests.fixtures.export import make_session as fx

SECRET = "sk-THE-SECRET-VALUE-4711"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    return fx.make_session(tmp_path_factory.mktemp("sess") / "run-1")


def _with_prefix_in_every_kernel(recorded: Path, tmp_path: Path, prefix: str) -> Path:
    """A copy of the session whose kernels all start with ``prefix`` (re-hashed, events updated)."""
    s = tmp_path / "copy"
    shutil.copytree(recorded, s)
    events = (s / "events.jsonl").read_text()
    rewards = (s / "rewards.jsonl").read_text()
    for f in sorted((s / "kernels").glob("*.cu")):
        text = prefix + f.read_text()
        new = hashlib.sha256(text.encode()).hexdigest()
        (s / "kernels" / f"{new}.cu").write_text(text)
        events, rewards = events.replace(f.stem, new), rewards.replace(f.stem, new)
        f.unlink()
    (s / "events.jsonl").write_text(events)
    (s / "rewards.jsonl").write_text(rewards)
    return s


def test_export_refuses_a_kernel_that_includes_a_file_elsewhere(recorded, tmp_path, capsys):
    secret = tmp_path / "secret"
    secret.write_text(f"{SECRET}\n")
    s = _with_prefix_in_every_kernel(recorded, tmp_path, f'#include "{secret}"\n')
    out = tmp_path / "lib"
    assert cli_main(["export", str(s), "--out", str(out), "--build"]) == 2
    err = one_line_error(capsys)
    assert "is refused: line 1: source policy (include)" in err and SECRET not in err
    assert not out.exists()


@pytest.mark.compile
@pytest.mark.skipif(not sandbox.probe().works, reason="bubblewrap cannot start a sandbox here")
@pytest.mark.compile
def test_a_kernel_is_compiled_in_the_sandbox_without_the_callers_environment(tmp_path, monkeypatch):
    """A header found only through the caller's CPATH would be read by a bare nvcc and quoted in
    its error; the build driver's sandbox clears the environment and hides the folder."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "l2_extra.h").write_text(f"{SECRET.replace('-', '_')} leak;\n")
    monkeypatch.setenv("CPATH", str(inc))
    monkeypatch.setenv("L2TUI_SANDBOX", "require")
    src = "#include <l2_extra.h>\n" + fx.tiled(16)
    with pytest.raises(Exception) as e:
        compile_kernel_object(src, "kernels/1_1_1.cu", tmp_path / "w", ["-c", "-std=c++17"], 300.0)
    msg = str(e.value)
    assert "compiling kernels/1_1_1.cu failed" in msg and "l2_extra.h" in msg
    assert SECRET.replace("-", "_") not in msg


def test_an_out_folder_that_cannot_be_written_is_one_line(recorded, capsys):
    assert cli_main(["export", str(recorded), "--out", "/proc/x"]) == 2
    err = one_line_error(capsys)
    assert "/proc/x" in err


def test_the_summary_says_how_many_shapes_run_a_kernel_and_how_many_the_fallback(recorded, tmp_path, capsys):
    import json

    out = tmp_path / "lib"
    assert cli_main(["export", str(recorded), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    ks = json.loads((out / "manifest.json").read_text())["kernels"]
    fb = sum(1 for k in ks if k.get("fallback"))
    assert fb and fb < len(ks)
    assert (f"{len(ks)} shapes: {len(ks) - fb} run an exported kernel, {fb} the cuBLAS fallback "
            "(the kernel was slower than it, or within 2 %)") in text
    assert "accepted" not in text.splitlines()[0]
