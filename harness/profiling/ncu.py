"""Run Nsight Compute (``ncu``) on the one-launch driver and read its report back as CSV.

One ncu process profiles a list of items (one NVTX range each), writes a
``.ncu-rep`` report, and the report is imported twice (``--page raw`` and
``--page details``, both ``--csv --print-units base``): importing a saved report
gives clean CSV, free of the profiled program's own output.

Always ``--clock-control none``: ncu would otherwise lock the SM clock to base,
and the agent wants the kernel as it runs in production (and a shared GPU's
clocks are not ours to lock). Caches are flushed before each pass by default
(``--cache-control all``: every subject starts cold, comparable between runs);
``warm_caches`` keeps them (``--cache-control none``), as in the bench's per-call
timing, where A and B are still in L2 from the call before. Kernel replay (ncu's
default) re-runs each kernel once per counter pass with memory saved and restored,
so a call's kernels are measured one by one; a kernel of a few microseconds runs
25-40 % longer that way than in a program, so ncu says where its time goes, and
tools/probes/handover.py (CUPTI timestamps in a CUDA graph) how much there is.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Sequence, cast

from .. import channel
from .items import DriverResult, ItemResult, LaunchItem
from .errors import CountersRefused, NcuMissing, NoKernelProfiled, ProfileFailed, ProfileTimeout, classify_ncu_failure, NO_KERNEL_MARKER

SECTIONS: tuple[str, ...] = (
    "SpeedOfLight", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis", "Occupancy",
    "LaunchStats", "WarpStateStats", "SchedulerStats",
)
_CANDIDATES = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda-*/bin/ncu")
_REPO_ROOT = Path(__file__).resolve().parents[2]


def find_ncu() -> str:
    """Path of ncu: ``$L2TUI_NCU``, then PATH, then the usual install folders; NcuMissing if none."""
    env = os.environ.get("L2TUI_NCU")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise NcuMissing(f"L2TUI_NCU={env} is not an executable file")
    p = shutil.which("ncu")
    if p:
        return p
    for pat in _CANDIDATES:
        for c in sorted(glob.glob(pat), reverse=True):
            if os.access(c, os.X_OK):
                return c
    raise NcuMissing("not on PATH")


@functools.lru_cache(maxsize=8)
def ncu_version(ncu: str) -> str:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@functools.lru_cache(maxsize=8)
def available_sections(ncu: str) -> tuple[str, ...] | None:
    """Section identifiers this ncu knows (``--list-sections``), or None if it cannot tell."""
    try:
        out = subprocess.run([ncu, "--list-sections"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    ids = []
    for ln in out.splitlines():
        tok = ln.strip().split()
        if tok and tok[0][0].isalpha() and not tok[0].startswith(("Identifier", "--", "=")):
            ids.append(tok[0])
    return tuple(ids) or None


def choose_sections(ncu: str, wanted: Sequence[str] = SECTIONS) -> list[str]:
    have = available_sections(ncu)
    if not have:
        return list(wanted)
    chosen = [s for s in wanted if s in have]
    return chosen or list(wanted)


def profile_command(ncu: str, report: Path, spec_path: Path, result_path: Path, ranges: Sequence[str],
                    sections: Sequence[str], nvtx: str = "cupy", python: str | None = None,
                    warm_caches: bool = False) -> list[str]:
    """The ncu command line for one driver run (exposed for tests and ``--dry-run``)."""
    cmd = [ncu, "--clock-control", "none", "--cache-control", "none" if warm_caches else "all",
           "--target-processes", "all", "-f", "-o", str(report)]
    for s in sections:
        cmd += ["--section", s]
    if nvtx == "profiler":
        cmd += ["--profile-from-start", "off"]
    else:
        cmd += ["--nvtx"]
        for r in ranges:
            cmd += ["--nvtx-include", f"{r}/"]        # trailing '/': a push/pop range
    cmd += [python or sys.executable, "-m", "harness.profiling.launch",
            "--spec", str(spec_path), "--result", str(result_path)]
    return cmd


def import_command(ncu: str, report: Path, page: str) -> list[str]:
    return [ncu, "--import", str(report), "--csv", "--page", page, "--print-units", "base"]


@dataclass
class NcuRun:
    """What one ncu run produced: CSV text of both pages, the driver's per-item results, the log."""

    raw_csv: str
    details_csv: str
    items: list[ItemResult]
    log: str
    command: list[str]
    seconds: float
    ncu_version: str = ""
    nvtx: str = "cupy"
    #: ``report`` (the kept report's path) and ``warning`` (an ncu error line that still left a report)
    extra: dict[str, str] = field(default_factory=dict)


#: the most of a process's output kept (the profiled program prints what it likes; ncu's CSV of a
#: report is a few hundred kilobytes): past it the rest is read and dropped
MAX_OUTPUT_BYTES = 32 << 20
#: the most the one-launch driver's result file may be (a few hundred bytes per item)
MAX_RESULT_BYTES = 1 << 20
RESULT_SCHEMA = channel.Record(
    {"items": channel.ListOf(channel.Record(
        {"range": channel.Str(200), "status": channel.Str(16, choices=("ok", "unsupported", "error")),
         "rc": channel.Int(-(1 << 31), 1 << 31, null=True), "message": channel.Str(1000)}), 10_000)},
    optional={"nvtx": channel.Str(16)},
)


