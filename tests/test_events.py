"""l2tui.events: typed records for every event, validated on write and on load, round trips byte-exact."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from l2tui import events as E
from l2tui.errors import SessionError
from l2tui.session import EVENTS_FILE, Session

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = sorted((ROOT / "tests" / "fixtures" / "sessions").glob("**/events.jsonl"))
SHA = "ab" * 32
SECRET_LOOKING = "VALUE-THAT-MUST-NOT-BE-ECHOED"


def _line(obj: dict) -> str:
    """The bytes the session writes for one event (Session._line)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _new(tmp_path: Path) -> Session:
    return Session.create(tmp_path / "s", config={"policy": "search"}, gpu={"name": "GPU"}, versions={"l2tui": "t"})


def test_fixture_sessions_exist():
    assert len(FIXTURES) >= 3


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.parent.name)
def test_every_recorded_event_is_a_known_type_and_round_trips_byte_for_byte(path):
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    for line in lines:
        obj = json.loads(line)
        ev = E.parse(obj)
        assert not isinstance(ev, E.GenericEvent), obj["type"]
        assert isinstance(ev, E.EVENT_TYPES[obj["type"]])
        assert _line(E.to_dict(ev)) == _line(obj)
        assert list(E.to_dict(ev)) == list(obj)  # same keys, same order


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.parent.name)
def test_fixture_sessions_open_unchanged_and_typed(tmp_path, path):
    dst = tmp_path / path.parent.name
    shutil.copytree(path.parent, dst)
    before = (dst / EVENTS_FILE).read_bytes()
    s = Session.open(dst)
    assert (dst / EVENTS_FILE).read_bytes() == before
    assert [E.to_dict(r) for r in s.records] == s.events
    assert s.schema == 1  # recorded before the schema field: version 1
    assert isinstance(s.records[0], E.SessionStarted) and s.records[0].gpu == s.events[0]["gpu"]


def test_typed_fields_read_as_written():
    ev = E.parse({"seq": 4, "time": 1.5, "type": "timed", "track": "64x64x64-f32", "step": 2, "sha": SHA,
                  "mode": "offline", "times_ms": {"candidate": 0.1}, "roofline_ms": 0.05, "baseline": "cublas",
                  "speedup": 1.25})
    assert isinstance(ev, E.Timed)
    assert (ev.seq, ev.track, ev.step, ev.sha, ev.mode, ev.speedup) == (4, "64x64x64-f32", 2, SHA, "offline", 1.25)
    assert ev.times_ms == {"candidate": 0.1} and ev.extra == {}


def test_an_int_is_a_float_but_a_bool_is_not_a_number():
    assert E.parse({"seq": 0, "type": "best", "speedup": 2}).speedup == 2
    with pytest.raises(SessionError, match="malformed speedup"):
        E.parse({"seq": 0, "type": "best", "speedup": True})
    with pytest.raises(SessionError, match="malformed step"):
        E.parse({"seq": 0, "type": "stage", "step": 1.0})


def test_unknown_fields_are_kept_in_order():
    obj = {"seq": 7, "time": 2.0, "type": "candidate", "track": "t", "future": {"x": [1]}, "sha": SHA, "gpu": "GPU-1"}
    ev = E.parse(obj)
    assert isinstance(ev, E.Candidate) and ev.extra == {"future": {"x": [1]}, "gpu": "GPU-1"}
    assert list(E.to_dict(ev)) == list(obj) and E.to_dict(ev) == obj


def test_an_unknown_event_type_loads_as_a_generic_event():
    obj = {"seq": 3, "time": 1.0, "type": "quantum_leap", "track": 5, "anything": [None]}
    ev = E.parse(obj)
    assert type(ev) is E.GenericEvent and ev.type == "quantum_leap"
    assert ev.extra == {"track": 5, "anything": [None]}  # nothing checked: the type is not known here
    assert E.to_dict(ev) == obj


