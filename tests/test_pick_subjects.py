"""The pick's one pipeline (``l2tui.agent.policies.pick.subjects``), shared by the sweep and the search policy."""

from __future__ import annotations

from harness.families import Config, catalog, no_pdl_twin
from harness.known import GpuKey, KnownKernel
from harness.shapes import Shape
from l2tui.agent.policies.pick import PickSettings, subjects

SHAPE = Shape(4096, 4096, 4096)
H200 = GpuKey("NVIDIA H200", 132, 90)


def _known(source: str, name: str) -> KnownKernel:
    return KnownKernel(SHAPE, "f32", H200, source, name, "local", 1.0, "cublas", 0.05, {})


def _with_pdl() -> Config:
    """A catalog configuration launched with PDL (it has a no-PDL twin)."""
    return next(c for c in catalog("f32", "sm_90a") if no_pdl_twin(c.family, c.knob_dict))


def test_incumbent_twin_also_and_known_join_the_chosen_each_once_in_order():
    cat = catalog("f32", "sm_90a")
    held, other = _with_pdl(), next(c for c in cat if c.family == "sm80_mma")
    known = [_known(other.source(), "same source as also"), _known("// a kernel of its own\n", "mine"),
             _known("// a kernel of its own\n", "again")]
    got = subjects([], SHAPE, PickSettings(top=0, kinds=False, siblings=False), incumbent=held, also=[other, held],
                   known=known)
    assert [s.reason for s in got] == ["incumbent", "twin", "also", "known"]
    assert got[0].config == held and got[1].config is not None and got[1].config.knob_dict.get("PDL") == "0"
    assert got[3].known is not None and got[3].known.name == "mine"
    assert len({s.source for s in got}) == len(got)


def test_a_pool_timed_back_to_back_gets_no_twin_and_the_chosen_come_first():
    held = _with_pdl()
    ranked = [c for c in catalog("f32", "sm_90a") if c.family == held.family][:3]
    got = subjects(ranked, SHAPE, PickSettings(top=2, kinds=False, siblings=False), incumbent=held, per_call=False)
    reasons = [s.reason for s in got]
    assert "twin" not in reasons and reasons[0] == "chosen"
    assert reasons.count("incumbent") == (0 if held in [s.config for s in got if s.reason == "chosen"] else 1)
