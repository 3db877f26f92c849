"""The built-in search policy: seeds, legal localized patches, determinism, debug (issue 5)."""

from __future__ import annotations

import pytest

from harness import families as F
from harness.shapes import Shape
from l2tui.agent.patches import apply_patch
from l2tui.agent.policies import Policy, make_policy
from l2tui.agent.policies.base import Attempt, Failure, TrackContext
from l2tui.agent.policies.search import SearchPolicy

SHAPES = [Shape(4096, 4096, 4096), Shape(64, 64, 16384), Shape(1024, 128, 512), Shape(16384, 64, 4096)]


def ctx_for(shape: Shape, acc: str = "f32", arch: str = "sm_90a", step: int = 0) -> TrackContext:
    return TrackContext(track=f"{shape}-{acc}", shape=shape, acc=acc, baseline="cublaslt_autotune", step=step,
                        arch=arch)


def test_is_a_policy_and_make_policy_builds_it():
    p = make_policy("search")
    assert isinstance(p, SearchPolicy) and isinstance(p, Policy)
    assert p.name == "search"


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("acc", ["f32", "f16"])
def test_seed_is_a_catalog_config_with_the_right_accumulator(shape, acc):
    prop = SearchPolicy().seed(ctx_for(shape, acc))
    cfg = F.Config.from_source(prop.source)
    assert cfg is not None and cfg in F.catalog(acc, "sm_90a")
    assert F.declared_acc(prop.source) == acc
    assert prop.origin == "seed" and prop.messages and prop.completion
    assert "predicted" in prop.plan


def test_seed_follows_the_shape_regime():
    big = F.Config.from_source(SearchPolicy().seed(ctx_for(Shape(16384, 16384, 16384))).source)
    skinny = F.Config.from_source(SearchPolicy().seed(ctx_for(Shape(64, 64, 16384))).source)
    assert big.family == "sm90_cutlass" and big.geometry().tile_m * big.geometry().tile_n >= 128 * 128
    assert skinny.geometry().splits_for(Shape(64, 64, 16384)) > 1   # split-K for a lone tile with long K
    on_ampere = F.Config.from_source(SearchPolicy().seed(ctx_for(Shape(4096, 4096, 4096), arch="sm_80")).source)
    assert on_ampere.family != "sm90_cutlass"


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_proposals_apply_and_stay_legal(shape):
    pol = SearchPolicy(width=4)
    ctx = ctx_for(shape)
    ctx.source = pol.seed(ctx).source
    for step in range(1, 4):
        ctx.step = step
        props = pol.propose(ctx)
        assert props, "the search should always have something to try in 3 steps"
        for p in props:
            if p.patch is not None:
                res = apply_patch(ctx.source, p.patch, allow_rewrite=False)
                assert res.ok, res.error
                new = res.source
                # a patch touches only the knob block (and the acc declaration)
                changed = [a for a, b in zip(ctx.source.splitlines(), new.splitlines()) if a != b]
                assert 1 <= len(changed) <= 6
            else:
                assert p.origin == "rewrite"
                new = p.source
            cfg = F.Config.from_source(new)
            assert cfg is not None
            assert F.validate(cfg.family, cfg.knob_dict) == []
            assert F.declared_acc(new) == "f32"  # the accumulator of the track never changes
            assert p.messages[0]["role"] == "system" and p.plan in p.completion
        ctx.source = apply_patch(ctx.source, props[0].patch).source if props[0].patch else props[0].source


def test_never_proposes_the_same_kernel_twice_and_respects_the_budget():
    pol = SearchPolicy(width=3, budget=5)
    ctx = ctx_for(Shape(2048, 2048, 2048))
    ctx.source = pol.seed(ctx).source
    seen = set()
    for step in range(1, 6):
        ctx.step = step
        for p in pol.propose(ctx):
            new = p.source if p.source else apply_patch(ctx.source, p.patch).source
            assert new not in seen
            seen.add(new)
    ctx.step = 6
    assert pol.propose(ctx) == []


def test_deterministic_under_a_seed():
    def run(seed):
        pol = SearchPolicy(seed=seed, width=3)
        ctx = ctx_for(Shape(1024, 1024, 1024))
        ctx.source = pol.seed(ctx).source
        out = []
        for step in (1, 2):
            ctx.step = step
            out.append([p.completion for p in pol.propose(ctx)])
        return out

    assert run(7) == run(7)