@pytest.mark.parametrize("obj,field", [
    ({"seq": 5, "type": "best", "track": "t", "speedup": SECRET_LOOKING}, "speedup"),
    ({"seq": 5, "type": "candidate", "flags": ["-O3", 7]}, "flags"),
    ({"seq": 5, "type": "candidate", "flags": SECRET_LOOKING}, "flags"),
    ({"seq": 5, "type": "timed", "times_ms": [SECRET_LOOKING]}, "times_ms"),
    ({"seq": 5, "type": "track_state", "state": {"s": SECRET_LOOKING}}, "state"),
    ({"seq": 5, "type": "checkpoint", "steps_done": SECRET_LOOKING}, "steps_done"),
    ({"seq": 5, "type": "session_started", "config": SECRET_LOOKING}, "config"),
    ({"seq": 5, "type": "hint", "track": [SECRET_LOOKING]}, "track"),
    ({"seq": 5, "type": "stage", "time": SECRET_LOOKING}, "time"),
])
def test_a_malformed_field_is_one_line_naming_seq_and_field_not_the_value(obj, field):
    with pytest.raises(SessionError) as ei:
        E.parse(obj, where="s/events.jsonl")
    msg = str(ei.value)
    assert "\n" not in msg and SECRET_LOOKING not in msg
    assert msg == (f"s/events.jsonl: event seq 5 ({obj['type']}) has a malformed {field}; "
                   "the session file is damaged")


def test_a_bad_seq_or_type_is_named_without_echoing_it():
    with pytest.raises(SessionError, match=r"event seq \? \(best\) has a malformed seq"):
        E.parse({"seq": SECRET_LOOKING, "type": "best"})
    with pytest.raises(SessionError, match=r"event seq 2 \(\?\) has a malformed type") as ei:
        E.parse({"seq": 2, "type": [SECRET_LOOKING]})
    assert SECRET_LOOKING not in str(ei.value)
    with pytest.raises(SessionError, match="not a JSON object"):
        E.parse([1, 2])


def test_a_shape_is_checked_like_every_reader_checks_it():
    assert E.parse({"seq": 1, "type": "track_added", "track": "t", "shape": [64, 64, 64]}).shape == [64, 64, 64]
    for bad in ([64, 64], [64, 64, 64.0], [True, 64, 64], "64x64x64", [64, 64, 10 ** 12]):
        with pytest.raises(SessionError, match=r"event seq 1 \(track_added\): shape must be \[M, N, K\]"):
            E.parse({"seq": 1, "type": "track_added", "track": "t", "shape": bad})


def test_a_record_built_in_code_dumps_its_declared_fields_in_order():
    ev = E.Decision(track="t", sha=SHA, action="accept", by="user")
    assert ev.type == E.DECISION
    assert E.to_dict(ev) == {"type": "decision", "track": "t", "sha": SHA, "action": "accept", "by": "user"}
    assert E.payload(ev) == {"track": "t", "sha": SHA, "action": "accept", "by": "user"}
    assert E.parse(E.to_dict(ev)) == ev


def test_the_registry_names_every_constant_once():
    consts = {getattr(E, n) for n in dir(E) if n.isupper() and isinstance(getattr(E, n), str)}
    assert set(E.EVENT_TYPES) == consts - {""}
    for typ, cls in E.EVENT_TYPES.items():
        assert cls.TYPE == typ and cls().type == typ


def test_writers_build_the_event_records():
    """Every event written in l2tui/ is built as its record of ``l2tui.events`` (the loop's
    ``_emit``, a policy's ``ctx.send``, a session's or a sink's ``record``), never as a type and
    loose keywords, so a mistyped field is a ``TypeError`` where the event is made (and a mypy
    finding) rather than a key that reaches the file."""
    loose = re.compile(r"(?:\b_emit|\bemit|\bctx\.send|\bsession\.append|\bs\.append|\bsink\.append)\(\s*"
                       r"(?:ev_schema\.[A-Z_]+\b|\"(?:" + "|".join(E.EVENT_TYPES) + r")\")")
    built = re.compile(r"(?:\b_emit|\bctx\.send|\.record)\(\s*ev_schema\.([A-Za-z]+)\(")
    classes = {cls.__name__ for cls in E.EVENT_TYPES.values()}
    names: set[str] = set()
    for f in (ROOT / "l2tui").rglob("*.py"):
        text = f.read_text(encoding="utf-8")
        assert not loose.search(text), f"{f.relative_to(ROOT)} writes an event from a type and keywords"
        names |= set(built.findall(text))
    assert names <= classes, names - classes
    assert {"TrackAdded", "Candidate", "Compiled", "Checked", "Timed", "Reward", "Best", "SessionEnded",
            "LlmCall", "Stage"} <= names


