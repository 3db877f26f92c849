"""The built-in ``search`` policy: model-free refinement of seed-family kernels.

Why it exists: the loop must find fast kernels without any LLM, and its steps double as RL
demonstrations.  It works on the same text the LLM edits: the ``// l2: knobs`` block of a seed
family (``harness.families``).

* ``seed``    - rank every prebuilt configuration of every family that runs on the GPU with the
                cost model (``costmodel.py``); where the loop can time many kernels in one request
                (``TrackContext.can_batch``: a GPU), propose the pick (``pick.py``): a
                ``PickRequest`` for the model's top ``pick_top``, the best of each kind it is
                least sure of and the known kernels, which the loop's seed stage builds, checks and
                times together (``l2tui.agent.seed_timing``) and hands back to the policy, which
                starts from the fastest that passes; without it (recorded evaluations), or when
                nothing passes, start from the model's best. The policy itself never builds or
                times anything.
* ``propose`` - enumerate localized edits of the current best (one knob to a neighbouring legal
                value, schedule swaps, tile transposes, cluster/stage/split-K changes, and a
                switch to the best configuration of another family), drop invalid and already
                tried ones, rank the rest with the cost model BEFORE anything is built, and
                return the best ``width`` (one of them, chosen with a seeded RNG among the next
                best, keeps some exploration).  Each is a search/replace patch of knob lines.
* ``debug``   - a failing edit is reverted to the parent's knob block (the optimization the
                parent had is kept) and the configuration is remembered as bad.

Deterministic: the same (seed, track, history) gives the same proposals.  Budget: after
``budget`` steps on a track (or when nothing untried is left) ``propose`` returns ``[]``.
Every proposal carries ``messages`` (the state the decision was made from, as text) and a
``completion`` (rationale + patch), so the rewards log reads like an LLM's.
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from harness.families import (
    SPLITTING_SCHEDULERS,
    Config,
    FamilyError,
    applicable,
    catalog,
    cc_of,
    family_of,
    families_for,
    get_family,
    knob_patch,
    per_call_pool,
    sans_epilogue,
    validate,
)
from harness.shapes import Shape

from .base import Failure, Proposal, TrackContext
from .costmodel import CostModel, unfitted_sibling
from .pick import PickItem, PickRequest, PickSettings, candidate_ms, fastest, is_decode, token_pair
from .pick import subjects as pick_subjects

if TYPE_CHECKING:
    from harness.evaluate import Evaluation

SYSTEM = (
    "You are the search policy of l2tui. You tune HGEMM seed kernels by editing the knob block "
    "(// l2: knobs begin ... end) with search/replace patches, ranked by an analytic cost model "
    "(waves per SM, tile quantization, arithmetic intensity, shared-memory fit, registers)."
)

# knobs whose legal values are ordered: only neighbours are proposed
ORDINAL = {"TILE_M", "TILE_N", "TILE_K", "BM", "BN", "BK", "WARPS_M", "WARPS_N", "STAGES", "SWIZZLE",
           "SPLIT_K", "SPLITS", "CLUSTER_M", "CLUSTER_N", "EPI_TILE_N", "CLUSTER_K", "WARPS_K", "AHEAD"}
#: which launches the search times: ``per_call`` (the headline timing: configurations launched
#: with PDL give way to their no-PDL twins) or ``both`` (back to back, where PDL's overlap pays)
LAUNCHES = ("per_call", "both")

#: ordinal knobs whose 0 means "chosen per call" rather than "fewest"
AUTO_ZERO = {"SPLIT_K", "SPLITS"}


def _limit_new_builds(rows: list, catalog_set: set, limit: int) -> list:
    """The rows in their order, keeping only the first ``limit`` that need a new build."""
    out, new = [], 0
    for r in rows:
        if r[2].config not in catalog_set:
            if new >= limit:
                continue
            new += 1
        out.append(r)
    return out


def _distinct_first(scored: list) -> list:
    """``scored`` (best first, each row's third item a :class:`Move`) reordered so the best move of
    each configuration-up-to-the-epilogue comes first: the cost model barely tells epilogue
    variants apart, and a step that spends its whole width on three of them explores nothing
    else (the next step still reaches the other variants as one-knob edits)."""
    first: list = []
    rest: list = []
    seen: set[object] = set()
    for row in scored:
        key = sans_epilogue(row[2].config)
        (rest if key in seen else first).append(row)
        seen.add(key)
    return first + rest


@functools.lru_cache(maxsize=4096)
def _source_of(cfg: Config) -> str:
    """``cfg.source()``, rendered once (a replay filters the whole catalog per shape)."""
    return cfg.source()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Move:
    """One candidate edit: knob changes (or a whole new configuration) and why."""

    config: Config
    changes: dict[str, str]
    why: str
    rewrite: bool = False        # a family switch: whole source, not a patch


class _Moves:
    """The edits gathered around one configuration: ``add`` keeps an edit only when it changes a
    knob and the family accepts the result, so each move generator may propose freely."""

    def __init__(self, family: str, cur: dict[str, str]) -> None:
        self.family = family
        self.cur = cur
        self.moves: list[Move] = []

    def add(self, changes: dict[str, str], why: str) -> None:
        new = {**self.cur, **changes}
        changes = {k: v for k, v in changes.items() if self.cur.get(k) != v}
        if not changes or validate(self.family, new):
            return
        self.moves.append(Move(Config.of(self.family, new), changes, why))


def _knob_options(name: str, vals: list[str], now: str) -> list[str]:
    """The values one step from ``now``: its neighbours for an ordered knob, every other value
    for a choice; a count where 0 means "automatic" steps to and from 0 as well."""
    i = vals.index(now)   # a value the knob does not list is an error, whatever the knob's kind
    if name in AUTO_ZERO and now == "0":
        # from "automatic" every fixed count is one step away (the cost model ranks them)
        return [v for v in vals if v != "0"]
    if name in AUTO_ZERO:
        fixed = [v for v in vals if v != "0"]
        j = fixed.index(now)
        return ["0"] + [fixed[x] for x in (j - 1, j + 1) if 0 <= x < len(fixed)]
    if name in ORDINAL:
        return [vals[j] for j in (i - 1, i + 1) if 0 <= j < len(vals)]
    return [v for v in vals if v != now]


def _knob_moves(found: _Moves, arch: str, launch: str) -> None:
    """One-knob edits, leaving out the knobs whose edit would do nothing here: the accumulator,
    clusters before sm_90, split counts without a splitting scheduler, and PDL timed per call."""
    cur = found.cur
    for knob in get_family(found.family).knobs:
        if knob.name == "ACC" or (knob.name == "CLUSTER_K" and cc_of(arch) < 90):
            continue   # (thread-block clusters need sm_90)
        if knob.name == "SPLITS" and cur.get("SCHEDULER") not in SPLITTING_SCHEDULERS:
            continue   # ignored by the kernel unless SCHEDULER splits K: a no-op edit
        if knob.name == "PDL" and launch == "per_call" and cur.get("PDL") == "0":
            continue   # timed per call, PDL is the slower launch (harness.families.no_pdl_twin)
        for v in _knob_options(knob.name, list(knob.values), cur[knob.name]):
            found.add({knob.name: v}, f"{knob.name} {cur[knob.name]} -> {v} ({knob.doc})")


def _cutlass_moves(found: _Moves, arch: str) -> None:
    """sm90_cutlass's several-knob edits: transposed tiles, schedule and scheduler changes, no cluster."""
    cur, add = found.cur, found.add
    add({"TILE_M": cur["TILE_N"], "TILE_N": cur["TILE_M"], "CLUSTER_M": cur["CLUSTER_N"],
         "CLUSTER_N": cur["CLUSTER_M"]}, "transpose the CTA tile and cluster")
    if cur["SCHEDULE"] == "COOPERATIVE":
        for tm in ("64", "128"):
            add({"SCHEDULE": "PINGPONG", "TILE_M": tm, "SCHEDULER": "PERSISTENT"},
                f"ping-pong schedule with {tm}-row tiles (epilogue overlaps the next tile's mainloop)")
    else:
        add({"SCHEDULE": "COOPERATIVE", "TILE_M": "128"}, "cooperative schedule, 128-row tiles")
        add({"SCHEDULE": "COOPERATIVE", "TILE_M": "128", "SCHEDULER": "STREAMK"},
            "cooperative + stream-K (balances few tiles over all SMs)")
    if cur["SCHEDULER"] == "PERSISTENT" and cur["SCHEDULE"] == "COOPERATIVE":
        add({"SCHEDULER": "SPLITK", "SPLITS": "0"},
            "split-K filling one wave of CTAs (few output tiles with a long K)")
    if cur["SCHEDULER"] == "PERSISTENT":
        add({"SCHEDULER": "SPLITK_REDUCE", "SPLITS": "0"},
            "split-K as batched K slices + a separate GPU-wide reduce kernel (few tiles, long K)")
    if cur["SCHEDULER"] == "SPLITK_REDUCE":
        add({"SCHEDULER": "PERSISTENT", "SPLITS": "1"}, "back to one persistent GEMM (no split)")
    add({"CLUSTER_M": "1", "CLUSTER_N": "1"}, "no cluster (less multicast sync for small grids)")


def _cutlass_t_moves(found: _Moves, arch: str) -> None:
    """sm90_cutlass_t's edits: the other schedule, no cluster."""
    scheduler = found.cur.get("SCHEDULER", "PERSISTENT")
    if scheduler == "SPLITK_REDUCE" and found.cur["SCHEDULE"] == "BASIC":
        found.add({"SCHEDULER": "SPLITK_FUSED"}, "the slices added in the GEMM's own launch (no second kernel)")
    if scheduler == "SPLITK_FUSED":
        found.add({"SCHEDULER": "SPLITK_REDUCE"}, "the slices added by a second kernel (no grid barrier)")
    elif found.cur["SCHEDULE"] == "BASIC":
        found.add({"SCHEDULE": "PINGPONG"}, "persistent ping-pong (the epilogue overlaps the next tile's mainloop)")
    else:
        found.add({"SCHEDULE": "BASIC"}, "a CTA per tile, one consumer warpgroup (no tile loop)")
    found.add({"CLUSTER_M": "1", "CLUSTER_N": "1"}, "no cluster (less multicast sync for small grids)")


def _ksplit_moves(found: _Moves, arch: str) -> None:
    """sm90_ksplit's edits: transposed tiles, taller tiles over fewer K slices, the other grouping."""
    cur, add = found.cur, found.add
    add({"TILE_M": cur["TILE_N"], "TILE_N": cur["TILE_M"]}, "transpose the CTA tile")
    ck = int(cur["CLUSTER_K"])
    if ck > 1 and cur["TILE_M"] == "64":  # as many CTAs: twice as tall tiles, half the K slices
        add({"TILE_M": "128", "CLUSTER_K": str(ck // 2)}, "twice as tall tiles, half the K slices "
            "(as many CTAs, half the partial sums to add)")
    if cur.get("GROUPS", "1") == "1":
        add({"GROUPS": "0"}, "several clusters per tile, their sums added through a global workspace "
            "(few tiles with a long K: fills the SMs)")
    else:
        add({"GROUPS": "1"}, "one cluster per tile (no workspace, no global barrier)")


def _tile_moves(found: _Moves, arch: str) -> None:
    """The BM/BN families' edits: a transposed tile and warp layout, cluster vs global split-K
    where both exist (sm_90), and a doubled tile side with twice the warps along it."""
    cur, add = found.cur, found.add
    bm, bn = int(cur["BM"]), int(cur["BN"])
    add({"BM": cur["BN"], "BN": cur["BM"], "WARPS_M": cur["WARPS_N"], "WARPS_N": cur["WARPS_M"]},
        "transpose the CTA tile and the warp layout")
    if "CLUSTER_K" in cur and "SPLIT_K" in cur and cc_of(arch) >= 90:
        # small_splitk: cluster split-K replaces the global one (SPLIT_K 1), a two-knob move
        # (tiny_mma has no global split: its CLUSTER_K steps are the ordinal moves above)
        if cur["CLUSTER_K"] == "1" and cur["SPLIT_K"] != "1":
            for slices in ("4", "8"):
                add({"SPLIT_K": "1", "CLUSTER_K": slices},
                    f"{slices} K slices in one cluster, added through distributed shared memory")
        elif cur["CLUSTER_K"] != "1":
            add({"CLUSTER_K": "1", "SPLIT_K": "0"}, "back to the global split-K (workspace + counters)")
    if bm * 2 in (16, 32, 64, 128, 256):
        add({"BM": str(bm * 2), "WARPS_M": str(min(4, int(cur["WARPS_M"]) * 2))},
            "double BM with twice the warps along M")
    if bn * 2 in (32, 64, 128, 256):
        add({"BN": str(bn * 2), "WARPS_N": str(min(4, int(cur["WARPS_N"]) * 2))},
            "double BN with twice the warps along N")


#: the several-knob edits of a family by name; the BM/BN families share ``_tile_moves``
_FAMILY_MOVES: dict[str, Callable[[_Moves, str], None]] = {
    "sm90_cutlass": _cutlass_moves, "sm90_cutlass_t": _cutlass_t_moves, "sm90_ksplit": _ksplit_moves,
}


class SearchPolicy:
    name = "search"
    model = None

    def __init__(self, seed: int = 0, width: int = 3, budget: int = 8, explore: bool = True,
                 arch: str | None = None, cost_model: CostModel | None = None,
                 families: Iterable[str] | None = None, candidates_per_step: int | None = None,
                 new_builds: int | None = None, pick_top: int = 5, pick_kinds: bool = True,
                 launch: str = "per_call", **_: object) -> None:
        self.rng_seed = int(seed)
        # ``candidates_per_step`` is the [search] config key for the width
        self.width = max(1, int(candidates_per_step if candidates_per_step is not None else width))
        self.budget = max(0, int(budget))
        self.explore = bool(explore)
        self.arch = arch
        self.model = None  # no LLM
        self.cost = cost_model or CostModel()
        # restrict the search to some families (e.g. the fast-building mma ones in CI)
        self.families = set(families) if families else None
        # at most this many proposals a step outside the prebuilt catalog (None: no limit). Why: on
        # the H200 a sweep's time is nvcc's (a new CUTLASS configuration takes 30-60 s to build,
        # a whole evaluation on the GPU about 0.4 s), so a grid
        # sweep that must fit an hour searches the built catalog only (0) or nearly (1)
        self.new_builds = None if new_builds is None else max(0, int(new_builds))
        self.pick_top = max(0, int(pick_top))
        self.pick_kinds = bool(pick_kinds)
        # which launches of the catalog the search times (LAUNCHES): per call, the no-PDL twins
        if launch not in LAUNCHES:
            raise ValueError(f"launch must be one of {', '.join(LAUNCHES)}, not {launch!r}")
        self.launch = launch
        # replaying a recording: (source, shape, acc) -> whether it holds a result (replay_only)
        self._holds: Callable[[str, Shape, str], bool] | None = None
        self._tried: dict[str, set[str]] = {}   # track -> shas proposed (never propose twice)
        self._bad: dict[str, set[str]] = {}     # track -> shas that failed

    # ------------------------------------------------------------ helpers

    def _arch(self, ctx: TrackContext) -> str:
        return ctx.arch or self.arch or "sm_90a"

    def _tried_set(self, ctx: TrackContext) -> set[str]:
        s = self._tried.setdefault(ctx.track, set())
        for a in ctx.history or ():
            if a.sha:
                s.add(a.sha)
        if ctx.sha:
            s.add(ctx.sha)
        return s

    @staticmethod
    def _shape(ctx: TrackContext) -> Shape:
        s = ctx.shape
        return s if isinstance(s, Shape) else Shape(*s)

    def candidates(self, shape: Shape, acc: str, arch: str, dtype: str = "fp16") -> list[Config]:
        """Seed pool: the prebuilt catalog in element type ``dtype`` (a bf16 run draws from the bf16
        configurations only) of every family that runs on ``arch``; timed per call,
        without the configurations launched with PDL that have a no-PDL twin there
        (``harness.families.per_call_pool``: per call the twin is the faster launch)."""
        fams = {f.name for f in families_for(arch)}
        if self.families is not None:
            fams &= self.families
        # a family refuses a shape it cannot run before anything is built (harness.families.applicable)
        fams = {f for f in fams if applicable(f, shape, arch)}
        # a family no GPU run has verified yet is timed only where the families setting names it
        fams = {f for f in fams if get_family(f).verified_on_gpu or (self.families and f in self.families)}
        pool = [c for c in catalog(acc, arch, dtype) if c.family in fams]
        # the narrow tiles in pairs along M are decode kernels: the model prices them by their many
        # CTAs as the best of every small shape, where they are only narrow tiles
        pool = [c for c in pool if is_decode(shape) or not token_pair(c)]
        if self._holds is not None:   # first: a PDL launch stays where the recording lacks its twin
            pool = [c for c in pool if self._holds(_source_of(c), shape, acc)]
        return per_call_pool(pool) if self.launch == "per_call" else pool

    def replay_only(self, holds: Callable[[str, Shape, str], bool]) -> None:
        """Replaying recorded evaluations, seed and propose only kernels the recording holds
        (``holds(source, shape, acc)``): a recorded run is replayed with today's catalog and cost
        model, which may rank configurations it never timed first, and those could only come back
        ``not_recorded`` (after a real build of each)."""
        self._holds = holds

    def rank(self, configs: Iterable[Config], shape: Shape) -> list[tuple[float, Config]]:
        return self.cost.rank(list(configs), shape)

    def _state_text(self, ctx: TrackContext, shape: Shape) -> str:
        lines = [f"Problem: C[{shape.m}x{shape.n}] = A[{shape.m}x{shape.k}] @ B[{shape.k}x{shape.n}], {ctx.dtype}, "
                 f"{ctx.acc} accumulate, GPU arch {self._arch(ctx)}, baseline {ctx.baseline}."]
        if ctx.source:
            cfg = Config.from_source(ctx.source)
            if cfg is not None:
                lines.append(f"Current best: {cfg.name}")
                est = self.cost.estimate(cfg, shape)
                lines.append(f"Cost model for it: {est.rationale()}")
        if ctx.times_ms:
            t = ", ".join(f"{k}={v * 1e3:.1f}us" for k, v in sorted(ctx.times_ms.items()) if v)
            lines.append(f"Measured: {t}")
        if ctx.speedup:
            lines.append(f"Speedup over {ctx.baseline}: {ctx.speedup:.3f}x")
        if ctx.history:
            lines.append("Tried:")
            for a in ctx.history[-8:]:
                sp = f" {a.speedup:.3f}x" if a.speedup else ""
                lines.append(f"  step {a.step}: {a.plan.splitlines()[0][:90] if a.plan else ''} -> {a.kind}{sp}")
        if ctx.hint:
            lines.append(f"Hint from the engineer: {ctx.hint}")
        return "\n".join(lines)

    # ------------------------------------------------------------ seed

    def _pick_request(self, ctx: TrackContext, shape: Shape, ranked: list[tuple[float, Config]]) -> PickRequest | None:
        """The pick (``pick.py``) as a request: the chosen catalog configurations and the known kernels
        for the shape, labelled, for the loop to time together; None when the pipeline chose no
        catalog configuration (the caller seeds from the cost model)."""
        picked = pick_subjects([c for _, c in ranked], shape,
                               PickSettings(top=self.pick_top, kinds=self.pick_kinds, siblings=self.pick_kinds),
                               known=ctx.known)
        chosen = sum(1 for p in picked if p.known is None)
        if not chosen:
            return None
        labels = {k.source: f"known-{i}" for i, k in reversed(list(enumerate(ctx.known)))}
        items = tuple(PickItem(labels[p.source], p.source, p.config, f"known: {p.known.name} ({p.known.layer})")
                      if p.known is not None else PickItem(p.config.name if p.config else "", p.source, p.config)
                      for p in picked)
        return PickRequest(items, chosen, self._arch(ctx),
                           decide=lambda evs: self._seed_of_pick(ctx, shape, ranked, items, chosen, evs))

    def _seed_of_pick(self, ctx: TrackContext, shape: Shape, ranked: list[tuple[float, Config]],
                      items: tuple[PickItem, ...], chosen: int, evs: Mapping[str, Evaluation]) -> Proposal:
        """The seed from the pick's timings: the fastest item that passed, else the cost model's best."""
        won = fastest(items, evs)
        if won is None:
            return self._model_seed(ctx, shape, ranked)
        t, best = won
        rows = "\n".join(f"  {it.name}: " + (f"{ms * 1e3:.1f} us per call" if (ms := candidate_ms(evs.get(it.label)))
                                              else str(getattr(evs.get(it.label), "status", "?")))
                         + (f" (model {self.cost.predict(it.config, shape) * 1e6:.1f} us)"
                            if it.config is not None else "")
                         for it in items)
        self._tried_set(ctx).add(_sha(best.source))
        cfg = best.config
        why = f" {self.cost.estimate(cfg, shape).rationale()}." if cfg is not None else ""
        plan = (f"Pick: {best.name} was the fastest of {chosen} catalog configurations and "
                f"{len(items) - chosen} known kernels checked and timed together on this GPU "
                f"({t * 1e3:.1f} us per call).{why}")
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": self._state_text(ctx, shape)
                     + "\nChoose a seed configuration. The pick's measurements (per call):\n" + rows}]
        return Proposal(source=best.source, plan=plan, family=cfg.family if cfg is not None else None,
                        origin="seed", role="seed", messages=messages,
                        completion=f"{plan}\n```cuda\n{best.source}```\n", known_timed=True)

    def _model_seed(self, ctx: TrackContext, shape: Shape, ranked: list[tuple[float, Config]]) -> Proposal:
        """The seed without a pick: the cost model's best of the catalog."""
        _, best = ranked[0]
        table = "\n".join(f"  {c.name}: {p * 1e6:.1f} us predicted" for p, c in ranked[:6])
        plan = (f"Seed with {best.name} ({get_family(best.family).summary}). "
                f"{self.cost.estimate(best, shape).rationale()}.")
        source = best.source()
        self._tried_set(ctx).add(_sha(source))
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": self._state_text(ctx, shape)
                     + "\nChoose a seed configuration. Cost-model ranking of the prebuilt catalog:\n" + table}]
        return Proposal(source=source, plan=plan, family=best.family, origin="seed", role="seed",
                        messages=messages, completion=f"{plan}\n```cuda\n{source}```\n")

    def seed(self, ctx: TrackContext) -> Proposal:
        shape = self._shape(ctx)
        if ctx.seed_source:
            fam = family_of(ctx.seed_source)
            return Proposal(source=ctx.seed_source, plan="configured seed kernel", origin="seed", role="seed",
                            family=fam.name if fam else ctx.family, messages=[], completion="")
        pool = self.candidates(shape, ctx.acc, self._arch(ctx), ctx.dtype)
        if ctx.family:
            pool = [c for c in pool if c.family == ctx.family] or pool
        ranked = self.rank(pool, shape)
        if not ranked:
            return Proposal(origin="seed", role="seed", error=f"no seed family runs on {self._arch(ctx)}")
        if ctx.can_batch and self.pick_top > 0:
            request = self._pick_request(ctx, shape, ranked)
            if request is not None:   # the loop times it and hands the timings to request.decide
                return Proposal(origin="seed", role="seed", pick=request)
        return self._model_seed(ctx, shape, ranked)

    # ------------------------------------------------------------ propose

    def neighbours(self, cfg: Config, shape: Shape, acc: str, arch: str) -> list[Move]:
        """Localized legal edits of ``cfg`` (plus a switch to the best config of other families),
        all in ``cfg``'s element type (its DTYPE is never a move: the catalog's of that type)."""
        found = _Moves(cfg.family, cfg.knob_dict)
        _knob_moves(found, arch, self.launch)
        _FAMILY_MOVES.get(cfg.family, _tile_moves)(found, arch)
        return found.moves + self._catalog_moves(cfg, shape, acc, arch)

    def _catalog_moves(self, cfg: Config, shape: Shape, acc: str, arch: str) -> list[Move]:
        """Jumps to the catalog: the best configuration of each other (allowed) family, then the two
        best of ``cfg``'s own family (a multi-knob jump to a known-good point)."""
        moves: list[Move] = []
        ranked = self.rank([c for c in self.candidates(shape, acc, arch, cfg.dtype) if c.family != cfg.family], shape)
        seen_fams = set()
        for _, c in ranked:
            if c.family in seen_fams:
                continue
            seen_fams.add(c.family)
            moves.append(Move(c, {}, f"switch family to {c.name} ({get_family(c.family).summary})", rewrite=True))
        same = self.rank([c for c in self.candidates(shape, acc, arch, cfg.dtype) if c.family == cfg.family and c != cfg],
                         shape)
        cur = cfg.knob_dict
        for _, c in same[:2]:
            changes = {k: v for k, v in c.knob_dict.items() if cur.get(k) != v}
            if changes:
                moves.append(Move(c, changes, f"jump to the prebuilt {c.name}"))
        return moves

    def propose(self, ctx: TrackContext) -> list[Proposal]:
        shape = self._shape(ctx)
        arch = self._arch(ctx)
        if ctx.step > self.budget or not ctx.source:
            return []
        cfg = Config.from_source(ctx.source)
        tried = self._tried_set(ctx)
        bad = self._bad.get(ctx.track, set())
        if cfg is None:
            # not a family source (edited by hand beyond the knob block): offer the model's best seeds
            ranked = self.rank(self.candidates(shape, ctx.acc, arch, ctx.dtype), shape)
            moves = [Move(c, {}, f"start over from {c.name}", rewrite=True) for _, c in ranked]
        else:
            moves = self.neighbours(cfg, shape, ctx.acc, arch)
        catalog_set = set(self.candidates(shape, ctx.acc, arch, ctx.dtype))
        scored: list[tuple[float, int, Move, str, str | None, str, float]] = []
        step_shas: set[str] = set()   # two moves can reach the same kernel (a jump == a knob edit)
        for mv in moves:
            src = mv.config.source() if (mv.rewrite or cfg is None) else None
            if src is None:
                try:
                    patch = knob_patch(ctx.source, mv.changes)
                except FamilyError:
                    continue
                from l2tui.agent.patches import apply_patch  # lazy: keeps the policy importable alone

                res = apply_patch(ctx.source, patch, allow_rewrite=False)
                if not res.ok:
                    continue
                new_src, text = res.source, patch
            else:
                new_src, text = src, None
            sha = _sha(new_src)
            if sha in tried or sha in bad or sha in step_shas:
                continue
            if self._holds is not None and not self._holds(new_src, shape, ctx.acc):
                continue   # replaying a recording that has no result for it
            step_shas.add(sha)
            raw = self.cost.predict(mv.config, shape)
            # prebuilt (cached build): cheaper to try, preferred on a near-tie
            t = raw * 0.98 if mv.config in catalog_set else raw
            scored.append((t, len(scored), mv, new_src, text, sha, raw))
        if not scored:
            return []
        # a switch into a family ranked with its sibling's constants (costmodel.unfitted_sibling) goes
        # after every move the model has measured grounds for, as in the pick: it is tried when the
        # step has width to spare, or once the current source is of that family
        guess = {row[1] for row in scored if row[2].config.family != (cfg.family if cfg else None)
                 and unfitted_sibling(self.cost.params, row[2].config.family)}
        scored.sort(key=lambda t: (t[1] in guess, t[0], t[1]))
        ordered = _distinct_first(scored)
        if self.new_builds is not None:
            ordered = _limit_new_builds(ordered, catalog_set, self.new_builds)
            if not ordered:
                return []
        chosen = ordered[: self.width]
        if self.explore and len(ordered) > self.width and self.width > 1:
            rng = random.Random(f"{self.rng_seed}:{ctx.track}:{ctx.step}")
            # (the limited list holds at most new_builds new configurations, so any pick keeps to it)
            chosen = chosen[:-1] + [rng.choice(ordered[self.width: self.width + 6])]
        base_t = self.cost.predict(cfg, shape) if cfg is not None else None
        state = self._state_text(ctx, shape)
        table = "\n".join(f"  {r[6] * 1e6:8.1f} us  {r[2].config.name}: {r[2].why}" for r in scored[:10])
        out = []
        for _, _, mv, new_src, text, sha, t in chosen:
            tried.add(sha)
            gain = f" ({base_t / t:.2f}x predicted vs current)" if base_t else ""
            plan = f"{mv.why}. Cost model: {self.cost.estimate(mv.config, shape).rationale()}{gain}."
            messages = [{"role": "system", "content": SYSTEM},
                        {"role": "user", "content": state + "\nCandidate edits ranked by the cost model:\n" + table}]
            if text is None:
                completion = f"{plan}\n```cuda\n{new_src}```\n"
                out.append(Proposal(source=new_src, plan=plan, family=mv.config.family, origin="rewrite",
                                    role="coder", messages=messages, completion=completion))
            else:
                out.append(Proposal(patch=text, plan=plan, family=mv.config.family, origin="patch", role="coder",
                                    messages=messages, completion=f"{plan}\n{text}"))
        return out

    # ------------------------------------------------------------ debug

    def debug(self, ctx: TrackContext, failure: Failure) -> Proposal:
        self._bad.setdefault(ctx.track, set()).add(_sha(failure.source))
        parent = failure.parent_source or ctx.source
        msg = [{"role": "system", "content": SYSTEM},
               {"role": "user", "content": f"The candidate failed ({failure.kind}): {failure.message}"}]
        if parent:
            old, new = Config.from_source(failure.source), Config.from_source(parent)
            if old is not None and new is not None and old.family == new.family:
                changes = {k: v for k, v in new.knob_dict.items() if old.knob_dict.get(k) != v}
                if changes:
                    patch = knob_patch(failure.source, changes)
                    plan = (f"{failure.kind}: revert the knob edit ({', '.join(changes)}) to the parent's values; "
                            f"the parent's optimizations stay, this configuration is marked bad.")
                    return Proposal(patch=patch, plan=plan, origin="debug", role="debugger", family=old.family,
                                    messages=msg, completion=f"{plan}\n{patch}")
            plan = f"{failure.kind}: go back to the last good kernel"
            return Proposal(source=parent, plan=plan, origin="debug", role="debugger", messages=msg,
                            completion=f"{plan}\n```cuda\n{parent}```\n")
        return Proposal(origin="debug", role="debugger", error=f"{failure.kind}: nothing to revert to")
