"""The pick: the first stage of the ``search`` policy, where the prebuilt catalog meets the GPU.

Why a stage of its own: the cost model ranks the catalog well enough to say which dozen of its
configurations can win on a shape, not which one does (its tile-quantization, multicast and
epilogue terms are approximations). The pick times that dozen on the shape, in one request of the
harness (one checker, one timer, every subject interleaved with the baselines), keeps the fastest
that passes every check, and the search refines from there. All of it is built in parallel
before anything touches the GPU; the catalog is prebuilt, so on a warm cache the pick costs GPU
time only.

What is timed (:func:`choose`), from the catalog ranked best-first by the cost model:

* the model's top ``top`` distinct configurations (epilogue variants count as one: the model
  cannot tell them apart), from the families a pick has timed: a family ranked with a sibling's
  constants (``costmodel.SIBLING``) is an unmeasured guess and must not take a proven
  configuration's place; it is timed as a kind instead, its model-best on every shape;
* with ``kinds``, the model's best of each kind it is least sure of (:func:`always_time`), so a
  wrong term in the model cannot hide a whole kind of kernel, and every configuration of a kind
  the model cannot order at all where it can win (:func:`time_every`);
* with ``siblings``, the epilogue variants and PDL twins of everything chosen (timed, not ranked).

Around :func:`choose`, :func:`subjects` is the whole pipeline the sweep and the search policy share:
the shape's incumbent and its no-PDL twin, ``--also`` and the known kernels join the chosen ones.
This module only chooses. A policy proposes what to time as a :class:`PickRequest` (the subjects,
labelled, and how to turn their timings into the seed); the loop's seed stage builds and times
them (``l2tui.agent.seed_timing``), the sweep's track driver (``l2tui.agent.sweep_track``) its own
pick, both in one request of ``harness.batch.evaluate_many`` with the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from harness.families import (SLICED_SCHEDULERS, Config, applicable, build_arch_for, epilogue_siblings, launch_twins,
                              no_pdl_twin, sans_epilogue, validate)
from harness.shapes import Shape

from .costmodel import SIBLING

if TYPE_CHECKING:
    from harness.evaluate import Evaluation
    from harness.known import KnownKernel

    from .base import Proposal

#: a predicate on a configuration: "of a kind the model is least sure of"
Kind = Callable[[Config], bool]


def always_time(shape: Shape) -> list[Kind]:
    """Predicates on configurations; the pick times the model's best match of each besides its
    top-k: one per family; stream-K (the model's least calibrated term); ping-pong (its epilogue
    overlaps the other warpgroup's mainloop, which the model does not see: store-bound shapes);
    when it would split this shape, SPLITK_REDUCE (its reduce term is not calibrated); clusters of
    four and pairs of 64x64 tiles (the model has no multicast term: it sees only their coarser
    grid); the cluster split-K of the latency family (the model prices its reduction like the
    global one's); tiny_mma with K over its warps (the model does not see the shorter MMA chains);
    where it would split, SPLITK_REDUCE in a cluster (multicast again); the best of
    sm90_ksplit (its constants come from its development benches only); CUTLASS with a short fixed
    pipeline (the model prices stages by latency hiding only, not by the set-up of a deep ring
    that a per-call launch pays on a short K); tiny_mma's 128-row tiles (the fitted constants
    predate them); and a pair of CTAs sharing an operand by multicast with any other tile (no
    multicast term again: timed per call on the 199 grid shapes where we were slowest, pairs won
    69, results/h200/sweep-multicast.json); and, on a shape it serves (M <= 128), skinny_splitk
    (its constants are a roofline of B's stream, not a fit)."""
    fams = [lambda c, f=f: c.family == f for f in ("sm90_cutlass", "sm80_mma", "small_splitk", "tiny_mma",
                                                      "sm90_cutlass_t")]
    return fams + [
        lambda c: c.knob_dict.get("SCHEDULER") == "STREAMK",
        lambda c: c.knob_dict.get("SCHEDULE") == "PINGPONG",
        lambda c: c.geometry().separate_reduce and c.geometry().splits_for(shape) > 1,
        lambda c: c.family == "sm90_cutlass" and c.geometry().cluster >= 4,
        lambda c: c.knob_dict.get("CLUSTER_K", "1") != "1",
        lambda c: c.family == "sm90_cutlass" and c.geometry().cluster >= 2 and c.knob_dict["TILE_M"] == "64"
        and c.knob_dict["TILE_N"] == "64",
        lambda c: c.family == "tiny_mma" and c.knob_dict.get("WARPS_K", "1") != "1",
        lambda c: c.geometry().separate_reduce and c.geometry().cluster >= 2 and c.geometry().splits_for(shape) > 1,
        lambda c: c.family == "sm90_ksplit",
        lambda c: c.family == "sm90_cutlass" and c.knob_dict["STAGES"] in ("2", "3", "4"),
        lambda c: c.family == "tiny_mma" and c.knob_dict["BM"] == "128",
        lambda c: c.family == "sm90_cutlass" and c.geometry().cluster == 2
        and (c.knob_dict["TILE_M"], c.knob_dict["TILE_N"]) != ("64", "64"),
        lambda c: c.family == "skinny_splitk" and applicable(c.family, shape, None),
    ]


#: where CUTLASS's non-persistent schedule can win (64x64 output tiles, K), measured per call
BASIC_MAX_TILES = 4 * 132
BASIC_MAX_K = 1024

#: where BASIC with a deep ring wins past BASIC_MAX_K: at most one wave of 64x64 tiles at two CTAs
#: per SM, and enough tiles that no split-K kernel is needed to fill the SMs (measured per call in
#: the seventh round, results/h200/sweep-deep-ring: past K = 1,024 it won 73 target shapes, all in
#: this window, K 2,048 to 16,384 and 32 to 256 tiles; 43 others in the window kept another kernel)
DEEP_RING_MAX_TILES = 2 * 132
DEEP_RING_SHORT_K = 2048
DEEP_RING_MIN_TILES = 32
DEEP_RING_MIN_TILES_LONG_K = 64


def time_every(shape: Shape) -> list[Kind]:
    """Kinds of which the pick times every configuration on ``shape``, not only the model's best.

    CUTLASS's non-persistent schedule (BASIC: a CTA per tile, one consumer warpgroup) where it can
    win: at most four waves of 64x64 tiles on 132 SMs and a K of at most 1,024. The model prices it
    as any persistent kernel, and no one of its tiles is best there: measured per call against the
    incumbents on the 129 small shapes CUTLASS had won, it was faster on 82 of the 98 inside that
    window and on none outside it (a longer K has no split, more tiles favour the persistent
    kernels). Past that K, BASIC with a deep ring (:func:`deep_ring`) where at most one wave of
    tiles is enough to fill the SMs. On a decode GEMM (:func:`is_decode`), besides, every transposed
    CUTLASS kernel whose cluster's token rows are the narrowest that hold M (:func:`decode_tile`)."""
    kinds = _basic_windows(shape)
    if is_decode(shape):
        kinds.append(lambda c: decode_tile(c, shape.m))
    return kinds


def _basic_windows(shape: Shape) -> list[Kind]:
    """The BASIC kinds of :func:`time_every`: all of BASIC in its window, else the deep rings in theirs."""
    tiles = -(-shape.m // 64) * -(-shape.n // 64)
    if tiles <= BASIC_MAX_TILES and shape.k <= BASIC_MAX_K:
        return [whole_k_basic]
    if shape.k > BASIC_MAX_K:
        least = DEEP_RING_MIN_TILES if shape.k <= DEEP_RING_SHORT_K else DEEP_RING_MIN_TILES_LONG_K
        if least <= tiles <= DEEP_RING_MAX_TILES:
            return [deep_ring]
    return []


#: decode GEMMs: a few tokens (M) against a weight matrix of at least this many rows and columns
DECODE_MAX_M = 32
DECODE_MIN_NK = 1024


def is_decode(shape: Shape) -> bool:
    """A decode GEMM: M <= 32 tokens against a B of N, K >= 1,024, whose time is reading B."""
    return shape.m <= DECODE_MAX_M and shape.n >= DECODE_MIN_NK and shape.k >= DECODE_MIN_NK


def decode_covers(m: int) -> tuple[int, ...]:
    """The token rows a decode kernel's cluster may cover on M tokens: the narrowest of 16 and 32
    that holds M, and 8 too for M <= 8; none past a decode GEMM's M."""
    if m > DECODE_MAX_M:
        return ()
    return (8, 16) if m <= 8 else (16,) if m <= 16 else (32,)


def decode_tile(c: Config, m: int) -> bool:
    """The transposed CUTLASS kernel (the tokens on the WGMMA's N) whose cluster covers the rows
    :func:`decode_covers` names for M tokens: a tile of that many rows, or a cluster of narrower
    tiles along M (8-row tiles in pairs up to M = 16, 16-row pairs above) that shares each weight
    tile by multicast. A pair's second CTA may hold no token (M <= 8) and still pays: it loads
    half of every weight tile for both (per call on an H100, 8x4096x4096: 8.24 us for an 8-row
    pair, 9.61 us for a lone 8-row tile, 10.10 us for cuBLASLt-autotune;
    results/h100/ab-decode-pairs.json). On a decode GEMM the model prices every
    kernel at B's floor and cannot tell which reaches it; their schedules split the shapes between
    them (measured per call on an H100, 18 decode shapes: BASIC best on the short ones, stream-K
    and split-K on a long K, the persistent 256-wide tile on a wide N), a 64-column BASIC tile
    gives a 4096-wide B twice the CTAs, and a pair of 8-row tiles twice again, each reading half
    of every weight tile for both (cuBLASLt's decode kernels on Hopper are built that way)."""
    if c.family != "sm90_cutlass_t":
        return False
    tile, pair = int(c.knob_dict["TILE_M"]), int(c.knob_dict.get("CLUSTER_M", "1"))
    return tile * pair in decode_covers(m)


def whole_k_basic(c: Config) -> bool:
    """CUTLASS BASIC, a CTA per tile over the whole K (the windows' kind). The decode entries that
    cut K into slices and add them in a second kernel (``SPLITK_REDUCE``) or in the GEMM's own
    launch (``SPLITK_FUSED``), and the narrow tiles in pairs along M (:func:`token_pair`), are
    timed as decode tiles (:func:`decode_tile`), not on every small shape."""
    k = c.knob_dict
    return (k.get("SCHEDULE") == "BASIC" and k.get("SCHEDULER", "PERSISTENT") not in SLICED_SCHEDULERS
            and not token_pair(c))


def token_pair(c: Config) -> bool:
    """A transposed CUTLASS tile of at most 16 token rows in a cluster along M: a decode kernel
    (two CTAs sharing each weight tile), which on M of 64 or more is only many narrow CTAs."""
    k = c.knob_dict
    return c.family == "sm90_cutlass_t" and int(k.get("CLUSTER_M", "1")) > 1 and int(k["TILE_M"]) <= 16


def deep_ring(c: Config) -> bool:
    """CUTLASS BASIC with a ring of six stages or more (or as many as fit, or 128-wide k-tiles): one
    or two CTAs per SM, each with 96-128 KB of loads in flight, for a grid of at most one wave with
    a long K, where a CTA's loads in flight, not the tensor cores, set its speed. The model prices
    stages by latency hiding only and ranks these with the shallow rings."""
    k = c.knob_dict
    return whole_k_basic(c) and (k.get("STAGES") in ("0", "6", "7", "8") or k.get("TILE_K") == "128")


def choose(ranked: Sequence[Config], shape: Shape, top: int, *, kinds: bool = True,
           siblings: bool = True) -> list[Config]:
    """What the pick times on ``shape`` from ``ranked`` (best first by the cost model); see the
    module docstring. The order is the model's, then the kinds, then the siblings."""
    chosen: list[Config] = []
    keys: set = set()
    for c in ranked:
        if len(chosen) >= top:
            break
        if c.family in SIBLING:
            continue
        if sans_epilogue(c) not in keys:
            keys.add(sans_epilogue(c))
            chosen.append(c)
    if kinds:
        for wanted in always_time(shape):
            extra = next((c for c in ranked if _safe(wanted, c)), None)
            if extra is not None and extra not in chosen:
                chosen.append(extra)
        for wanted in time_every(shape):
            chosen += [c for c in ranked if _safe(wanted, c) and c not in chosen]
    if siblings:
        pool = list(ranked)
        for c in list(chosen):
            for sib in epilogue_siblings(c, pool):
                if sib not in chosen:
                    chosen.append(sib)
        for c in list(chosen):
            for twin in launch_twins(c, pool):
                if twin not in chosen:
                    chosen.append(twin)
    return chosen


def _safe(pred: Kind, c: Config) -> bool:
    """A kind predicate that reads a knob another family lacks is simply false for it."""
    try:
        return bool(pred(c))
    except (KeyError, AttributeError, ValueError):
        return False


@dataclass
class PickSettings:
    """How much of the catalog the pick times per shape (``[search]`` keys ``pick_top`` etc.)."""

    top: int = 5                 # the cost model's top distinct configurations (0 = no pick)
    kinds: bool = True           # plus the best of each kind the model is least sure of
    siblings: bool = True        # plus epilogue variants and PDL twins of the chosen


@dataclass(frozen=True)
class Subject:
    """One kernel the pick times: a catalog configuration (``config``) or a known kernel
    (``known``, its ``name`` and ``layer``), and why it is there (``reason``: ``chosen`` by the
    cost model, the ``incumbent`` of the shape, the incumbent's no-PDL ``twin``, named by
    ``also``, or ``known``)."""

    source: str
    reason: str
    config: Config | None = None
    known: KnownKernel | None = None


def subjects(ranked: Sequence[Config], shape: Shape, settings: PickSettings, *, incumbent: Config | None = None,
             per_call: bool = True, also: Sequence[Config] = (),
             known: Sequence[KnownKernel] = ()) -> list[Subject]:
    """The pick's pipeline, one list for the sweep and the search policy: :func:`choose` over the
    ranked catalog, then the shape's incumbent (and, for a per-call pool, its launch without PDL),
    the ``also`` configurations, and the known kernels; each source once, in that order."""
    chosen = choose(ranked, shape, settings.top, kinds=settings.kinds, siblings=settings.siblings)
    out = [Subject(c.source(), "chosen", config=c) for c in chosen]
    extra: list[tuple[Config, str]] = []
    if incumbent is not None:
        extra.append((incumbent, "incumbent"))
        twin = _no_pdl_twin(incumbent) if per_call else None
        if twin is not None:
            extra.append((twin, "twin"))
    extra += [(c, "also") for c in also]
    for c, reason in extra:
        if c not in chosen:
            chosen.append(c)
            out.append(Subject(c.source(), reason, config=c))
    have = {s.source for s in out}
    for k in known:
        if k.source not in have:
            have.add(k.source)
            out.append(Subject(k.source, "known", config=Config.from_source(k.source), known=k))
    return out


def _no_pdl_twin(c: Config) -> Config | None:
    """``c`` launched without programmatic dependent launch, when its family has that knob."""
    knobs = no_pdl_twin(c.family, c.knob_dict)
    return Config.of(c.family, knobs) if knobs and not validate(c.family, knobs) else None


@dataclass(frozen=True)
class PickItem:
    """One kernel of a :class:`PickRequest`: its ``label`` in the batch, its source, its catalog
    configuration (None for a known kernel that is not one), and ``note``, what a known kernel is
    (its name and layer; empty for a catalog configuration)."""

    label: str
    source: str
    config: Config | None = None
    note: str = ""

    @property
    def name(self) -> str:
        """How the seed's plan and messages name it."""
        return self.note or self.label


#: a policy's turn of the pick's timings (label -> evaluation) into its seed
Decide = Callable[["Mapping[str, Evaluation]"], "Proposal"]


@dataclass(frozen=True)
class PickRequest:
    """What a policy proposes to time before it seeds: ``items`` (the first ``chosen`` of them
    catalog configurations, the rest known kernels), built for ``arch``, and ``decide``, the
    policy's seed from their timings. Why a request rather than timings: a policy only proposes;
    the loop's seed stage (``l2tui.agent.seed_timing``) builds and times, so no policy holds an
    evaluator."""

    items: tuple[PickItem, ...]
    chosen: int
    arch: str
    decide: Decide

    @property
    def known(self) -> int:
        """How many of the items are known kernels."""
        return len(self.items) - self.chosen

    def detail(self) -> str:
        """The ``stage`` event's detail: what the request times."""
        return f"{self.chosen} catalog configurations, {self.known} known kernels"

    def batch(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """The items as ``harness.batch`` items (label, source, no extra nvcc flags)."""
        return [(it.label, it.source, ()) for it in self.items]

    def builds(self) -> dict[str, list[str]]:
        """The sources by the architecture each is built for (a family may build for another
        than the GPU's, ``harness.families.build_arch_for``)."""
        by_arch: dict[str, list[str]] = {}
        for it in self.items:
            a = build_arch_for(it.config.family, self.arch) if it.config is not None else self.arch
            by_arch.setdefault(a, []).append(it.source)
        return by_arch


def candidate_ms(ev: Evaluation | None) -> float | None:
    """The time of an item that passed every check, else None."""
    if ev is None or ev.status != "ok":
        return None
    return ev.times_ms.get("candidate") or None


def fastest(items: Sequence[PickItem], evs: Mapping[str, Evaluation]) -> tuple[float, PickItem] | None:
    """The fastest item that passed (the earlier of equal times), with its time; None: none did."""
    timed = [(t, i, it) for i, it in enumerate(items) if (t := candidate_ms(evs.get(it.label)))]
    if not timed:
        return None
    t, _, best = min(timed, key=lambda row: (row[0], row[1]))
    return t, best
