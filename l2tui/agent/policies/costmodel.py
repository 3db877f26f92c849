"""A cheap analytic cost model for seed-family configurations, used BEFORE building.

The search policy proposes many knob edits; building one CUTLASS configuration costs about a
minute of CPU, timing it costs GPU time.  This model predicts the offline device time of a
configuration on a shape from first principles plus a few per-family constants fitted to H200
measurements (``tests/fixtures/h200_timings``), so only the most promising few get built and
timed.  It only has to *rank* well, not to be exact.

Terms (all in seconds):

* launch/fixed cost per family (kernel launch, prologue, epilogue drain),
* compute: waves x per-CTA time, where waves count the CTAs (tiles x K splits) over the
  132 SMs x CTAs per SM (shared-memory and register fit), the per-CTA time is its padded work
  (tile quantization waste included) at the per-SM tensor rate scaled by a tile-shape efficiency
  (arithmetic intensity tm*tn/(tm+tn)) and a pipeline-fill factor (short K loops never reach
  steady state); stream-K balances fractional waves,
* memory: the DRAM bytes at the copy bandwidth: A, B, C once plus split-K partial sums, and, for
  operands too big to stay in L2, what the tile order reads again every wave (:func:`dram_bytes`:
  a wave of a persistent sm90 kernel is a block of tile rows x tile columns fixed by its raster
  and swizzle),
* power: on the power-capped H200 the bytes read again cost SM clock, not just DRAM time (ncu at
  5360991: the same cycle count as cuBLASLt at a 22 % lower clock with four times its DRAM
  traffic), so they are also charged at a fitted ``reread_gbs`` on the compute side,
* split-K reduction tail: the last CTA of a tile reads every slice's partials,
* store: the part of writing each wave's C tiles that the epilogue does not overlap with math
  (each SM's share of the bandwidth; fitted per EPILOGUE: with EPI_TMA_NOC the stores are
  delayed and overlap the next subtile's copies, so less of it shows).

The time is ``fixed + max(compute + store + power, memory, latency) + reduction``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from harness.families import Config, Geometry, applicable
from harness.shapes import Shape

SM_COUNT = 132
SMEM_PER_SM = 227 * 1024
#: a dependent second kernel (SPLITK_REDUCE's reduce) in a graph, launched with PDL: roughly the
#: empty-kernel floor measured on the H200 (../shared/GPU.md: ~0.5 us) plus its own tail
SECOND_LAUNCH_US = 1.0
#: sm90_ksplit GROUPS > 1: arrive, spin on the counter, depart (a guess until measured)
GLOBAL_BARRIER_US = 1.0
#: the H200's L2 (50 MB); an operand up to half of it is taken to stay there between waves
L2_BYTES = 50 * 1024 * 1024


@dataclass(frozen=True)
class FamilyParams:
    """Per-family constants (H200 values by default, refitted by :func:`fit`)."""

    fixed_us: float          # launch + prologue + epilogue of one CTA
    peak_tflops: float       # dense fp16 tensor rate the family can reach on the whole GPU
    fill_ktiles: float       # k-tiles of pipeline fill before steady state
    ktile_latency_us: float  # latency floor of one k-tile when few CTAs run (memory latency)
    reduce_gbs: float = 100.0  # rate at which a tile's split-K partials are added (per tile, GB/s)
    pdl_us: float = 0.0        # launch latency hidden by programmatic dependent launch (PDL knob)
    store_tma: float = 0.0     # fraction of storing a C tile that is not overlapped (every epilogue
                               # but EPI_TMA_NOC: EPI_TMA, EPI_NOSMEM, the mma.sync shared-memory one)
    store_noc: float = 0.0     # the same with EPI_TMA_NOC (delayed TMA stores, no C buffers)


@dataclass(frozen=True)
class Params:
    families: dict[str, FamilyParams] = field(default_factory=dict)
    bandwidth_gbs: float = 3800.0
    intensity_half: float = 16.0   # tile intensity at which the efficiency is half of its limit
    # bytes re-read from DRAM per second of compute time they cost through the power cap
    # (under ncu, ~3 GB more read from DRAM cost ~270 us on 8192x12288x4096: ~11 TB/s)
    reread_gbs: float = 11000.0

    def to_dict(self) -> dict:
        return {"families": {k: asdict(v) for k, v in self.families.items()},
                "bandwidth_gbs": self.bandwidth_gbs, "intensity_half": self.intensity_half,
                "reread_gbs": self.reread_gbs}

    @staticmethod
    def from_dict(d: Mapping) -> "Params":
        return Params({k: FamilyParams(**v) for k, v in d["families"].items()},
                      d.get("bandwidth_gbs", 3800.0), d.get("intensity_half", 16.0),
                      d.get("reread_gbs", 11000.0))


DEFAULT_PARAMS = Params(
    families={
        "sm90_cutlass": FamilyParams(fixed_us=3.0, peak_tflops=760.0, fill_ktiles=2.0, ktile_latency_us=0.35),
        # sm90_cutlass_t: sm90_cutlass's machinery in the transposed order; its constants until a
        # pick has timed it
        "sm90_cutlass_t": FamilyParams(fixed_us=3.0, peak_tflops=760.0, fill_ktiles=2.0, ktile_latency_us=0.35),
        "sm80_mma": FamilyParams(fixed_us=2.0, peak_tflops=480.0, fill_ktiles=2.0, ktile_latency_us=0.5),
        "small_splitk": FamilyParams(fixed_us=1.8, peak_tflops=420.0, fill_ktiles=2.0, ktile_latency_us=0.5),
        # tiny_mma: a 64x64x64 call took 0.91 us graph-replayed with PDL and 1.38 us without
        # (tools/probes/latency_floor on the H200); not yet fitted on a pick
        "tiny_mma": FamilyParams(fixed_us=1.4, peak_tflops=250.0, fill_ktiles=0.5, ktile_latency_us=0.35,
                                 pdl_us=0.5),
        # sm90_ksplit: a first guess; the calibrated file holds a fit to its development benches
        "sm90_ksplit": FamilyParams(fixed_us=2.6, peak_tflops=600.0, fill_ktiles=2.0, ktile_latency_us=0.3,
                                    reduce_gbs=200.0, pdl_us=0.7),
        # skinny_splitk: not yet timed; priced by :meth:`CostModel._skinny` (B's bytes through the
        # loads each CTA keeps in flight), with ktile_latency_us the DRAM round trip under load and
        # reduce_gbs the last CTA's rate of adding the slices (L2)
        "skinny_splitk": FamilyParams(fixed_us=1.4, peak_tflops=400.0, fill_ktiles=1.0, ktile_latency_us=1.0,
                                      reduce_gbs=200.0),
    }
)

#: the time a configuration gets on a shape its family refuses (it ranks after every other)
REFUSED_S = 1.0
#: what one SM can stream from DRAM (an assumption, about twice its share of the H200's read
#: bandwidth): a grid on few SMs cannot reach the bandwidth whatever it keeps in flight
SM_STREAM_GBS = 64.0
#: families no calibration has timed yet that rank with their own first-principles constants in
#: DEFAULT_PARAMS (no sibling's fit applies): the pick times their model-best as a kind
UNCALIBRATED = frozenset({"skinny_splitk"})

CALIBRATED_FILE = Path(__file__).with_name("costmodel_h200.json")

#: a family no calibration has timed yet ranks with the fitted constants of the family whose
#: machinery it shares (sm90_cutlass_t is sm90_cutlass's kernel in the transposed order), so that
#: a fit of one does not leave the other on unfitted defaults beside it
SIBLING = {"sm90_cutlass_t": "sm90_cutlass"}


def unfitted_sibling(p: "Params", family: str) -> bool:
    """Whether ``family`` ranks with its sibling's constants (no calibration has timed it yet): its
    predictions are a guess, which the pick and the search never let push out a fitted one."""
    return family in SIBLING and family not in p.families


def family_params(p: "Params", family: str) -> FamilyParams:
    """``family``'s constants in ``p``: its own fit, else its sibling's, else the defaults."""
    return (p.families.get(family) or p.families.get(SIBLING.get(family, ""))
            or DEFAULT_PARAMS.families[family])


def read_params(path: str | Path) -> Params:
    """Constants from a file written by ``tools/calibrate_costmodel.py --out`` (what ``l2tui sweep
    --cost-model`` ranks with, to try a refit before it replaces the committed file).

    Raises ``ValueError`` with one line that names the file and what is wrong."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"cannot read cost-model file {str(path)!r}: {e.strerror or e}") from None
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"cost-model file {str(path)!r} is not JSON") from None
    try:
        params = Params.from_dict(doc)
        if not params.families or not all(isinstance(f, FamilyParams) for f in params.families.values()):
            raise TypeError("no families")
        for fam in params.families.values():
            if not all(isinstance(v, (int, float)) and v == v for v in vars(fam).values()):
                raise TypeError("a constant is not a number")
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"cost-model file {str(path)!r} is not a constants file of "
                         f"tools/calibrate_costmodel.py ({e})") from None
    return params