def _drain(stream: IO[bytes], keep: bytearray, cap: int) -> None:
    """Read ``stream`` to its end, keeping at most ``cap`` bytes of it."""
    while True:
        chunk = stream.read(1 << 16)
        if not chunk:
            return
        room = cap - len(keep)
        if room > 0:
            keep += chunk[:room]


def _run(cmd: list[str], timeout_s: float, env: dict[str, str], what: str,
         cap: int = MAX_OUTPUT_BYTES) -> tuple[int, str]:
    """Run in a new session so a timeout can stop ncu *and* the profiled driver (its process group);
    of its output, the first ``cap`` bytes (the profiled program's prints are not bounded)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    keep = bytearray()
    reader = threading.Thread(target=_drain, args=(proc.stdout, keep, cap), daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        reader.join(timeout=10)
        raise ProfileTimeout(what, timeout_s) from None
    reader.join(timeout=30)
    return proc.returncode, bytes(keep).decode("utf-8", errors="replace")


def _profile_env() -> dict[str, str]:
    """The environment of ncu and the profiled driver: this one without secret-looking variables
    (the driver loads the kernel, and profiling runs outside the sandbox)."""
    from ..sandbox import _SECRETISH

    return {k: v for k, v in os.environ.items() if not _SECRETISH.search(k)}


def read_result(path: Path, what: str) -> DriverResult:
    """The one-launch driver's result file as checked data (it ran the kernel, outside any sandbox
    when profiling is allowed): no file is no items; a malformed one is ProfileFailed in one line."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_RESULT_BYTES + 1)
    except OSError:
        return {"items": []}
    try:
        res = channel.validate(channel.loads(data, MAX_RESULT_BYTES), RESULT_SCHEMA)
    except channel.FrameError as e:
        raise ProfileFailed(f"the profiled process wrote a malformed result for {what}: "
                            f"{' '.join(str(e).split())[:200]}") from None
    assert isinstance(res, dict)
    return cast(DriverResult, res)  # RESULT_SCHEMA holds exactly DriverResult's keys and types


def run_ncu(items: Sequence[LaunchItem], *, timeout_s: float = 120.0, ncu: str | None = None,
            sections: Sequence[str] | None = None, nvtx: str = "cupy", workdir: str | Path | None = None,
            what: str = "the kernel", keep_report: bool = False, warm_caches: bool = False) -> NcuRun:
    """Profile ``items`` (driver spec items, see :mod:`.launch`) in one ncu process.

    Raises NcuMissing, CountersRefused, ProfileTimeout, ProfileFailed; returns
    the CSV even when some items captured nothing (the caller decides).
    """
    ncu = ncu or find_ncu()
    secs = list(sections) if sections else choose_sections(ncu)
    tmp = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="l2prof-"))
    tmp.mkdir(parents=True, exist_ok=True)
    spec_path, result_path, report = tmp / "spec.json", tmp / "result.json", tmp / "report"
    spec_path.write_text(json.dumps({"nvtx": nvtx, "items": list(items)}, indent=1))
    env = _profile_env()
    env["PYTHONPATH"] = str(_REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    cmd = profile_command(ncu, report, spec_path, result_path, [i["range"] for i in items], secs, nvtx,
                          warm_caches=warm_caches)
    t0 = time.monotonic()
    try:
        rc, log = _run(cmd, timeout_s, env, what)
        rep = Path(str(report) + ".ncu-rep")
        err = classify_ncu_failure(log, what)
        if isinstance(err, CountersRefused):
            raise err
        res = read_result(result_path, what)
        if not rep.is_file():
            # no report: say why, most precise first (the driver's own per-call status, then ncu's text)
            items_ = res.get("items", [])
            if NO_KERNEL_MARKER in log or (items_ and not any(i.get("status") == "ok" for i in items_)):
                raise NoKernelProfiled(what, _item_detail(res))
            if err is not None:
                raise err
            tail = next((ln for ln in reversed(log.splitlines()) if ln.strip()), f"exit status {rc}")
            raise ProfileFailed(f"ncu wrote no report for {what}: {tail.strip()[:200]}")
        # other ==ERROR== lines with a report: ncu still profiled the rest; keep it as a warning
        left = max(10.0, timeout_s - (time.monotonic() - t0))
        rc_raw, raw = _run(import_command(ncu, rep, "raw"), left, env, what + " (import)")
        rc_det, det = _run(import_command(ncu, rep, "details"), left, env, what + " (import)")
        if rc_raw != 0:
            raise ProfileFailed(f"ncu could not read its report for {what}: {raw.strip().splitlines()[-1:] or rc_raw}")
        extra: dict[str, str] = {"report": str(rep)} if keep_report else {}
        if err is not None:
            extra["warning"] = str(err)
        return NcuRun(raw, det if rc_det == 0 else "", res.get("items", []), log, cmd,
                      time.monotonic() - t0, ncu_version(ncu), nvtx, extra)
    finally:
        if not workdir and not keep_report:
            shutil.rmtree(tmp, ignore_errors=True)


def _item_detail(res: DriverResult) -> str:
    bad = [i for i in res.get("items", []) if i.get("status") != "ok"]
    if bad:
        return "; ".join(f"{i.get('status')}: {i.get('message')}" for i in bad[:2])
    return "the NVTX range was entered but no kernel launched in it" if res.get("items") else "the driver did not run"