def test_history_shas_are_not_reproposed():
    import hashlib

    pol = SearchPolicy(width=2, explore=False)
    ctx = ctx_for(Shape(4096, 4096, 4096), step=1)
    ctx.source = pol.seed(ctx).source
    first = pol.propose(ctx)
    fresh = SearchPolicy(width=2, explore=False)
    ctx2 = ctx_for(Shape(4096, 4096, 4096), step=1)
    ctx2.source = ctx.source
    tried = apply_patch(ctx.source, first[0].patch).source if first[0].patch else first[0].source
    ctx2.history = [Attempt(step=1, plan="x", origin="patch", kind="ok",
                            sha=hashlib.sha256(tried.encode()).hexdigest())]
    again = fresh.propose(ctx2)
    assert first[0].completion not in [p.completion for p in again]


def test_debug_reverts_the_failing_knob_edit_and_keeps_the_rest():
    pol = SearchPolicy()
    parent = F.render("sm80_mma", {"STAGES": 3})
    bad = F.set_knobs(parent, {"STAGES": "5", "BM": "256"})
    ctx = ctx_for(Shape(4096, 4096, 4096))
    ctx.source = parent
    prop = pol.debug(ctx, Failure(kind="compile_error", message="too much shared memory", source=bad,
                                  parent_source=parent))
    assert prop.origin == "debug" and prop.patch
    fixed = apply_patch(bad, prop.patch, allow_rewrite=False)
    assert fixed.ok and fixed.source == parent


def test_families_option_restricts_seeds_and_switches():
    pol = SearchPolicy(families=["small_splitk", "sm80_mma"])
    ctx = ctx_for(Shape(8192, 8192, 8192))
    seed = F.Config.from_source(pol.seed(ctx).source)
    assert seed.family in ("small_splitk", "sm80_mma")
    ctx.source, ctx.step = pol.seed(ctx).source, 1
    for p in pol.propose(ctx):
        new = p.source or apply_patch(ctx.source, p.patch).source
        assert F.Config.from_source(new).family in ("small_splitk", "sm80_mma")


def test_config_keys_map_onto_the_policy():
    from l2tui.config import load_config

    cfg = load_config(None)
    pol = make_policy("search", cfg)
    assert pol.width == cfg.search["candidates_per_step"]
    assert pol.rng_seed == cfg.search["seed"]


def test_split_k_moves_use_automatic_splits_only():
    """Fixed split counts are refused by validate; the search proposes split-K as SPLITS 0."""
    pol = SearchPolicy()
    cfg = F.Config.of("sm90_cutlass", F._sm90(128, 128))
    moves = pol.neighbours(cfg, Shape(256, 256, 16384), "f32", "sm_90a")
    sm90 = [m for m in moves if m.config.family == "sm90_cutlass"]
    splits = [m for m in sm90 if m.config.knob_dict["SCHEDULER"] == "SPLITK"]
    assert splits and all(m.config.knob_dict["SPLITS"] == "0" for m in splits)
    assert all(F.validate(m.config.family, m.config.knob_dict) == [] for m in moves)


def test_split_k_reduce_moves_come_from_persistent_configs():
    """A persistent GEMM (either schedule) may move to SPLITK_REDUCE with automatic splits."""
    pol = SearchPolicy()
    for base in (F._sm90(128, 128), F._sm90(64, 128, sched="PINGPONG")):
        cfg = F.Config.of("sm90_cutlass", base)
        moves = pol.neighbours(cfg, Shape(256, 256, 16384), "f32", "sm_90a")
        red = [m for m in moves if m.config.family == "sm90_cutlass"
               and m.config.knob_dict["SCHEDULER"] == "SPLITK_REDUCE"]
        assert red and all(m.config.knob_dict["SPLITS"] == "0" for m in red)
        assert all(F.validate(m.config.family, m.config.knob_dict) == [] for m in moves)
    # from SPLITK_REDUCE, SPLITS edits are real moves (the knob is read) and a way back exists
    cfg = F.Config.of("sm90_cutlass", F._sm90(128, 64, scheduler="SPLITK_REDUCE", splits=0))
    moves = pol.neighbours(cfg, Shape(256, 256, 16384), "f32", "sm_90a")
    assert any(set(m.changes) == {"SPLITS"} for m in moves)
    assert any(m.changes.get("SCHEDULER") == "PERSISTENT" for m in moves)


