"""What comes back from a profiling run is read as bounded data (issue 51), without a GPU: the
one-launch driver's result file (it ran the kernel) and the output of the processes."""

from __future__ import annotations

import json
import os
import sys

import pytest

from harness.profiling import ncu
from harness.profiling.errors import ProfileFailed


def _item(**over: object) -> dict:
    it = {"range": "l2_kernel", "status": "ok", "rc": 0, "message": ""}
    it.update(over)
    return it


def test_a_well_formed_result_reads_back(tmp_path):
    p = tmp_path / "result.json"
    p.write_text(json.dumps({"nvtx": "cupy", "items": [_item(), _item(status="unsupported", rc=1, message="rc 1")]}))
    assert [i["status"] for i in ncu.read_result(p, "k")["items"]] == ["ok", "unsupported"]
    assert ncu.read_result(tmp_path / "absent.json", "k") == {"items": []}


@pytest.mark.parametrize("doc, match", [
    ("{\"items\": [", "not JSON"),
    ({"items": [_item(status="pwned")]}, r"items\[0\]\.status"),
    ({"items": [_item(rc="0")]}, r"items\[0\]\.rc"),
    ({"items": [_item(extra=1)]}, "unexpected key 'extra'"),
    ({"items": [_item(message="m" * 5000)]}, "more than 1000"),
    ({"items": [], "code": "os.system"}, "unexpected key 'code'"),
])
def test_a_malformed_result_is_one_line(tmp_path, doc, match):
    p = tmp_path / "result.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(ProfileFailed, match=match) as ei:
        ncu.read_result(p, "the kernel")
    assert str(ei.value).startswith("the profiled process wrote a malformed result for the kernel:")
    assert "\n" not in str(ei.value)


def test_an_oversize_result_is_refused(tmp_path):
    p = tmp_path / "result.json"
    p.write_text(json.dumps({"items": [_item(message="x" * 900) for _ in range(2000)]}))
    with pytest.raises(ProfileFailed, match="more than the limit"):
        ncu.read_result(p, "k")


def test_output_past_the_cap_is_drained_and_dropped():
    code = "import sys\nfor _ in range(64): sys.stdout.write('y' * 65536)\nprint('END')"
    rc, out = ncu._run([sys.executable, "-c", code], 120, dict(os.environ), "a chatty program", cap=100_000)
    assert rc == 0 and len(out) == 100_000 and set(out) == {"y"}


def test_the_profiled_process_gets_no_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    monkeypatch.setenv("MY_TOKEN", "t")
    env = ncu._profile_env()
    assert "OPENAI_API_KEY" not in env and "MY_TOKEN" not in env and env.get("PATH") == os.environ.get("PATH")
