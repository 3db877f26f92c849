"""``l2tui sweep``: the search policy over many shapes, headless and resumable.

    l2tui sweep --shapes grid --policy search --session sessions/grid-h200
    l2tui sweep --session sessions/grid-h200 --resume          # after any stop
    l2tui sweep --shapes sample100 --acc f16 --session sessions/f16 --steps 2
    l2tui sweep --shapes grid --prebuild-only --for-gpu "NVIDIA H100 80GB HBM3"   # compile what it will time (CPU)
    l2tui sweep --shapes sample100 --executor ray                # builds as Ray tasks, one actor per GPU

The catalog configurations the tracks' picks name are compiled once each, in parallel and in
the order the tracks need them, while the tracks whose builds are done already run (progress
line and ETA on stderr); each track (shape, accumulator) starts with the pick (the cost model's best
``--seeds`` configurations and the best of each kind it is least sure of, checked and timed
together with the baseline in one request) and is refined from the fastest for ``--steps`` steps.
``--executor ray`` runs the builds as CPU tasks on a Ray cluster and the tracks on one GPU actor
per GPU (docs/sweep.md).
Winners land in ``<session>/winners/M_N_K.cu``; time them against the baselines with
``l2tui bench --kernels <session>/winners``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from harness.stats import geomean
from harness.termtext import visible

from .. import events as ev_schema
from ..agent.rewards import RewardConfig

if TYPE_CHECKING:
    from harness.shapes import Shape

    from ..agent.policies.costmodel import Params
    from ..agent.sweep import Sweep, SweepConfig, TrackResult
    from ..executors.base import Executor, Slot
    from ..session import Session

NAME = "sweep"
HELP = "run the search policy over many shapes (headless, resumable, progress with ETA)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shapes", dest="sweep_shapes", action="append", metavar="SPEC",
                   help="grid, small, sample100, MxNxK, a list or a shapes file (default: grid)")
    p.add_argument("--policy", dest="sweep_policy", default=None, choices=("search",),
                   help="only the built-in search policy sweeps (use `l2tui run` for the LLM)")
    p.add_argument("--session", dest="sweep_session", metavar="DIR", help="session folder (default: a new one under sessions/)")
    p.add_argument("--resume", dest="sweep_resume", action="store_true", help="continue the sweep in --session")
    p.add_argument("--acc", nargs="+", choices=("f32", "f16"), default=None, help="accumulators (default: f32)")
    p.add_argument("--dtype", dest="sweep_dtype", choices=("fp16", "bf16"), default=None,
                   help="element type of A, B and C (default fp16; a resumed sweep keeps its own); bf16 accumulates in f32 only")
    p.add_argument("--baseline", default="cublaslt_autotune", help="speedup baseline (default: cublaslt_autotune)")
    p.add_argument("--libraries", metavar="LIST", default=None,
                   help="also time these libraries on every track (comma separated: cublas, cublaslt_heuristic, "
                        "cublaslt_autotune, torch, or all), so the session holds them for l2tui export's routes")
    p.add_argument("--steps", type=int, default=None, help="refinement steps per track after the seed (default 3)")
    p.add_argument("--width", type=int, default=None, help="proposals evaluated per step (default 3)")
    p.add_argument("--seeds", type=int, default=None,
                   help="the pick: the cost model's top N distinct catalog configurations timed per track, besides "
                        "the best of each kind it is least sure of (default 5)")
    p.add_argument("--no-pick-kinds", dest="pick_kinds", action="store_false",
                   help="the pick times the model's top --seeds only (not the best of each kind, nor their variants)")
    p.add_argument("--families", nargs="+", metavar="FAMILY", default=None,
                   help="only these seed families (e.g. tiny_mma sm80_mma: fast builds)")
    p.add_argument("--incumbents", nargs="+", metavar="WINNERS", default=None,
                   help="winners files (e.g. results/h200/winners-f32.json): each shape's configuration there is "
                        "timed in the pick beside the chosen ones, so a re-pick keeps it unless beaten")
    p.add_argument("--also", nargs="+", metavar="CONFIG", default=None,
                   help="catalog configurations (by name, e.g. sm90-64x64x64-c1x1-ws-p-st8-noc-nopdl) timed on every "
                        "track beside the pick where they run on its shape: a new catalog entry tried on a chosen "
                        "set of shapes; with --prebuild-only, build just these")
    p.add_argument("--tokens", dest="sweep_tokens", default=None, metavar="LIST",
                   help="token counts (M) when --shapes names a model, e.g. 16,128,2048 (default 16,128,2048)")
    p.add_argument("--tp", dest="sweep_tp", type=int, default=None, metavar="N",
                   help="tensor-parallel degree when --shapes names a model (the GEMMs of one rank)")
    p.add_argument("--no-known", dest="sweep_known", action="store_false",
                   help="do not time the known kernels in each pick, nor record the winners into the local layer")
    p.add_argument("--max-seconds", type=float, default=None, metavar="S",
                   help="start no catalog build and no track after S seconds from the start (the running ones "
                        "finish); --resume continues")
    p.add_argument("--cost-model", dest="cost_model", metavar="FILE", default=None,
                   help="rank the catalog with these cost-model constants (tools/calibrate_costmodel.py --out); "
                        "default: the committed H200 constants")
    p.add_argument("--seed", type=int, default=0, help="RNG seed of the search (default 0)")
    p.add_argument("--new-builds", type=int, default=None, metavar="N",
                   help="at most N proposals a step that the prebuilt catalog lacks (each a new nvcc build, 30-60 s "
                        "for a CUTLASS configuration); 0 = search the catalog only (default: no limit)")
    p.add_argument("--arch", default=None, help="GPU arch (default: the GPU's, else sm_90a)")
    p.add_argument("--jobs", type=int, default=None,
                   help="parallel nvcc builds (default: one per core; --executor ray: one per CPU of the cluster)")
    p.add_argument("--recorded", metavar="FILE", help="replay evaluations recorded on a GPU instead of using one")
    p.add_argument("--prebuild-only", action="store_true",
                   help="compile what this sweep's picks time on its shapes (with --also: just those) and stop; "
                        "no GPU needed")
    p.add_argument("--for-gpu", dest="for_gpu", metavar="NAME", default=None,
                   help="with --prebuild-only: the GPU the sweep will run on (as nvidia-smi names it, e.g. "
                        "'NVIDIA H100 80GB HBM3'), so its known kernels are built too (default: this machine's GPU)")
    p.add_argument("--no-sandbox", dest="sweep_no_sandbox", action="store_true",
                   help="build and load kernels without the OS sandbox even where it works; prints a warning")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where builds and evaluations run: this machine (default) or a Ray cluster")
    p.add_argument("--ray-address", metavar="HOST:PORT", default=None,
                   help="the Ray cluster to join (default: $RAY_ADDRESS, else a cluster of this machine)")
    p.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="--executor ray: GPU actors to start (default: every GPU of the cluster; with --recorded, "
                        "simulated GPUs replaying the recording)")


def _versions() -> dict:
    """What made the session: l2tui's version and the checkout's git revision (``$L2TUI_GIT_REV``
    wins, as in the bench's result files), so timings read back from it carry their provenance."""
    from harness.bench import _git_rev

    from .. import __version__

    return {"l2tui": __version__, "git_rev": _git_rev()}


def _file_sha256(path: str) -> str:
    """The content hash a session records beside a file it was run with (the file may change later)."""
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_incumbents(paths: list[str], arch: str) -> dict:
    """(shape, acc) -> configuration, from winners files; one line for a file that cannot be read.
    A configuration whose family does not run on ``arch`` is left out (the pick could not time it)."""
    from harness import winners as W
    from harness.families import applicable

    from ..errors import UserError

    out: dict = {}
    for path in paths:
        try:
            w = W.load(path)
        except W.WinnersError as e:
            raise UserError(f"--incumbents: {str(e).splitlines()[0]}") from None
        for shape, win in w.by_shape().items():
            if applicable(win.config.family, shape, arch):
                out[(shape, w.acc)] = win.config
    return out


def resolve_also(names: list[str], accs: tuple[str, ...], arch: str, dtype: str = "fp16") -> dict[str, tuple]:
    """acc -> the catalog configurations ``--also`` names for it; one line for a name no catalog of
    ``accs`` in element type ``dtype`` holds (with the closest names), or that does not run on ``arch``."""
    import difflib

    from harness.families import catalog

    from ..errors import UserError

    by_acc: dict[str, tuple] = {}
    everywhere = {c.name for acc in accs for c in catalog(acc, None, dtype)}
    for acc in accs:
        here = {c.name: c for c in catalog(acc, arch, dtype)}
        by_acc[acc] = tuple(here[n] for n in dict.fromkeys(names) if n in here)
    for n in names:
        if any(c.name == n for cs in by_acc.values() for c in cs):
            continue
        if n in everywhere:
            raise UserError(f"--also {n}: that configuration does not run on {arch}")
        close = difflib.get_close_matches(n, sorted(everywhere), n=3)
        raise UserError(f"--also {n}: no such {dtype} catalog configuration for {'/'.join(accs)}"
                        + (f" (closest: {', '.join(close)})" if close else ""))
    return by_acc


def run(args: argparse.Namespace) -> int:
    """The search policy's catalog is trusted: sandboxed where bwrap works, else without it."""
    from harness.sandbox import cli_choice

    with cli_choice("search", bool(getattr(args, "sweep_no_sandbox", False) or getattr(args, "no_sandbox", False))):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    from harness.shapes import resolve_shapes

    from ..agent.sweep import SweepConfig
    from ..errors import UserError

    policy = getattr(args, "sweep_policy", None) or getattr(args, "policy", None) or "search"
    if policy != "search":
        raise UserError(f"sweep runs the search policy only, not {policy!r}: use `l2tui run --policy {policy}`")
    session_dir = getattr(args, "sweep_session", None) or getattr(args, "session", None)
    resume = bool(getattr(args, "sweep_resume", False) or getattr(args, "resume", False))
    spec = getattr(args, "sweep_shapes", None) or getattr(args, "shapes", None)
    accs = tuple(args.acc or ("f32",))

    session = None
    saved: dict = {}
    if session_dir and resume:
        from ..compose import open_session

        session = open_session(session_dir, writer="sweep")
        saved = dict((session.config or {}).get("sweep", {}))
        session.record(ev_schema.SessionResumed(from_seq=session.events[-1]["seq"] if session.events else 0))
        spec = spec or saved.get("shapes")
        accs = tuple(args.acc or saved.get("accs") or accs)
    dtype = _dtype(args, saved, accs)
    from harness.models import parse_tokens

    tokens = getattr(args, "sweep_tokens", None) or saved.get("tokens")
    tp = getattr(args, "sweep_tp", None) or saved.get("tp")
    args.sweep_tokens, args.sweep_tp = tokens, tp
    shapes = resolve_shapes(spec, default="grid", tokens=parse_tokens(tokens) if tokens else None, tp=tp)
    arch = _arch(args, saved)
    _fill_budgets(args, saved)
    if args.families:
        from harness.families import get_family

        for f in args.families:
            get_family(f)   # one line for an unknown family, before anything starts
    new_builds = args.new_builds if args.new_builds is not None else saved.get("new_builds")
    _check_limits(args, new_builds)
    cost_params = _cost_params(args, saved, resume)
    args.sweep_libraries = _libraries(args, saved, resume)
    incumbent_files = [str(f) for f in (args.incumbents or saved.get("incumbents") or [])]
    args.incumbent_files = incumbent_files
    args.also_names = [str(n) for n in (getattr(args, "also", None) or saved.get("also") or [])]
    cfg = SweepConfig(shapes=shapes, accs=accs, dtype=dtype, baseline=args.baseline, libraries=args.sweep_libraries,
                      steps=args.steps, width=args.width,
                      seeds=args.seeds, seed=args.seed, arch=arch, jobs=args.jobs, new_builds=new_builds,
                      pick_kinds=getattr(args, "pick_kinds", True) and saved.get("pick_kinds", True) is not False,
                      families=args.families or saved.get("families") or None,
                      incumbents=load_incumbents(incumbent_files, arch) if incumbent_files else None,
                      max_seconds=args.max_seconds, cost_params=cost_params,
                      also=resolve_also(args.also_names, accs, arch, dtype) if args.also_names else None)
    args.rewards_section = _rewards_section(args, session)
    cfg.rewards = RewardConfig.from_section(args.rewards_section)
    def say(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {visible(line)}", flush=True)

    if args.prebuild_only:
        return _prebuild(args, cfg, arch, say)
    if args.for_gpu:
        raise UserError("--for-gpu goes with --prebuild-only: a sweep binds the GPU it runs on")
    if args.recorded:   # after every argument's own check, before the executor and a new session
        _require_recorded(args.recorded, shapes, accs)
    executor = _executor(args, arch)
    try:
        plan = SweepPlan(args, cfg, spec, accs, shapes, arch, new_builds, session_dir, say, started)
        return _sweep(plan, executor, session)
    finally:
        executor.close()


def _arch(args: argparse.Namespace, saved: dict) -> str:
    """The architecture to build for: ``--arch``, the resumed sweep's, this machine's GPU, else sm_90a."""
    arch = args.arch or saved.get("arch")
    if arch is None:
        try:
            from harness.gpuinfo import detect_arch

            arch = detect_arch()
        except Exception:  # noqa: BLE001 - no GPU tools: build for the project's target
            arch = None
    return str(arch or "sm_90a")


def _fill_budgets(args: argparse.Namespace, saved: dict) -> None:
    """``--steps``, ``--width``, ``--seeds`` not given: a resumed sweep keeps its own, else the defaults."""
    for budget in ("steps", "width", "seeds"):
        if getattr(args, budget) is None:
            v = saved.get(budget)
            setattr(args, budget, v if isinstance(v, int) and not isinstance(v, bool) and v >= 0
                    else {"seeds": 5}.get(budget, 3))


def _check_limits(args: argparse.Namespace, new_builds: int | None) -> None:
    """One line for a budget out of its range, before anything starts."""
    from ..config import MAX_STEPS, MAX_WALL_S
    from ..errors import UserError

    for budget in ("steps", "width", "seeds"):
        if getattr(args, budget) > MAX_STEPS:
            raise UserError(f"--{budget} must be at most {MAX_STEPS}, not {getattr(args, budget)}")
    if args.max_seconds is not None and not 0 <= args.max_seconds <= MAX_WALL_S:
        raise UserError(f"--max-seconds must be between 0 and {MAX_WALL_S:.0f} (30 days), not {args.max_seconds:g}")
    if new_builds is not None and new_builds < 0:
        raise UserError(f"--new-builds must be 0 or more, not {new_builds}")


def _cost_params(args: argparse.Namespace, saved: dict, resume: bool) -> Params | None:
    """The cost model's constants (``--cost-model``, or the resumed sweep's; None: the committed
    ones); a resume must use the constants it started with. Sets ``args.cost_file``."""
    from ..errors import UserError

    cost_file = getattr(args, "cost_model", None) or saved.get("cost_model")
    cost_params = None
    if cost_file:
        from ..agent.policies.costmodel import read_params

        try:
            cost_params = read_params(cost_file)
        except ValueError as e:
            raise UserError(f"--cost-model: {e}") from None
    args.cost_file = str(cost_file) if cost_file else None
    if resume and saved.get("cost_model_sha256") != (_file_sha256(cost_file) if cost_file else None):
        raise UserError("--cost-model: not the constants this sweep started with "
                        + (f"({saved.get('cost_model')}, sha256 {str(saved.get('cost_model_sha256'))[:12]})"
                           if saved.get("cost_model_sha256") else "(the committed ones)")
                        + "; resume with the same, or start a new session")
    return cost_params


def _libraries(args: argparse.Namespace, saved: dict, resume: bool) -> tuple[str, ...]:
    """The libraries timed beside the baseline (``--libraries``, or the resumed sweep's, which a
    resume cannot change); one line for an unknown baseline."""
    from harness.baselines import parse_baselines

    from ..errors import UserError

    if args.baseline not in parse_baselines("all"):
        raise UserError(f"--baseline {args.baseline!r} is not a library: choose from {', '.join(parse_baselines('all'))}")
    libs = parse_baselines(args.libraries) if args.libraries else list(saved.get("libraries") or [])
    if resume and args.libraries and sorted(libs) != sorted(saved.get("libraries") or []):
        raise UserError(f"--libraries: this sweep started with {','.join(saved.get('libraries') or []) or 'none'}; "
                        "resume with the same, or start a new session")
    return tuple(lab for lab in libs if lab != args.baseline)


def _dtype(args: argparse.Namespace, saved: dict, accs: Sequence[str]) -> str:
    """The sweep's element type: ``--dtype``, else a resumed sweep's own, else fp16 (a sweep recorded
    before bf16 has none); bf16 with f16 accumulation is refused in one line."""
    from ..errors import UserError

    dtype = args.sweep_dtype or saved.get("dtype") or "fp16"
    if dtype not in ("fp16", "bf16"):
        raise UserError(f"session.toml: [sweep] dtype is {str(dtype)[:20]!r}, not fp16 or bf16")
    if dtype == "bf16" and "f16" in accs:
        raise UserError("--acc f16 with --dtype bf16: bf16 accumulates in f32 only (use --acc f32, or --dtype fp16)")
    args.sweep_dtype = dtype
    return str(dtype)


def _require_recorded(path: str, shapes: list[Shape], accs: Sequence[str]) -> None:
    """A recording must hold every shape the sweep would run: one line, before a session, for one
    it lacks (a sweep on it would otherwise find nothing to time, track after track)."""
    from ..compose import recorded_evaluator, require_recorded_shapes

    records = recorded_evaluator(path, build=False).records
    for acc in accs:
        require_recorded_shapes(records, shapes, acc, path)


def _tracks(n: int) -> str:
    return f"{n} track{'' if n == 1 else 's'}"


def _prebuild_gpu(args: argparse.Namespace) -> dict:
    """The GPU whose known kernels a prebuild includes: ``--for-gpu``, else this machine's, else none."""
    if args.for_gpu:
        return {"name": str(args.for_gpu).strip()}
    try:
        from harness.gpuinfo import list_gpus

        gpus = list_gpus()
    except Exception:  # noqa: BLE001 - no driver here: a build machine
        return {}
    return {"name": gpus[0].name} if gpus else {}


def _prebuild(args: argparse.Namespace, cfg: "SweepConfig", arch: str, say: Callable[[str], None]) -> int:
    """``--prebuild-only``: build what the picks time on the shapes, the known kernels of the GPU
    named by ``--for-gpu`` included (on the Ray cluster's CPUs with ``--executor ray``), so a GPU
    session spends its time timing, not in nvcc."""
    from ..agent.sweep import Sweep
    from ..executors.progress import BuildProgress

    gpu = _prebuild_gpu(args)
    if gpu:
        _bind_known(args, cfg, gpu, say)
    builder = None
    if args.executor == "ray":   # the catalog as tasks of the cluster, no GPU actor
        from ..executors.ray_executor import RayExecutor

        builder = RayExecutor(address=args.ray_address, arch=arch, gpus=0)
    try:
        pre = Sweep(cfg, evaluator=None, progress=say, build_progress=BuildProgress, executor=builder)
        res = pre.prebuild()
    finally:
        if builder is not None:
            builder.close()
    bad = [n for n, r in res.items() if not r.ok]
    total = len(res) + pre.unbuilt_at_limit
    what = "the given configurations" if cfg.also else \
        f"what the picks time on {_tracks(len(cfg.shapes) * len(cfg.accs))}" + \
        (f", the known kernels for {gpu['name']} included" if cfg.known is not None else "")
    say(f"prebuild: {len(res) - len(bad)} of {total} kernels built for {arch} ({what})"
        + (f"; {pre.unbuilt_at_limit} not started before --max-seconds: run it again to continue"
           if pre.unbuilt_at_limit else ""))
    return 1 if bad else 0


def _rewards_section(args: argparse.Namespace, session: Session | None) -> dict[str, float]:
    """The ``[rewards]`` the sweep's rows are scored with, as a live session's are: a resumed
    session's own, else the config file's (``--config``, else the search path; the defaults
    without one). One line for a section that does not validate."""
    from ..config import load_config, parse_config

    saved = (session.config or {}).get("rewards") if session is not None else None
    if isinstance(saved, dict):
        where = f"{session.path}/session.toml" if session is not None else "session.toml"
        return dict(parse_config({"rewards": saved}, where).rewards)
    return dict(load_config(getattr(args, "config", None)).rewards)


def _times(runs: list[dict]) -> str:
    """The closing time line: this invocation, then every run of the session together."""
    if not runs:
        return ""
    r, cat = runs[-1], runs[-1].get("catalog") or {}
    line = (f"time: {r['wall_s']:.0f} s wall (catalog {cat.get('wall_s', 0):.0f} s: {cat.get('compiled', 0)} compiled, "
            f"{cat.get('cached', 0)} cached, nvcc {cat.get('nvcc_s', 0):.0f} s), {r['tracks']} tracks, "
            f"GPU {r['gpu_s']:.0f} s")
    if len(runs) > 1:
        nvcc = sum((x.get("catalog") or {}).get("nvcc_s", 0) + x.get("track_nvcc_s", 0) for x in runs)
        line += (f"; the session's {len(runs)} runs: {sum(x['wall_s'] for x in runs):.0f} s wall, "
                 f"GPU {sum(x['gpu_s'] for x in runs):.0f} s, nvcc {nvcc:.0f} s")
    return line


def _roles(spec: list[str] | None, args: argparse.Namespace) -> dict[str, str]:
    """What each shape is for, where the spec says (a model's GEMM roles): kept in the session."""
    from harness.models import parse_tokens
    from harness.shapes import shape_roles

    tokens = parse_tokens(args.sweep_tokens) if args.sweep_tokens else None
    return {str(s): r for s, r in shape_roles(spec or [], tokens=tokens, tp=args.sweep_tp).items()}


def _bind_known(args: argparse.Namespace, cfg: SweepConfig, gpu: dict, say: Callable[[str], None]) -> None:
    """The known kernels for the picks (``harness.known``), unless --no-known."""
    if not getattr(args, "sweep_known", True):
        return
    from harness.known import GpuKey, KnownStore

    cfg.known, cfg.known_gpu, cfg.known_info = KnownStore(), GpuKey.from_info(gpu), dict(gpu)
    cfg.known.entries()   # read the layers now: a refused file is said once, at the start
    for line in cfg.known.problems:
        say(f"known kernels: {line}")


@dataclass
class SweepPlan:
    """What one ``l2tui sweep`` invocation runs: its arguments, the sweep's settings, and the
    shapes, accumulators and architecture resolved from them (or from the resumed session)."""

    args: argparse.Namespace
    cfg: SweepConfig
    spec: list[str] | None
    accs: tuple[str, ...]
    shapes: list[Shape]
    arch: str
    new_builds: int | None
    session_dir: str | None
    say: Callable[[str], None]
    started: float   # time.monotonic() at the command's start


def _gpu_of(plan: SweepPlan, slots: Sequence[Slot]) -> dict:
    """The GPU(s) the sweep runs on, as the session records them; one line when there is none."""
    from ..errors import UserError

    args = plan.args
    gpu = dict(getattr(slots[0], "info", None) or {}) if args.executor == "ray" else {}
    if args.executor == "local":
        from ..executors.local import gpu_identity

        ev = getattr(slots[0], "evaluator", None)   # the local slot's own evaluator
        try:
            gpu = gpu_identity(ev)
        except Exception as e:  # noqa: BLE001
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UserError(f"no GPU to sweep on: {why} (pass --recorded FILE or run on a GPU box)") from None
        slots[0].uuid, slots[0].name = gpu.get("uuid") or "local", gpu.get("name") or "local GPU"
    gpu = {k: v for k, v in gpu.items() if k not in ("pid", "cache_dir", "node_id")}
    if len(slots) > 1:
        gpu["count"] = len(slots)
        gpu["uuids"] = [sl.uuid for sl in slots]
    gpu["executor"] = args.executor
    return gpu


def _saved_settings(plan: SweepPlan) -> dict:
    """The ``[sweep]`` section a new session keeps, so that ``--resume`` runs the same sweep."""
    args, cfg, spec = plan.args, plan.cfg, plan.spec
    roles = _roles(spec, args)
    return {"shapes": spec or ["grid"], "accs": list(plan.accs), "dtype": args.sweep_dtype, "arch": plan.arch, "baseline": args.baseline,
            "libraries": list(args.sweep_libraries), "steps": args.steps, "width": args.width,
            "seeds": args.seeds, "seed": args.seed, "new_builds": plan.new_builds, "pick_kinds": cfg.pick_kinds,
            "families": list(cfg.families or []), "incumbents": args.incumbent_files,
            **({"tokens": args.sweep_tokens} if args.sweep_tokens else {}),
            **({"tp": args.sweep_tp} if args.sweep_tp else {}),
            **({"roles": roles} if roles else {}),
            **({"also": args.also_names} if args.also_names else {}),
            **({"cost_model": args.cost_file, "cost_model_sha256": _file_sha256(args.cost_file)}
               if args.cost_file else {})}


def _sweep(plan: SweepPlan, executor: Executor, session: Session | None) -> int:
    slots = executor.slots()
    gpu = _gpu_of(plan, slots)
    _bind_known(plan.args, plan.cfg, gpu, plan.say)
    if session is None:
        from ..compose import create_session
        from ..paths import sessions_root

        path = (Path(plan.session_dir) if plan.session_dir
                else sessions_root() / time.strftime("sweep-%Y%m%d-%H%M%S"))
        session = create_session(path, writer="sweep",
                                 config={"sweep": _saved_settings(plan), "policy": "search",
                                         "rewards": dict(plan.args.rewards_section)},
                                 gpu=gpu, versions=_versions())
    try:
        return _sweep_in(plan, executor, session, gpu, slots)
    finally:
        session.close()   # the writer lock goes now, not when the session is garbage-collected


def _sweep_in(plan: SweepPlan, executor: Executor, session: Session, gpu: dict, slots: Sequence[Slot]) -> int:
    """The sweep itself, in an open session (``_sweep`` closes it)."""
    from ..agent.sweep import Sweep
    from ..executors.progress import BuildProgress

    args, say = plan.args, plan.say
    on = f"{len(slots)} x {gpu.get('name', plan.arch)} (Ray)" if args.executor == "ray" else gpu.get("name", plan.arch)
    say(f"session {session.path}: {len(plan.shapes)} shapes x {len(plan.accs)} accumulators on {on}")
    # the build bar shares the terminal with the tracks' lines: a line every 30 s, not one redrawn
    sweep = Sweep(plan.cfg, session=session, out_dir=Path(session.path), progress=say, gpu_name=gpu.get("name"),
                  executor=executor, build_progress=lambda what: BuildProgress(what, redraw=False))
    results = sweep.run()
    if sweep.left_at_limit:
        session.record(ev_schema.SessionEnded(reason="time limit"))
        say(_stopped_line(sweep, results, args.baseline, session))
        say(_times(sweep.record_run(plan.started, results, "time limit")))
        return 0
    session.record(ev_schema.SessionEnded(reason="sweep done"))
    if sweep.requeued:
        say(f"{len(sweep.requeued)} track(s) started again on another GPU after theirs was lost: "
            + ", ".join(f"{t} (lost {u})" for t, u in sweep.requeued))
    sps = _speedups(sweep, results)
    g, wins = geomean(sps), sum(1 for x in sps if x > 1)
    say(f"done: {len(sps)} tracks timed, geomean {g:.3f}x vs {args.baseline}, faster on {wins}" if g else "done")
    say(f"winners: {Path(session.path) / 'winners'}  (time them: l2tui bench --kernels {Path(session.path) / 'winners'})")
    say(_times(sweep.record_run(plan.started, results, "sweep done")))
    return 0


def _speedups(sweep: Sweep, results: Sequence[TrackResult]) -> list[float]:
    """Every finished track's speedup over the baseline (this run's and the resumed session's)."""
    if sweep.cache:
        return sweep.cache.speedups()
    return [r.speedup for r in results if r.speedup]


def _stopped_line(sweep: Sweep, results: Sequence[TrackResult], baseline: str, session: Session) -> str:
    """The line of a sweep stopped by ``--max-seconds``: what it timed, what is left, how to go on."""
    sps = _speedups(sweep, results)
    g = geomean(sps)
    unbuilt = f", {sweep.unbuilt_at_limit} builds not started" if sweep.unbuilt_at_limit else ""
    if g:
        return (f"stopped at --max-seconds: {len(sps)} tracks timed so far, geomean {g:.3f}x vs {baseline}; "
                f"{sweep.left_at_limit} left{unbuilt}: l2tui sweep --session {session.path} --resume")
    return (f"stopped at --max-seconds ({sweep.left_at_limit} track{'s' if sweep.left_at_limit != 1 else ''} "
            f"left{unbuilt}); continue: l2tui sweep --session {session.path} --resume")


def _executor(args: argparse.Namespace, arch: str) -> Executor:
    """The executor the arguments ask for; one-line errors before anything is created."""
    from .. import compose
    from ..errors import UserError

    if args.gpus is not None and args.gpus < 1:
        raise UserError(f"--gpus must be 1 or more, not {args.gpus}")
    if args.executor == "ray":
        from ..executors.ray_executor import RayExecutor

        if args.recorded:
            # the one-line error for a bad file (or one of another dtype), before Ray starts
            compose.recorded_evaluator(args.recorded, arch=arch, dtype=args.sweep_dtype)
        return RayExecutor(address=args.ray_address, arch=arch, baselines=(args.baseline, *args.sweep_libraries), gpus=args.gpus,
                           recorded=args.recorded, simulate=args.gpus or 1, dtype=args.sweep_dtype)
    if args.gpus not in (None, 1):
        raise UserError("--executor local times on one GPU; use --executor ray for several")
    from ..executors.local import LocalExecutor

    if args.recorded:
        return LocalExecutor(compose.recorded_evaluator(args.recorded, arch=arch, dtype=args.sweep_dtype), jobs=args.jobs)
    from harness.gpuinfo import require_gpu

    require_gpu()   # the one-line "no NVIDIA GPU found" before a worker is started for nothing
    return LocalExecutor(compose.gpu_evaluator(arch=arch, baselines=(args.baseline, *args.sweep_libraries), dtype=args.sweep_dtype),
                         jobs=args.jobs, gpu={})