def test_a_step_does_not_spend_its_width_on_epilogue_variants_of_one_configuration():
    """From an EPI_TMA ping-pong kernel on a store-bound shape the model ranks the epilogue
    edits (EPI_TMA_NOC, wider subtiles) close together; one step still tries distinct
    configurations, and the best epilogue edit is among them."""
    shape = Shape(16384, 16384, 256)
    pol = SearchPolicy(width=3, explore=False)
    ctx = ctx_for(shape)
    ctx.source = F.render("sm90_cutlass", F._sm90(128, 128, sched="PINGPONG"))
    ctx.step = 1
    props = pol.propose(ctx)
    cfgs = []
    for p in props:
        new = apply_patch(ctx.source, p.patch, allow_rewrite=False).source if p.patch else p.source
        cfgs.append(F.Config.from_source(new))
    keys = {F.sans_epilogue(c) for c in cfgs}
    assert len(props) == 3 and len(keys) == 3
    assert any(c.knob_dict["EPILOGUE"] == "EPI_TMA_NOC" for c in cfgs)


def test_distinct_first_puts_the_best_of_each_configuration_before_epilogue_variants():
    from l2tui.agent.policies.search import Move, _distinct_first

    def row(t, knobs):
        c = F.Config.of("sm90_cutlass", knobs)
        return (t, 0, Move(c, {}, ""), None, None, c.name, t)

    pp = F._sm90(128, 128, sched="PINGPONG")
    rows = [row(1.0, {**pp, "EPILOGUE": "EPI_TMA_NOC"}),
            row(1.01, {**pp, "EPILOGUE": "EPI_TMA_NOC", "EPI_TILE_N": "64"}),
            row(1.02, {**pp, "EPILOGUE": "EPI_TMA_NOC", "EPI_TILE_N": "128"}),
            row(1.5, F._sm90(128, 256)),
            row(2.0, F._sm90(64, 128, sched="PINGPONG"))]
    order = [r[2].config.name for r in _distinct_first(rows)]
    assert order == [rows[0][5], rows[3][5], rows[4][5], rows[1][5], rows[2][5]]


def test_the_automatic_epilogue_subtile_has_no_duplicate_value():
    """EPI_TILE_N 0 is CUTLASS's 32 columns: a separate 32 would be the same kernel under
    another name (a wasted build and evaluation in the search)."""
    vals = next(k for k in F.SM90.knobs if k.name == "EPI_TILE_N").values
    assert vals == ("0", "64", "128")


def test_cluster_split_k_moves_only_on_hopper_and_with_split_k_one():
    """The latency family's global split-K can become a cluster split-K (two knobs at once, the
    pair validate accepts) on sm_90; on sm_80 no move sets CLUSTER_K (clusters need sm_90)."""
    pol = SearchPolicy()
    cfg = F.Config.of("small_splitk", F._mma(64, 64, 64, 2, 2, 3, 4, 0))
    moves = pol.neighbours(cfg, Shape(128, 128, 1024), "f32", "sm_90a")
    ck = [m for m in moves if m.config.family == "small_splitk" and m.config.knob_dict["CLUSTER_K"] != "1"]
    assert ck and all(m.config.knob_dict["SPLIT_K"] == "1" for m in ck)
    assert all(F.validate(m.config.family, m.config.knob_dict) == [] for m in moves)
    back = pol.neighbours(ck[0].config, Shape(128, 128, 1024), "f32", "sm_90a")
    assert any(m.changes == {"CLUSTER_K": "1", "SPLIT_K": "0"} for m in back)
    old = pol.neighbours(cfg, Shape(128, 128, 1024), "f32", "sm_80")
    assert not any(m.config.knob_dict.get("CLUSTER_K", "1") != "1" for m in old)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("acc", ["f32", "f16"])
