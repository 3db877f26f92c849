"""What a Ray GPU actor ships back is JSON text, read by the driver as checked data (issue 51).

No cluster is needed for the reading side: ``read_answer`` is what the driver runs on every
actor answer, and ``install`` on every build a task returns (tests/test_executor_ray.py runs
both on a real local cluster)."""

from __future__ import annotations

import json
import math
import pickle

from harness.evaluate import Evaluation
from l2tui.executors.ray_executor import GpuActor, install, read_answer


def _ev(**over: object) -> dict:
    d = Evaluation("ok", None, {"ok": True, "failed": None}, {"candidate": 0.02, "cublas": 0.03}, {"candidate": 0.01},
                   0.001, "ok: 0.02 ms", {"label": "candidate"}).to_dict()
    d.update(over)
    return d


def test_an_actor_answer_is_json_text_and_reads_back_as_the_same_evaluation():
    text = GpuActor._plain(Evaluation.from_dict(_ev()))
    assert isinstance(text, str) and json.loads(text)["times_ms"]["candidate"] == 0.02
    back = read_answer(text, "GPU-1")
    assert isinstance(back, Evaluation) and back.status == "ok" and back.speedup("cublas") == 1.5


def test_a_pickle_or_any_object_instead_of_text_is_charged_not_unpickled():
    for answer in (pickle.dumps(_ev()), _ev(), b"\x80\x04."):
        ev = read_answer(answer, "GPU-1")
        assert ev.status == "crashed" and "GPU-1 sent a malformed evaluation" in ev.message


def test_a_malformed_evaluation_is_crashed_in_one_line():
    for bad in (_ev(times_ms={"candidate": "fast"}), _ev(status=None), _ev(spread=[1]),
                _ev(build={"ok": True, "key": "../../../etc"}), {"status": "ok", "exec": "x"}):
        ev = read_answer(json.dumps(bad), "GPU-2")
        assert ev.status == "crashed" and "\n" not in ev.message and "GPU-2" in ev.message, ev.message
    ev = read_answer(json.dumps(_ev(times_ms={"candidate": math.inf})), "GPU-2")
    assert ev.status == "crashed" and "finite" in ev.message


def test_a_batch_answer_may_name_only_the_labels_asked_for():
    good = read_answer(json.dumps({"a": _ev(), "b": _ev(status="wrong")}), "GPU-3", ["a", "b"])
    assert good["a"].status == "ok" and good["b"].status == "wrong"
    forged = read_answer(json.dumps({"a": _ev(), "zz": _ev()}), "GPU-3", ["a", "b"])
    assert set(forged) == {"a", "b"} and all(v.status == "crashed" for v in forged.values())
    assert "'zz', which was not asked for" in forged["a"].message


def test_a_build_whose_key_is_not_a_hash_is_never_installed(tmp_path, monkeypatch):
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    d = {"ok": True, "key": "../../escape", "so_path": "/x/kernel.so", "ptxas": None, "errors": [], "log": "",
         "seconds": 1.0, "cached": False, "arch": "sm_90a", "flags": [], "nvcc_version": "13.0", "host": "n1"}
    res = install(d, b"\x7fELF", True)
    assert not res.ok and "malformed build" in res.errors[0].message
    assert not (tmp_path / "escape").exists() and not any(tmp_path.rglob("kernel.so"))
