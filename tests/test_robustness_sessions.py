"""Sessions under stress: one writer at a time, resume budgets, outputs inside a session, bad fields.

Everything goes through the real command line (``l2tui.cli.main``) or a real second
process; nothing here needs a GPU (``--recorded`` replays evaluations recorded on one,
and the cases stop before any build).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from l2tui.cli import main as cli_main
from l2tui.config import Config
from l2tui.errors import SessionError
from l2tui.session import LOCK_FILE, Session, is_locked
from tests.cli_support import one_line_error
from tests.fixtures.export import make_session as fx

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "tests" / "fixtures" / "recorded" / "evaluations.json"
SEED = (ROOT / "tests" / "fixtures" / "recorded" / "seed_tiled.cu").read_text()


def finished_session(path: Path, *, max_steps: int = 1, shape=(64, 64, 64)) -> Path:
    """A session whose only track ended on its step budget (what `run --max-steps 1` leaves)."""
    s = Session.create(path, config={"loop": {"max_steps": max_steps}, "harness": {"baseline": "cublas"}},
                       gpu={"name": "NVIDIA H200", "arch": "sm_90a"}, versions={})
    tid = f"{shape[0]}x{shape[1]}x{shape[2]}-f32"
    sha = s.put_kernel(SEED)
    s.append("track_added", track=tid, shape=list(shape), acc="f32", baseline="cublas")
    s.append("track_state", track=tid, state="running")
    s.append("candidate", track=tid, step=0, sha=sha, parent=None, origin="seed", policy="search", flags=[])
    s.append("compiled", track=tid, step=0, sha=sha, ok=True, ptxas={}, errors=[], seconds=1.0, cached=False)
    s.append("checked", track=tid, step=0, sha=sha, ok=True, status="ok")
    s.append("timed", track=tid, step=0, sha=sha, mode="offline", times_ms={"candidate": 0.01, "cublas": 0.012},
             baseline="cublas", speedup=1.2)
    s.append("best", track=tid, sha=sha, speedup=1.2, baseline="cublas")
    s.append("checkpoint", track=tid, step=1, steps_done=max_steps, stable=0, wall_s=1.0)
    s.append("track_state", track=tid, state="done")
    s.append("track_done", track=tid, reason=f"max_steps ({max_steps})", best_sha=sha, best_speedup=1.2)
    s.append("session_ended", reason="finished")
    return path


def resume_argv(path: Path) -> list[str]:
    return ["run", "--headless", "--session", str(path), "--resume", "--recorded", str(RECORDED),
            "--policy", "search", "--quiet"]


# ------------------------------------------------------------------ one writer per session

HOLDER = textwrap.dedent("""
    import sys
    from l2tui.session import Session
    s = Session.open(sys.argv[1], writer="run --resume")
    print("locked", flush=True)
    for line in sys.stdin:          # one event per line the test sends, then exit
        if line.strip() == "quit":
            break
        s.append("hint", track=None, text=line.strip())
        print("appended", flush=True)
""")


@pytest.fixture
def holder(tmp_path):
    """A real second process holding the session's writer lock."""
    path = finished_session(tmp_path / "s")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "locked"
    yield path, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def test_a_second_writer_gets_one_line_naming_the_holder(holder, capsys):
    path, proc = holder
    before = (path / "events.jsonl").read_bytes()
    assert cli_main(resume_argv(path)) == 2
    err = one_line_error(capsys)
    assert f"pid {proc.pid}" in err and "l2tui run --resume" in err and "on host" in err and "since 20" in err
    assert cli_main(["sweep", "--session", str(path), "--resume", "--recorded", str(RECORDED)]) == 2
    assert f"pid {proc.pid}" in one_line_error(capsys)
    assert (path / "events.jsonl").read_bytes() == before   # the refused writers wrote nothing
    with pytest.raises(SessionError, match="being written by"):
        Session.open(path, writer="app --resume")


@pytest.mark.compile
def test_a_running_l2tui_run_holds_its_session(tmp_path, capsys):
    """The holder is a real `l2tui run --resume` (its track reopened by --max-steps 3, so it builds)."""
    import time

    path = finished_session(tmp_path / "s")
    proc = subprocess.Popen([sys.executable, "-m", "l2tui.cli", *resume_argv(path), "--max-steps", "3"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "L2TUI_CACHE_DIR": str(tmp_path / "cache")})
    try:
        for _ in range(6000):                       # wait (up to minutes on a busy machine) for it to start
            if is_locked(path) or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert proc.poll() is None and is_locked(path)
        assert cli_main(resume_argv(path)) == 2
        err = one_line_error(capsys)
        assert f"pid {proc.pid} (l2tui run --resume)" in err
    finally:
        proc.kill()
        proc.wait(timeout=60)
    events = Session.open(path, writer="check").events
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert sum(e["type"] == "session_resumed" for e in events) <= 1


