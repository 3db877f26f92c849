"""Prompt templates, context building and delayed-profiling gating of metrics."""

from pathlib import Path

import pytest

from harness.shapes import Shape
from l2tui.agent import context as C
from l2tui.agent.policies.base import Attempt, Failure, TrackContext
from l2tui.agent.roles import choose_flags, wants_rewrite

SEED = (Path(__file__).parent / "fixtures" / "recorded" / "seed_tiled.cu").read_text()
PROFILE = {"verdict": "memory-bandwidth", "metrics": {"dram__throughput.pct": {"value": 91.0, "unit": "%"}}}


def ctx(**kw):
    base = dict(track="512x512x512-f32", shape=Shape(512, 512, 512), acc="f32", baseline="cublas", step=3,
                source=SEED, times_ms={"candidate": 0.02, "cublas": 0.01}, speedup=0.5, roofline_ms=0.004,
                ptxas={"registers": 64, "smem_bytes": 8192}, hint="try BK=32", allowed_flags=["-O3"], profile=PROFILE)
    base.update(kw)
    return TrackContext(**base)


@pytest.mark.parametrize("role", C.ROLES)
def test_templates_load_with_known_placeholders(role):
    assert C.template(role)


def test_unknown_placeholder_is_an_error(tmp_path):
    (tmp_path / "planner.md").write_text("{{kernel}} {{nonsense}}")
    with pytest.raises(C.PromptError, match="nonsense"):
        C.template("planner", tmp_path)


def test_planner_prompt_holds_the_context_but_no_metrics_before_profiling():
    msgs = C.planner_messages(ctx(profiling_enabled=False), context_tokens=24000)
    text = msgs[1]["content"]
    assert "  13| #define BK 16" in text and "M=512, N=512, K=512" in text and "try BK=32" in text
    assert "cublas: 0.0100 ms" in text and "64 registers" in text
    assert "dram__throughput" not in text and "not available yet" in text
    assert 'extern "C" int l2_hgemm' in msgs[0]["content"]
    enabled = C.planner_messages(ctx(profiling_enabled=True), context_tokens=24000)[1]["content"]
    assert "Bottleneck verdict: memory-bandwidth" in enabled and "dram__throughput.pct: 91.0 %" in enabled


def test_context_is_trimmed_oldest_history_first():
    hist = [Attempt(i, f"idea number {i} " + "x" * 400, "patch", "ok", None, 1.0, 1.0) for i in range(200)]
    msgs = C.planner_messages(ctx(history=hist), context_tokens=6000)
    assert C.estimate_tokens(msgs) <= 6000
    text = msgs[1]["content"]
    assert "idea number 199" in text and "idea number 0 " not in text and "older entries omitted" in text


def test_debugger_prompt():
    f = Failure(kind="compile_error", message="identifier alpha undefined", source=SEED, round=2,
                errors=[{"file": "kernel.cu", "line": 58, "col": 3, "severity": "error", "message": "alpha undefined"}],
                feedback="the debug patch shrinks a tile size (BM 64 -> 16)")
    msgs = C.debugger_messages(ctx(), f, max_rounds=3, max_lines=40, context_tokens=24000, diff="-a\n+b")
    text = msgs[1]["content"]
    assert "kernel.cu:58: error: alpha undefined" in text and "round 2 of 3" in text
    assert "shrinks a tile size" in text and "at most 40 changed lines" in text


def test_roles_helpers():
    assert wants_rewrite("REWRITE\nuse CuTe") and not wants_rewrite("Rewrite nothing, change BK")
    assert choose_flags("x\nNVCC_FLAGS: -O3 -o evil\n", ["-O3"], ["-O2"]) == (["-O3"], "flags not in the allowed list dropped: -o evil")
    assert choose_flags("no flags line", ["-O3"], ["-O2"]) == (["-O2"], None)
    assert choose_flags("NVCC_FLAGS: none", ["-O3"], ["-O2"]) == ([], None)


def test_the_last_flags_line_of_a_reply_wins():
    """A reply that revises its flags means its last ``NVCC_FLAGS:`` line; earlier ones are drafts."""
    reply = "NVCC_FLAGS: -O2\nthinking again...\n> NVCC_FLAGS: `-O3 -lineinfo`\nNVCC_FLAGS: -O3\n"
    assert choose_flags(reply, ["-O2", "-O3", "-lineinfo"], []) == (["-O3"], None)
    assert choose_flags(reply + "NVCC_FLAGS: none\n", ["-O3"], ["-O2"]) == ([], None)
