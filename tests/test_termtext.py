"""Model and kernel text reaches a terminal only escaped (issue 51): headless progress, error and
summary lines show control characters as visible escapes."""

from __future__ import annotations

import pytest

import io


from harness.build import build
from harness.termtext import VisibleStream, visible
from harness.testkernels import source as kernel_source
from l2tui.cli import main as cli_main
from l2tui.commands.run import Progress

HOSTILE = "\x1b]52;c;SGVsbG8=\x07\x1b[2J\x1b]0;owned\x07"


def test_visible_escapes_c0_c1_del_and_bidi_and_keeps_plain_text():
    text = "ok é 漢 \t" + HOSTILE + "\x9b31m\x7f\u202eevil\u2066"
    out = visible(text)
    assert out.startswith("ok é 漢 \t")
    assert "\\x1b]52;c;SGVsbG8=\\x07\\x1b[2J" in out and "\\x9b" in out and "\\x7f" in out
    assert "\\u202e" in out and "\\u2066" in out
    assert not any(ord(c) < 0x20 and c != "\t" or 0x7f <= ord(c) <= 0x9f for c in out)
    assert visible("a\nb") == "a\\x0ab" and visible("a\nb", single_line=False) == "a\nb"


@pytest.mark.compile
def test_a_compile_error_quoting_escape_sequences_prints_escaped(tmp_path):
    src = f'#error "{HOSTILE}"\n' + kernel_source("testgood_simple")
    res = build(src, arch="sm_90a", use_cache=False)
    assert not res.ok
    ev = {"type": "compiled", "track": "t", "step": 1, "ok": False, "time": 0.0,
          "errors": [e.to_dict() for e in res.errors]}
    out = io.StringIO()
    Progress(out=out)(ev)
    line = out.getvalue()
    assert "compile error:" in line and "\x1b" not in line and "\x07" not in line
    assert "\\x1b" in line and line.count("\n") == 1


def test_a_multi_line_model_text_stays_one_progress_line():
    out = io.StringIO()
    Progress(out=out)({"type": "hint", "track": "t", "time": 0.0, "text": "one\ntwo\x1b[2J"})
    assert out.getvalue().count("\n") == 1 and "\x1b" not in out.getvalue()


def test_an_error_line_is_escaped(tmp_path, capsys):
    bad = tmp_path / "sess\x1b[2Jion"
    assert cli_main(["export", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2J" in err and err.count("\n") == 1


def test_the_visible_stream_keeps_newlines_and_escapes_the_rest():
    buf = io.StringIO()
    VisibleStream(buf).write("row 1\x1b[31m\nrow 2\n")
    assert buf.getvalue() == "row 1\\x1b[31m\nrow 2\n"


def test_the_visible_stream_keeps_a_progress_bars_leading_carriage_return_only():
    buf = io.StringIO()
    VisibleStream(buf).write("\r[###...] 1/3 k\r\x1b[2Jevil")
    assert buf.getvalue() == "\r[###...] 1/3 k\\x0d\\x1b[2Jevil"


def test_python_m_harness_escapes_what_it_prints(capsys):
    """``python -m harness`` writes through the same escaping as ``l2tui bench``: an error quoting
    text from the command line (or a kernel, a worker) reaches the terminal escaped, in one line."""
    from harness.__main__ import main as harness_main

    hostile = "k" + HOSTILE
    rc = harness_main(["bench", "--kernels", "d1", "--kernels", "d2", "--label", hostile, "--label", hostile])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--label values must differ" in err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b]52;c;" in err


def test_a_python_m_harness_mistake_is_one_line_without_the_usage_block(capsys):
    from harness.__main__ import main as harness_main

    for argv in (["bench", "--mode", "fast"], ["frobnicate"], ["bench", "--replays", "many"]):
        with pytest.raises(SystemExit) as e:
            harness_main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1, err
        assert err.startswith("python -m harness") and "usage:" not in err and "--help" in err