def test_every_catalog_configuration_has_legal_neighbours(arch, acc):
    """No family's knob set trips the move generator (tiny_mma's CLUSTER_K without a SPLIT_K once
    raised KeyError on Hopper), and every move it offers validates."""
    pol = SearchPolicy()
    shape = Shape(64, 64, 2048)
    for cfg in F.catalog(acc, arch):
        moves = pol.neighbours(cfg, shape, acc, arch)
        assert moves, cfg.name
        assert all(F.validate(m.config.family, m.config.knob_dict) == [] for m in moves), cfg.name


def test_tiny_cluster_k_steps_on_hopper_only():
    pol = SearchPolicy()
    cfg = F.Config.of("tiny_mma", {**F._tiny(16, 64, 128, 1, 4, wk=2, ahead=2, ck=4), "ACC": "ACC_F32"})
    hopper = {m.config.knob_dict["CLUSTER_K"] for m in pol.neighbours(cfg, Shape(64, 64, 2048), "f32", "sm_90a")
              if m.config.family == "tiny_mma" and set(m.changes) == {"CLUSTER_K"}}
    assert hopper == {"2", "8"}
    plain = F.Config.of("tiny_mma", {**F._tiny(16, 64, 128, 1, 4, wk=2, ahead=2), "ACC": "ACC_F32"})
    ampere = pol.neighbours(plain, Shape(64, 64, 2048), "f32", "sm_80")
    assert not any(m.config.knob_dict.get("CLUSTER_K", "1") != "1" for m in ampere if m.config.family == "tiny_mma")


@pytest.mark.parametrize("limit", [0, 1])
def test_new_builds_limits_the_proposals_the_prebuilt_catalog_lacks(limit):
    """``new_builds`` N: at most N proposals a step are configurations outside the catalog (each a
    new nvcc build); 0 searches the built catalog only. Without the limit the same steps do propose
    such configurations, so the limit is what keeps them out."""
    from harness.families import Config

    def run(new_builds):
        pol = SearchPolicy(seed=3, width=4, budget=4, new_builds=new_builds)
        outside = []
        for shape in (Shape(2048, 2048, 2048), Shape(12288, 256, 4096), Shape(64, 64, 4096)):
            ctx = ctx_for(shape)
            ctx.source = pol.seed(ctx).source
            catalog = set(pol.candidates(shape, "f32", "sm_90a"))
            for step in (1, 2, 3):
                ctx.step = step
                props = pol.propose(ctx)
                srcs = [p.source if p.source else apply_patch(ctx.source, p.patch).source for p in props]
                outside.append(sum(1 for s in srcs if Config.from_source(s) not in catalog))
                if srcs:
                    ctx.source = srcs[0]
        return outside

    assert max(run(None)) > limit
    assert max(run(limit)) <= limit


def _step_families(pol: SearchPolicy, ctx: TrackContext) -> list[str]:
    fams = []
    for p in pol.propose(ctx):
        new = apply_patch(ctx.source, p.patch, allow_rewrite=False).source if p.patch else p.source
        fams.append(F.Config.from_source(new).family)
    return fams


def test_a_switch_into_a_family_ranked_with_its_siblings_constants_comes_after_the_fitted_moves():
    """sm90_cutlass_t ranks with sm90_cutlass's fitted constants until a calibration times it
    (costmodel.SIBLING): from a CUTLASS kernel on a big shape, where the model's guess for its
    160-row tiles looks good, a step proposes it only after the moves the model has grounds for;
    once the family has constants of its own, the switch is ranked by its prediction like any
    other move."""
    from dataclasses import replace

    from l2tui.agent.policies.costmodel import CostModel, load_params

    shape = Shape(16384, 16384, 256)
    ctx = ctx_for(shape)
    ctx.source = F.render("sm90_cutlass", F._sm90(128, 128, sched="PINGPONG"))
    ctx.step = 1
    fams = _step_families(SearchPolicy(width=40, explore=False), ctx)
    assert "sm90_cutlass_t" in fams
    first = fams.index("sm90_cutlass_t")
    assert first >= 3 and all(f != "sm90_cutlass_t" for f in fams[:first])
    params = load_params()
    fitted = replace(params, families={**params.families, "sm90_cutlass_t": params.families["sm90_cutlass"]})
    fams_fitted = _step_families(SearchPolicy(width=40, explore=False, cost_model=CostModel(fitted)), ctx)
    assert fams_fitted.index("sm90_cutlass_t") < first