def test_the_holder_goes_on_writing_dense_seqs(holder):
    path, proc = holder
    for i in range(5):
        proc.stdin.write(f"hint {i}\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "appended"
    with pytest.raises(SessionError):
        Session.open(path, writer="run --resume")
    proc.stdin.write("quit\n")
    proc.stdin.flush()
    assert proc.wait(timeout=30) == 0
    seqs = [e["seq"] for e in Session.open(path).events]
    assert seqs == list(range(len(seqs)))       # no duplicates, no gaps
    s = Session.open(path, writer="run --resume")  # the lock went away with the process
    s.close()


def test_kill_9_frees_the_lock(holder):
    path, proc = holder
    assert is_locked(path)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not is_locked(path) and (path / LOCK_FILE).is_file()   # a stale file blocks nobody
    Session.open(path, writer="run --resume").close()


def test_readers_do_not_repair_a_session_a_writer_holds(holder):
    path, proc = holder
    with open(path / "events.jsonl", "ab") as f:
        f.write(b'{"seq": 999, "type": "hal')           # a line the holder is in the middle of writing
    size = (path / "events.jsonl").stat().st_size
    s = Session.open(path)                               # a reader (replay, export)
    assert any("torn" in p for p in s.problems)
    assert (path / "events.jsonl").stat().st_size == size  # ...that trims nothing under a live writer


# ------------------------------------------------------------------ resume keeps its budgets

def test_resume_keeps_the_sessions_max_steps(tmp_path, capsys):
    path = finished_session(tmp_path / "s", max_steps=1)
    n_before = len(Session.open(path).events)
    assert cli_main(resume_argv(path)) == 0, capsys.readouterr().err
    events = Session.open(path).events[n_before:]
    types = [e["type"] for e in events]
    assert "candidate" not in types and "track_done" not in types, types   # max_steps 1 stays 1, not 20
    assert [e["seq"] for e in Session.open(path).events] == list(range(n_before + len(events)))


def test_resume_budgets_from_the_session_unless_the_command_line_sets_them():
    cfg = Config()
    saved = {"loop": {"max_steps": 1, "token_budget": 500, "debug_rounds": 9}}
    kept = cfg.with_session_budgets(saved)
    assert kept.loop["max_steps"] == 1 and kept.loop["token_budget"] == 500
    assert kept.loop["debug_rounds"] == cfg.loop["debug_rounds"]          # only budgets come from the session
    raised = cfg.with_overrides({"loop.max_steps": 30}).with_session_budgets(saved, explicit={"loop.max_steps"})
    assert raised.loop["max_steps"] == 30 and raised.loop["token_budget"] == 500


# ------------------------------------------------------------------ outputs inside the input session

@pytest.fixture
def rec_session(tmp_path) -> Path:
    return fx.make_session(tmp_path / "rec")


def _digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file() and p.name != LOCK_FILE}


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("target", ["events.jsonl", "rewards.jsonl", "sub/rows.jsonl", "."])
def test_rl_data_refuses_an_output_inside_its_session(rec_session, target, force, capsys):
    before = _digest(rec_session)
    argv = ["rl-data", str(rec_session), "--format", "trl", "--out", str(rec_session / target)]
    assert cli_main(argv + (["--force"] if force else [])) == 2
    assert "inside the session" in one_line_error(capsys) or target == "."
    assert _digest(rec_session) == before
    Session.open(rec_session, writer="run --resume").close()   # still a session that resumes


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("target", [".", "kernels", "export"])
def test_export_refuses_an_output_inside_its_session(rec_session, target, force, capsys):
    before = _digest(rec_session)
    argv = ["export", str(rec_session), "--out", str(rec_session / target)]
    assert cli_main(argv + (["--force"] if force else [])) == 2
    assert "overlaps the session" in one_line_error(capsys)
    assert _digest(rec_session) == before and not (rec_session / "export").exists()


def test_rl_data_through_a_symlink_into_the_session_is_refused(rec_session, tmp_path, capsys):
    link = tmp_path / "link"
    link.symlink_to(rec_session)
    before = _digest(rec_session)
    assert cli_main(["rl-data", str(rec_session), "--format", "trl", "--out", str(link / "events.jsonl"),
                     "--force"]) == 2
    one_line_error(capsys)
    assert _digest(rec_session) == before


# ------------------------------------------------------------------ one line for every malformed field