@pytest.mark.parametrize("cls", list(E.EVENT_TYPES.values()), ids=lambda c: c.TYPE)
def test_a_mistyped_field_of_any_event_record_is_an_error_where_it_is_built(cls):
    with pytest.raises(TypeError, match="kidn"):
        cls(kidn="ok")


def test_a_record_with_an_unknown_field_in_extra_is_refused_and_writes_nothing(tmp_path):
    s = _new(tmp_path)
    before = (s.path / EVENTS_FILE).read_text()
    with pytest.raises(SessionError, match=r"\(timed\) would have unknown field\(s\) spedup"):
        s.record(E.Timed(track="t", step=1, sha=SHA, extra={"spedup": 1.0}))
    assert (s.path / EVENTS_FILE).read_text() == before and len(s.events) == 1


def test_record_writes_the_fields_that_are_set_in_declared_order(tmp_path):
    s = _new(tmp_path)
    d = s.record(E.Checked(track="t", step=2, sha=SHA, ok=False, status="wrong", failed=None, detail="x"))
    line = json.loads((s.path / EVENTS_FILE).read_text().splitlines()[-1])
    assert line == d and list(d) == ["seq", "time", "type", "track", "step", "sha", "ok", "status", "detail"]
    back = Session.open(s.path).records[-1]
    assert isinstance(back, E.Checked) and back.status == "wrong" and back.failed is None


# ------------------------------------------------------------------ the session writes and loads through it

def test_a_new_session_records_the_schema_in_its_first_event(tmp_path):
    s = _new(tmp_path)
    first = json.loads((s.path / EVENTS_FILE).read_text().splitlines()[0])
    assert first["type"] == "session_started" and first["schema"] == E.SCHEMA_VERSION
    assert list(first)[:6] == ["seq", "time", "type", "config", "gpu", "versions"]
    assert Session.open(s.path).schema == E.SCHEMA_VERSION


def test_a_session_of_a_newer_schema_opens_with_a_note(tmp_path):
    s = _new(tmp_path)
    p = s.path / EVENTS_FILE
    lines = p.read_text().splitlines()
    first = json.loads(lines[0])
    first["schema"] = E.SCHEMA_VERSION + 1
    p.write_text("\n".join([_line(first), *lines[1:]]) + "\n")
    s2 = Session.open(s.path)
    assert s2.schema == E.SCHEMA_VERSION + 1
    assert any("schema" in pr for pr in s2.problems)


def test_append_refuses_a_malformed_field_before_writing(tmp_path):
    s = _new(tmp_path)
    before = (s.path / EVENTS_FILE).read_bytes()
    with pytest.raises(SessionError, match=r"event seq 1 \(best\) would have a malformed speedup; it was not written"):
        s.append(E.BEST, track="t", sha=SHA, speedup=SECRET_LOOKING)
    assert (s.path / EVENTS_FILE).read_bytes() == before
    assert len(s.events) == 1 and len(s.records) == 1
    ev = s.append(E.BEST, track="t", sha=SHA, speedup=1.5)  # the seq was not used up
    assert ev["seq"] == 1 and isinstance(s.records[-1], E.Best) and s.records[-1].speedup == 1.5


def test_append_event_writes_a_typed_record(tmp_path):
    s = _new(tmp_path)
    d = s.append_event(E.Hint(track=None, text="use tensor cores"))
    assert d["type"] == "hint" and d["text"] == "use tensor cores" and d["seq"] == 1
    back = Session.open(s.path).records[-1]
    assert isinstance(back, E.Hint) and back.text == "use tensor cores" and back.track is None