def load_params() -> Params:
    """Calibrated H200 parameters when present (written by ``fit``), else the defaults."""
    try:
        return Params.from_dict(json.loads(CALIBRATED_FILE.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_PARAMS


@dataclass(frozen=True)
class Estimate:
    seconds: float
    waves: float
    ctas: int
    splits: int
    quantization: float      # padded work / useful work (>= 1)
    intensity: float         # tile arithmetic intensity tm*tn/(tm+tn)
    bound: str               # "compute" | "memory" | "latency" | "fixed"
    smem_fit: bool

    @property
    def us(self) -> float:
        return self.seconds * 1e6

    def rationale(self) -> str:
        return (f"{self.us:.1f} us predicted ({self.bound}-bound): {self.ctas} CTAs in {self.waves:.2f} waves "
                f"on {SM_COUNT} SMs, split-K {self.splits}, tile waste {100 * (self.quantization - 1):.0f}%, "
                f"tile intensity {self.intensity:.0f} flop/B-equivalent")


class CostModel:
    """Predict seconds for (configuration, shape); lower is better."""

    def __init__(self, params: Params | None = None, sm_count: int = SM_COUNT):
        self.params = params or load_params()
        self.sm_count = sm_count

    def estimate(self, cfg: Config, shape: Shape) -> Estimate:
        g = cfg.geometry()
        p = family_params(self.params, cfg.family)
        return self._estimate(g, p, shape)

    def predict(self, cfg: Config, shape: Shape) -> float:
        return self.estimate(cfg, shape).seconds

    def _estimate(self, g: Geometry, p: FamilyParams, s: Shape) -> Estimate:
        if g.family == "skinny_splitk":
            return self._skinny(g, p, s)
        tm, tn, tk = g.tile_m, g.tile_n, g.tile_k
        tiles_m, tiles_n = g.tile_grid(s)   # padded to the cluster x swizzle on sm90
        tiles = tiles_m * tiles_n
        ktiles = math.ceil(s.k / tk)
        splits = g.splits_for(s, self.sm_count)
        if g.streamk and tiles < self.sm_count:
            # stream-K spreads the k-iterations of few tiles over all SMs
            splits = max(1, min(ktiles, self.sm_count // max(tiles, 1)))
        k_per_cta = math.ceil(ktiles / splits)
        ctas = tiles * splits
        slots = self.sm_count * max(1, g.ctas_per_sm)
        if g.cluster > 1:
            slots = (self.sm_count // g.cluster) * g.cluster * max(1, g.ctas_per_sm)
        waves = ctas / slots if g.streamk else math.ceil(ctas / slots)
        intensity = tm * tn / (tm + tn)
        ih = self.params.intensity_half
        ref = (128 * 256 / 384) / ((128 * 256 / 384) + ih)
        eff = (intensity / (intensity + ih)) / ref
        if g.pingpong:
            eff *= 1.03            # epilogue of one tile overlaps the mainloop of the next
        fill = k_per_cta / (k_per_cta + p.fill_ktiles)
        per_sm = p.peak_tflops * 1e12 / self.sm_count * eff * fill
        concurrent = max(1, min(g.ctas_per_sm, math.ceil(ctas / self.sm_count)))
        unit = 2.0 * tm * tn * tk * k_per_cta / (per_sm / concurrent)
        compute = max(waves, 1.0 / slots) * unit
        latency = k_per_cta * p.ktile_latency_us * 1e-6 / max(1, g.stages - 1) * 2
        reread = max(0.0, dram_bytes(g, s, min(ctas, slots)) - s.min_bytes)
        bytes_ = s.min_bytes + reread + (2 * 4 * ctas * tm * tn if splits > 1 else 0)
        memory = bytes_ / (self.params.bandwidth_gbs * 1e9)
        power = reread / (self.params.reread_gbs * 1e9)
        if g.separate_reduce:
            # SPLITK_REDUCE: all slices are written and read back by a second, GPU-wide kernel;
            # SPLITK_FUSED reads them back in the same launch, after a grid barrier
            rejoin = GLOBAL_BARRIER_US if g.fused_reduce else SECOND_LAUNCH_US
            reduce = 8.0 * splits * s.m * s.n / (self.params.bandwidth_gbs * 1e9) + rejoin * 1e-6
        else:
            reduce = (splits * tm * tn * 4 / (p.reduce_gbs * 1e9)) if splits > 1 else 0.0
        groups = g.groups_for(s, self.sm_count)
        if groups > 1:
            # sm90_ksplit GROUPS: each cluster's sums go through an fp32 workspace in L2 and the
            # clusters of a tile meet at a global barrier (counter round trips)
            reduce = (g.split_k + groups) * tm * tn * 4 / (p.reduce_gbs * 1e9) + GLOBAL_BARRIER_US * 1e-6
        exposed = p.store_noc if g.epilogue == "EPI_TMA_NOC" else p.store_tma
        store = 0.0
        if exposed > 0:
            out_b = 4 if g.separate_reduce else 2
            per_sm_bw = self.params.bandwidth_gbs * 1e9 / self.sm_count
            store = max(waves, 1.0 / slots) * tm * tn * out_b / per_sm_bw * exposed
        body = max(compute + store + power, memory, latency)
        bound = "compute" if body == compute + store + power else ("memory" if body == memory else "latency")
        fixed = max(0.2, p.fixed_us - (p.pdl_us if g.pdl else 0.0)) * 1e-6
        total = fixed + body + reduce
        if fixed > body:
            bound = "fixed"
        quant = (tiles * tm * tn * ktiles * tk) / (s.m * s.n * s.k)
        return Estimate(total, float(waves), ctas, splits, quant, intensity, bound, g.smem_bytes <= SMEM_PER_SM)

    def _skinny(self, g: Geometry, p: FamilyParams, s: Shape) -> Estimate:
        """skinny_splitk: a roofline of B's stream. Each row tile reads all of B (ceil(M / BM) times
        in all), A once per column tile (from L2), and a split tile's partials (its rows below M)
        go through the workspace; the rate is the bandwidth or, by Little's law, what the resident
        CTAs keep in flight (STAGES - 1 stages of B each) per DRAM round trip, whichever is lower.
        The MMAs (M padded to 16-row fragments) are the other bound; the last CTA of each split
        tile adds its slices after the stream. A shape the family refuses ranks last."""
        tiles_m, tiles_n = math.ceil(s.m / g.tile_m), math.ceil(s.n / g.tile_n)
        intensity = g.tile_m * g.tile_n / (g.tile_m + g.tile_n)
        if not applicable(g.family, s, None):
            return Estimate(REFUSED_S, 0.0, 0, 0, 1.0, intensity, "unsupported", g.smem_bytes <= SMEM_PER_SM)
        splits = g.splits_for(s, self.sm_count)
        ctas = tiles_m * tiles_n * splits
        slots = self.sm_count * max(1, g.ctas_per_sm)
        waves = math.ceil(ctas / slots)
        rows = min(s.m, g.tile_m)
        partials = 2 * 4 * ctas * rows * g.tile_n if splits > 1 else 0
        bytes_ = tiles_m * 2.0 * s.k * s.n + 2.0 * s.m * s.k + 2.0 * s.m * s.n + partials
        latency = p.ktile_latency_us * 1e-6
        per_cta = max(1, g.stages - 1) * g.tile_k * g.tile_n * 2.0   # B's bytes each CTA has in flight

        def wave_time(n: int) -> float:
            # n CTAs streaming together: their bytes at the bandwidth or at what they keep in
            # flight per round trip (Little's law), plus the round trip that fills their rings
            sms = min(n, self.sm_count)
            rate = min(self.params.bandwidth_gbs * 1e9, n * per_cta / latency, sms * SM_STREAM_GBS * 1e9)
            return n * bytes_ / ctas / rate + latency

        full, tail = divmod(ctas, slots)
        memory = full * wave_time(slots) + (wave_time(tail) if tail else 0.0)
        k_per_cta = math.ceil(math.ceil(s.k / g.tile_k) / splits)
        per_sm = p.peak_tflops * 1e12 / self.sm_count * k_per_cta / (k_per_cta + p.fill_ktiles)
        concurrent = max(1, min(g.ctas_per_sm, math.ceil(ctas / self.sm_count)))
        mma_rows = math.ceil(rows / 16) * 16
        compute = waves * 2.0 * mma_rows * g.tile_n * g.tile_k * k_per_cta / (per_sm / concurrent)
        reduce = splits * rows * g.tile_n * 4 / (p.reduce_gbs * 1e9) if splits > 1 else 0.0
        body = max(memory, compute)
        fixed = p.fixed_us * 1e-6
        bound = "fixed" if fixed > body else ("memory" if memory >= compute else "compute")
        quant = (tiles_m * g.tile_m * tiles_n * g.tile_n) / (s.m * s.n)
        return Estimate(fixed + body + reduce, float(waves), ctas, splits, quant, intensity, bound,
                        g.smem_bytes <= SMEM_PER_SM)

    def rank(self, configs: Iterable[Config], shape: Shape) -> list[tuple[float, Config]]:
        """Configurations sorted by predicted time (stable for equal predictions)."""
        scored = [(self.predict(c, shape), i, c) for i, c in enumerate(configs)]
        scored.sort(key=lambda t: (t[0], t[1]))
        return [(t, c) for t, _, c in scored]


def wave_block(g: Geometry, tiles_m: int, tiles_n: int, concurrent: int,
               swizzle: int | None = None) -> tuple[int, int]:
    """(tile rows, tile columns) that ``concurrent`` tiles of a persistent sm90 kernel span at
    once, from CUTLASS's tile order: the heuristic rasters along M when there are more tile
    columns than rows, else along N; the swizzle (narrowed to 4, 2 or 1 on grids under 6, 3 or 2
    tiles a side, as CUTLASS does) is the width of the strip the raster walks across. Pass
    ``swizzle`` when the grid given is already padded: CUTLASS narrows it before padding."""
    along_m = g.raster == "M" or (g.raster == "H" and tiles_n > tiles_m)
    sw = swizzle if swizzle is not None else g.swizzle_size(tiles_m, tiles_n)
    major, minor = (tiles_m, tiles_n) if along_m else (tiles_n, tiles_m)  # walked, then stepped
    strip = sw * major
    if concurrent <= strip:
        across, along = min(sw, minor), min(major, math.ceil(concurrent / sw))
    else:
        across, along = min(minor, sw * math.ceil(concurrent / strip)), major
    return (along, across) if along_m else (across, along)


def dram_bytes(g: Geometry, s: Shape, concurrent: int) -> float:
    """DRAM bytes of one call: C once, and each of A and B once if it fits in half the L2, else
    once per wave for the part of it the wave's block of tiles spans (at least once). Stream-K and
    split-K walk the same tile order (a wave of K slices reads its tiles' rows and columns for
    1/splits of K, and there are splits times as many waves: the same bytes). Tile orders the
    model does not know (``swizzle`` 0) read each operand once."""
    a_b, b_b, c_b = 2.0 * s.m * s.k, 2.0 * s.k * s.n, 2.0 * s.m * s.n
    if g.swizzle == 0:
        return a_b + b_b + c_b
    tiles_m, tiles_n = g.tile_grid(s)
    waves = tiles_m * tiles_n / max(1, concurrent)
    sw = g.swizzle_size(math.ceil(s.m / g.tile_m), math.ceil(s.n / g.tile_n))
    rows, cols = wave_block(g, tiles_m, tiles_n, concurrent, sw)
    if a_b > L2_BYTES / 2:
        a_b = max(a_b, waves * min(s.m, rows * g.tile_m) * s.k * 2.0)
    if b_b > L2_BYTES / 2:
        b_b = max(b_b, waves * min(s.n, cols * g.tile_n) * s.k * 2.0)
    return a_b + b_b + c_b


# ---------------------------------------------------------------- calibration


def load_timings(paths: Sequence[Path | str]) -> list[tuple[Config, Shape, float]]:
    """Records ``(config, shape, seconds)`` from timing fixture files (tests/fixtures/h200_timings)."""
    return [r for path in paths for r in records_of(json.loads(Path(path).read_text()))]


def records_of(data: dict) -> list[tuple[Config, Shape, float]]:
    """Records ``(config, shape, seconds)`` of one timing document (a fixture file's content, or
    ``timings.from_session``'s); baselines and names without a configuration are left out."""
    configs = {name: Config.of(c["family"], c["knobs"]) for name, c in data["configs"].items()}
    out = []
    for row in data["timings"]:
        shape = Shape(*row["shape"])
        for name, ms in row["times_ms"].items():
            if name in configs and ms is not None and ms > 0:
                out.append((configs[name], shape, ms * 1e-3))
    return out


def log_error(model: CostModel, records: Sequence[tuple[Config, Shape, float]]) -> float:
    """Mean squared log2 ratio of predicted to measured time."""
    if not records:
        return 0.0
    return sum(math.log2(model.predict(c, s) / t) ** 2 for c, s, t in records) / len(records)


#: the grids :func:`fit` searches: the global constants, then each family's
#: (attribute, values) searched for the whole model, then for each family
GLOBAL_GRIDS: tuple[tuple[str, Sequence[float]], ...] = (("intensity_half", (8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0)),
                ("reread_gbs", (2000.0, 4000.0, 7000.0, 11000.0, 16000.0, 25000.0, 50000.0, 1e9)))
FAMILY_GRIDS: tuple[tuple[str, Sequence[float]], ...] = (("fixed_us", [0.8, 1.0, 1.3, 1.6, 2.0, 2.5, 3.0, 4.0, 5.0, 6.5]),
                ("peak_tflops", [120, 160, 200, 250, 320, 400, 480, 560, 640, 720, 800, 880]),
                ("fill_ktiles", [0.5, 1.0, 2.0, 3.0, 4.0, 6.0]),
                ("ktile_latency_us", [0.1, 0.2, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0]),
                ("reduce_gbs", [10, 25, 50, 100, 200, 400, 800]),
                ("pdl_us", [0.0, 0.25, 0.5, 0.75, 1.0, 1.5]),
                ("store_tma", [0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5]),
                ("store_noc", [0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5]))
#: what :func:`fit` can minimise
OBJECTIVES = ("log", "top3")



def _lowest(params: Params, cands: list[Params], records: list) -> Params:
    """The first of ``cands`` with the lowest :func:`log_error` on ``records`` (``params`` when
    there is none)."""
    best: tuple[float, Params] | None = None
    for cand in cands:
        err = log_error(CostModel(cand), records)
        if best is None or err < best[0] - 1e-12:
            best = (err, cand)
    return best[1] if best is not None else params

def fit(records: Sequence[tuple[Config, Shape, float]], base: Params | None = None, rounds: int = 3,
        objective: str = "log") -> Params:
    """Coordinate search of each family's constants on a log grid (deterministic, no numpy).

    Small and robust on purpose: a few hundred records, four constants per family.

    ``objective``: ``"log"`` (the default) minimises :func:`log_error`, the mean squared log2
    error of every predicted time; ``"top3"`` minimises :func:`top3_objective`, which weighs the
    top of each shape's ranking (see there).
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown fit objective {objective!r} (one of {', '.join(OBJECTIVES)})")
    if objective == "top3":
        return _fit_ranking(records, base or DEFAULT_PARAMS, rounds)
    params = base or DEFAULT_PARAMS
    fams = sorted({c.family for c, _, _ in records})
    for _ in range(rounds):
        for attr, grid in GLOBAL_GRIDS:
            params = _lowest(params, [replace(params, **{attr: v}) for v in grid], records)  # type: ignore[arg-type]
        for fam in fams:
            recs = [r for r in records if r[0].family == fam]
            for attr, grid in FAMILY_GRIDS:
                params = _lowest(params, [replace(params, families={**params.families, fam: replace(
                    params.families[fam], **{attr: float(v)})}) for v in grid], recs)
    return params


#: the fits' input: (configuration, shape, measured seconds) per timing
Records = Sequence[tuple[Config, Shape, float]]
#: a shape's records (their indices) and its fastest measured time
ShapeGroup = tuple[list[int], float]

#: :func:`top3_objective`'s weights: of the log top-1 regret, and of :func:`log_error` (a small
#: one: it breaks the ties of the piecewise-constant regrets and keeps the times sane)
TOP1_WEIGHT = 0.5
LOG_WEIGHT = 0.05


def top3_objective(model: CostModel, records: Sequence[tuple[Config, Shape, float]],
                   top1_weight: float | None = None, log_weight: float | None = None) -> float:
    """What ``fit(objective="top3")`` minimises: the mean over shapes of ln(measured time of the
    best of the model's top 3 / measured best) (the log of the top-3 regret's geomean), plus
    ``top1_weight`` times the same of the model's first choice, plus ``log_weight`` times
    :func:`log_error`. The top is taken over a shape's records ordered by predicted time (stable:
    records order ties), as ``tools/calibrate_costmodel.py`` ranks them."""
    top1_weight = TOP1_WEIGHT if top1_weight is None else top1_weight
    log_weight = LOG_WEIGHT if log_weight is None else log_weight
    preds = [model.predict(c, s) for c, s, _ in records]
    shapes = _shape_groups(records)
    times = [t for _, _, t in records]
    return _ranking_sum(shapes, preds, times, top1_weight) / max(1, len(shapes)) + \
        log_weight * _sq_log_sum(records, preds, range(len(records))) / max(1, len(records))


def _shape_groups(records: Records) -> list[ShapeGroup]:
    """Per shape (first-seen order): its records' indices and their fastest measured time."""
    by: dict[Shape, list[int]] = {}
    for i, (_, s, _) in enumerate(records):
        by.setdefault(s, []).append(i)
    return [(idx, min(records[i][2] for i in idx)) for idx in by.values()]


def _ranking_sum(groups: Sequence[ShapeGroup], preds: Sequence[float], times: Sequence[float],
                 top1_weight: float) -> float:
    """Sum over ``groups`` of ln(top-3 regret) + top1_weight * ln(top-1 regret)."""
    out = 0.0
    for idx, best in groups:
        order = sorted(idx, key=lambda i: (preds[i], i))
        top = [times[i] for i in order[:3]]
        out += math.log(min(top) / best) + top1_weight * math.log(top[0] / best)
    return out


def _sq_log_sum(records: Records, preds: Sequence[float], idx: Iterable[int]) -> float:
    return sum(math.log2(preds[i] / records[i][2]) ** 2 for i in idx)


def _fit_ranking(records: Records, params: Params, rounds: int, top1_weight: float | None = None,
                 log_weight: float | None = None) -> Params:
    """``fit(objective="top3")``: the same coordinate search over the same grids, minimising
    :func:`top3_objective`. A family's constants move its configurations against the other
    families' on every shape where it has records, so a family's candidate is scored on all those
    shapes (the other families' predictions kept from the current constants) and the log error
    term on its own records; the global constants on everything."""
    top1_weight = TOP1_WEIGHT if top1_weight is None else top1_weight
    log_weight = LOG_WEIGHT if log_weight is None else log_weight
    times = [t for _, _, t in records]
    geoms: dict[Config, Geometry] = {}
    for c, _, _ in records:
        if c not in geoms:
            geoms[c] = c.geometry()
    groups = _shape_groups(records)
    n_shapes, n_rec = max(1, len(groups)), max(1, len(records))
    fams = sorted({c.family for c, _, _ in records})
    fam_idx = {f: [i for i, r in enumerate(records) if r[0].family == f] for f in fams}
    shape_of: dict[int, int] = {}
    for g, (idx, _) in enumerate(groups):
        for i in idx:
            shape_of[i] = g
    fam_groups = {f: [groups[g] for g in sorted({shape_of[i] for i in fam_idx[f]})] for f in fams}

    def predict_into(preds: list[float], p: Params, idx: Iterable[int]) -> None:
        m = CostModel(p)
        for i in idx:
            c, s, _ = records[i]
            fp = family_params(p, c.family)
            preds[i] = m._estimate(geoms[c], fp, s).seconds

    def score(preds: Sequence[float], grp: Sequence[ShapeGroup], idx: Sequence[int]) -> float:
        return (_ranking_sum(grp, preds, times, top1_weight) / n_shapes
                + log_weight * _sq_log_sum(records, preds, idx) / n_rec)

    def best_of(cands: list[Params], idx: Sequence[int], grp: Sequence[ShapeGroup]) -> tuple[Params, list[float]]:
        # the first candidate of the lowest score, with its predictions (only ``idx`` change)
        best: tuple[float, Params, list[float]] | None = None
        for cand in cands:
            trial = list(preds)
            predict_into(trial, cand, idx)
            err = score(trial, grp, idx)
            if best is None or err < best[0] - 1e-12:
                best = (err, cand, trial)
        if best is None:
            raise ValueError("cost model fit: an empty grid")
        return best[1], best[2]

    everything = range(len(records))
    preds = [0.0] * len(records)
    predict_into(preds, params, everything)
    for _ in range(rounds):
        for attr, grid in GLOBAL_GRIDS:
            params, preds = best_of([replace(params, **{attr: v}) for v in grid],  # type: ignore[arg-type]
                                    everything, groups)
        for fam in fams:
            for attr, grid in FAMILY_GRIDS:
                params, preds = best_of([replace(params, families={**params.families, fam: replace(
                    params.families[fam], **{attr: float(v)})}) for v in grid], fam_idx[fam], fam_groups[fam])
    return params


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Rank correlation (ties broken by order) - how well predictions order measured times."""
    n = len(xs)
    if n < 2:
        return 1.0

    def ranks(v: Sequence[float]) -> list[int]:
        order = sorted(range(n), key=lambda i: v[i])
        r = [0] * n
        for rank, i in enumerate(order):
            r[i] = rank
        return r

    rx, ry = ranks(xs), ranks(ys)
    d2 = sum((a - b) ** 2 for a, b in zip(rx, ry))
    return 1 - 6 * d2 / (n * (n * n - 1))