def _edit_event(path: Path, typ: str, **fields) -> None:
    lines = (path / "events.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        e = json.loads(line)
        if e["type"] == typ:
            e.update(fields)
            lines[i] = json.dumps(e)
            break
    (path / "events.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("typ,fields", [
    ("track_added", {"shape": [64, 64]}),
    ("track_added", {"shape": "64x64x64"}),
    ("track_added", {"shape": [64, 64, 10 ** 12]}),
    ("track_added", {"shape": [64, 64, 64.0]}),
    ("track_added", {"shape": [True, 64, 64]}),
    ("track_added", {"shape": None}),
    ("track_added", {"track": ["not", "a", "name"]}),
    ("track_added", {"acc": 32}),
    ("checkpoint", {"steps_done": "many"}),
    ("checkpoint", {"wall_s": {"s": 1}}),
    ("candidate", {"sha": 7}),
])
def test_malformed_session_events_give_one_line_on_resume(tmp_path, typ, fields, capsys):
    path = finished_session(tmp_path / "s")
    _edit_event(path, typ, **fields)
    assert cli_main(resume_argv(path)) == 2
    err = one_line_error(capsys)
    assert "events.jsonl" in err and "damaged" in err


@pytest.mark.parametrize("toml,needle", [
    ('[config.loop]\nmax_steps = "ten"\n', "max_steps"),
    ('[config.loop]\nmax_steps = 0\n', "max_steps"),
    ('config = 5\n', "[config] is not a table"),
    ('gpu = "H200"\n', "[gpu] is not a table"),
])
def test_malformed_session_toml_gives_one_line_on_resume(tmp_path, toml, needle, capsys):
    path = finished_session(tmp_path / "s")
    (path / "session.toml").write_text(toml)
    assert cli_main(resume_argv(path)) == 2
    assert needle in one_line_error(capsys)


@pytest.mark.parametrize("typ,fields,needle", [
    ("track_added", {"shape": [128, 128]}, "shape must be [M, N, K]"),
    ("track_added", {"shape": "128x128x128"}, "shape must be [M, N, K]"),
    ("track_added", {"baseline": {"x": 1}}, "malformed baseline"),
    ("candidate", {"flags": "-O3 $(id)"}, "malformed flags"),
    ("timed", {"times_ms": [0.1]}, "malformed times_ms"),
    ("timed", {"mode": 3}, "malformed mode"),
])
def test_malformed_fields_in_an_export_source_give_one_line(rec_session, tmp_path, typ, fields, needle, capsys):
    _edit_event(rec_session, typ, **fields)
    assert cli_main(["export", str(rec_session), "--out", str(tmp_path / "exp")]) == 2
    assert needle in one_line_error(capsys)
    assert not (tmp_path / "exp").exists()


@pytest.mark.parametrize("typ,fields", [
    ("track_done", {"reason": [1, 2]}), ("track_state", {"state": 5}), ("hint", {"text": {"a": 1}}),
    ("best", {"speedup": "fast"}), ("timed", {"times_ms": "0.1"}), ("candidate", {"flags": "-O3"}),
])
def test_malformed_fields_resume_relies_on_give_one_line(tmp_path, typ, fields, capsys):
    path = finished_session(tmp_path / "s")
    if typ == "hint":
        Session.open(path).append("hint", track="64x64x64-f32", text="go")
    _edit_event(path, typ, **fields)
    assert cli_main(resume_argv(path)) == 2
    assert "damaged" in one_line_error(capsys)


@pytest.mark.parametrize("command", ["export", "rl-data"])
def test_an_output_under_a_file_gives_one_line(rec_session, tmp_path, command, capsys):
    f = tmp_path / "a-file"
    f.write_text("not a folder\n")
    argv = ["export", str(rec_session), "--out", str(f / "exp")] if command == "export" else \
        ["rl-data", str(rec_session), "--format", "trl", "--out", str(f / "rows.jsonl")]
    assert cli_main(argv) == 2
    assert "is a file, not a folder" in one_line_error(capsys)
    assert f.read_text() == "not a folder\n"


RESULT_ROW = {"m": 64, "n": 64, "k": 64, "times_ms": {"cublas": 0.01}, "roofline_ms": 0.001}


@pytest.mark.parametrize("bad", [
    {"m": "64"}, {"m": 10 ** 12}, {"m": True}, {"m": [64, 64]}, {"times_ms": [1, 2]}, {"times_ms": {"cublas": "x"}},
])
def test_malformed_result_rows_give_one_line(tmp_path, bad, capsys):
    from harness.results import BASELINE_LABELS, META_REQUIRED, ROW_REQUIRED, main

    meta = {k: "x" for k in META_REQUIRED}
    meta.update(mode="offline", acc="f32")
    row = {k: None for k in ROW_REQUIRED}
    row.update(RESULT_ROW, **bad)
    src = tmp_path / "r.json"
    src.write_text(json.dumps({"meta": meta, "rows": [row]}))
    assert main(["subset", str(src), str(tmp_path / "out.json"), "--labels", BASELINE_LABELS[0]]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("harness.results: error:") and "\n" not in err and "rows[0]" in err


def test_a_binary_result_file_gives_one_line(tmp_path, capsys):
    from harness.results import main

    src = tmp_path / "r.json"
    src.write_bytes(b"\xff\xfe\x00garbage")
    assert main(["subset", str(src), str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not a result file" in err