def test_unknown_types_and_fields_survive_a_session_load_and_append(tmp_path):
    """A field a newer l2tui wrote is kept as ``extra`` on load and in the file after an append."""
    s = _new(tmp_path)
    s.append("from_the_future", payload={"a": 1})
    s.append(E.TRACK_STATE, track="t", state="queued", requeued=True, gpu="GPU-1")
    s.close()
    p = s.path / EVENTS_FILE
    lines = p.read_text().splitlines()
    newer = {**json.loads(lines[2]), "brand_new": 3}
    p.write_text("\n".join([*lines[:2], _line(newer)]) + "\n")
    s2 = Session.open(s.path, writer="test")
    try:
        assert type(s2.records[1]) is E.GenericEvent and s2.events[1]["payload"] == {"a": 1}
        assert s2.records[2].extra == {"brand_new": 3} and s2.records[2].requeued is True
        s2.append(E.SESSION_ENDED, reason="done")
    finally:
        s2.close()
    rows = [json.loads(x) for x in (s.path / EVENTS_FILE).read_text().splitlines()]
    assert [r["seq"] for r in rows] == [0, 1, 2, 3] and rows[2]["brand_new"] == 3


def test_a_writer_with_an_unknown_field_is_refused_in_one_line_and_writes_nothing(tmp_path):
    """A mistyped key of a known event type is a bug of the code that sent it, not a silent ``extra``."""
    s = _new(tmp_path)
    before = (s.path / EVENTS_FILE).read_text()
    with pytest.raises(SessionError) as ei:
        s.append(E.REWARD, track="t", step=1, sha=None, reward=1.0, kidn="ok")
    assert "(reward) would have unknown field(s) kidn; it was not written" in str(ei.value)
    assert "\n" not in str(ei.value)
    assert (s.path / EVENTS_FILE).read_text() == before and len(s.events) == 1
    s.append("from_the_future", anything=1)   # an unknown type keeps its whole payload
    s.close()


def test_every_reader_refuses_a_damaged_field_with_one_line(tmp_path):
    from l2tui.export.sessionio import open_session as open_export
    from l2tui.tui.sessionio import EventLogReader, open_session as open_tui

    s = _new(tmp_path)
    s.append(E.TRACK_ADDED, track="64x64x64-f32", shape=[64, 64, 64], acc="f32", baseline="cublas")
    p = s.path / EVENTS_FILE
    lines = p.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["baseline"] = {"x": SECRET_LOOKING}
    p.write_text("\n".join([lines[0], _line(bad)]) + "\n")
    for opener in (Session.open, open_export, open_tui, EventLogReader):
        with pytest.raises(SessionError) as ei:
            opener(s.path)
        msg = str(ei.value)
        assert "event seq 1 (track_added) has a malformed baseline" in msg and SECRET_LOOKING not in msg


def test_readers_take_the_session_started_fields(tmp_path):
    from l2tui.export.sessionio import open_session as open_export
    from l2tui.tui.sessionio import EventLogReader

    s = _new(tmp_path)
    (s.path / "session.toml").unlink()  # the first event is then the only record of config and GPU
    assert Session.open(s.path).config == {"policy": "search"}
    view = open_export(s.path)
    assert view.gpu == {"name": "GPU"} and view.config == {"policy": "search"}
    assert isinstance(view.records[0], E.SessionStarted)
    r = EventLogReader(s.path)
    assert r.config == {"policy": "search"} and r.gpu == {"name": "GPU"}


def test_rl_data_improvements_come_from_typed_best_and_decision_events():
    from l2tui.rldata import _improvements

    other = "cd" * 32
    recs = [E.Best(track="a", sha=SHA, speedup=1.1), E.Decision(track="b", sha=other, action="accept", by="user"),
            E.Decision(track="c", sha=SHA, action="accept", by="user"), E.Decision(track="c", sha=SHA, action="reject"),
            E.GenericEvent(type="best")]
    assert _improvements(recs) == {("a", SHA), ("b", other)}
