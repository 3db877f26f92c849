"""An OS sandbox (bubblewrap) around nvcc and around the GPU worker that loads candidates.

Why: a candidate is code written by a model (or pasted by a user). The source policy
(:mod:`harness.source_policy`) is a fast first layer, but it is a list of words; host code in a
candidate runs when the worker loads the library (constructors, static initialisers), and nvcc
reads whatever the source includes. Inside the sandbox that code sees:

* no network (its own, empty network namespace), its own pid namespace with a fresh ``/proc``
  (no view of the parent's processes, their command lines or environments), its own IPC and UTS;
* a read-only view of only what it needs: ``/usr`` and the library folders, a few loader files of
  ``/etc``, the Python installation and site-packages, the CUDA toolkit, the CUTLASS headers,
  the ``harness`` package (the worker), the build cache (the worker loads libraries from it);
  ``$HOME``, the user's config folders, sessions and the rest of the checkout are simply absent;
* a fresh ``/dev`` (plus the NVIDIA device nodes for the worker), a private tmpfs ``/tmp``;
* write access to one scratch folder only (the build's work folder, or the worker's scratch);
* an environment rebuilt from an allow-list (``PATH``, ``LD_LIBRARY_PATH``, CUDA/NVIDIA device
  selection, ``HOME`` = scratch): no API keys, no tokens, nothing else of the parent's;
* no capabilities (bwrap keeps root's by default), a new terminal session (no ``TIOCSTI``),
  and it dies with its parent.

We use bubblewrap (``bwrap``, Debian/Ubuntu package ``bubblewrap``) rather than our own namespace
code. ``L2TUI_BWRAP`` names the binary when it is not on PATH.

The setting (:func:`mode`): ``auto`` uses the sandbox when it works, ``require`` refuses to run
untrusted work without it, ``off`` never uses it. ``$L2TUI_SANDBOX`` sets the default; the
command line's ``--no-sandbox`` sets ``off`` for one run (:func:`cli_choice`).
"""

from __future__ import annotations

import functools
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence, cast

from .errors import HarnessError

MODES = ("auto", "require", "off")
INSTALL_HINT = "install bubblewrap (apt-get install bubblewrap) or set L2TUI_BWRAP to its path"

# Loader and identity files of /etc a compiler or a Python process reads; nothing else of /etc
# (no shadow, no ssh keys, no service configs) is visible inside.
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "passwd", "group",
              "nsswitch.conf", "host.conf")
# System folders: a symlink (merged /usr) is recreated as a symlink, a folder is bound read-only.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Environment variables passed through by name (values are the parent's).
_ENV_NAMES = ("PATH", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
              "CUDA_MODULE_LOADING", "CUDA_LAUNCH_BLOCKING", "CUDA_HOME", "CUDA_PATH", "NVIDIA_VISIBLE_DEVICES",
              "NVIDIA_DRIVER_CAPABILITIES", "CUPY_ACCELERATORS", "CUPY_TF32")
_ENV_PREFIXES = ("CUDA_", "NVIDIA_", "CUPY_")
_SECRETISH = re.compile(r"KEY|TOKEN|SECRET|PASS|CRED|AUTH|COOKIE|SESSION", re.I)


class SandboxUnavailable(HarnessError):
    """The sandbox is required (``require``, or the llm / human policy) but bwrap does not work here."""


@dataclass(frozen=True)
class Status:
    """What :func:`probe` found: the binary, whether a trial sandbox ran, and why not."""

    path: str | None
    works: bool
    detail: str   # version when it works, else the reason in one line


# --------------------------------------------------------------------------- setting

_MODE_OVERRIDE: str | None = None


def mode() -> str:
    """The current setting: :func:`set_mode`'s value, else ``$L2TUI_SANDBOX``, else ``auto``."""
    if _MODE_OVERRIDE is not None:
        return _MODE_OVERRIDE
    env = (os.environ.get("L2TUI_SANDBOX") or "auto").strip().lower()
    if env not in MODES:
        raise HarnessError(f"L2TUI_SANDBOX={env!r}: use one of {', '.join(MODES)}")
    return env


def set_mode(value: str | None) -> str | None:
    """Set the process-wide setting (None: back to ``$L2TUI_SANDBOX``); returns the previous override."""
    global _MODE_OVERRIDE
    if value is not None and value not in MODES:
        raise HarnessError(f"bad sandbox setting {value!r}: use one of {', '.join(MODES)}")
    prev, _MODE_OVERRIDE = _MODE_OVERRIDE, value
    return prev


def bwrap_path() -> str | None:
    """``$L2TUI_BWRAP`` when set (and executable), else ``bwrap`` on PATH."""
    env = os.environ.get("L2TUI_BWRAP")
    if env:
        return env if os.access(env, os.X_OK) and Path(env).is_file() else None
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=8)
def _probe(path: str | None) -> Status:
    if path is None:
        env = os.environ.get("L2TUI_BWRAP")
        why = f"L2TUI_BWRAP={env} is not an executable file" if env else "bwrap not found on PATH"
        return Status(None, False, why)
    try:
        ver = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return Status(path, False, f"{path} does not run ({type(e).__name__})")
    scratch = Path(_tmp_root()) / f"l2tui-probe-{os.getpid()}"
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        argv = _common(scratch, worker=False) + ["--", "true"]
        r = subprocess.run([path, *argv], capture_output=True, text=True, timeout=60, env=_clean_env(scratch))
    except (OSError, subprocess.TimeoutExpired) as e:
        return Status(path, False, f"{path} does not start a sandbox ({type(e).__name__})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if r.returncode != 0:
        first = (r.stderr or r.stdout or "").strip().splitlines()
        why = first[0][:200] if first else f"exit status {r.returncode}"
        return Status(path, False, f"{path} cannot create a sandbox here: {why}")
    return Status(path, True, ver or "bubblewrap")


def probe() -> Status:
    """Whether bwrap is there and really starts a sandbox (one cached trial run of ``true``)."""
    return _probe(bwrap_path())


def use_sandbox(trusted: bool = False) -> bool:
    """Whether the next build / worker should run sandboxed under the current setting.

    ``require`` with no working bwrap raises :class:`SandboxUnavailable` for untrusted work;
    trusted work (the project's own shims, the catalog) then runs without it.
    """
    m = mode()
    if m == "off":
        return False
    st = probe()
    if st.works:
        return True
    if m == "require" and not trusted:
        raise SandboxUnavailable(f"the sandbox is required but does not work: {st.detail}; {INSTALL_HINT}")
    return False


# --------------------------------------------------------------------------- the command line

UNSANDBOXED_WARNING = ("l2tui: WARNING: --no-sandbox: model-written kernels will be compiled and loaded with "
                       "this user's files, network and environment (API keys included) within reach")
UNTRUSTED_POLICIES = ("llm", "human")


class _Choice:
    """Context manager from :func:`cli_choice`: restores the previous setting on exit."""

    def __init__(self, prev: str | None) -> None:
        self.prev = prev

    def __enter__(self) -> "_Choice":
        return self

    def __exit__(self, *exc: object) -> None:
        set_mode(self.prev)

    def restore(self) -> None:
        set_mode(self.prev)


def cli_choice(policy: str, no_sandbox: bool, *, stream: Any = None) -> _Choice:
    """Apply the command line's sandbox choice for one run of ``policy``.

    ``--no-sandbox`` turns it off with one loud warning. The llm and human policies run code
    nobody reviewed, so without a working sandbox they are refused (one line: why, and what to
    do); with one, the setting becomes ``require`` so nothing silently falls back. The search
    policy over the trusted catalog keeps the setting (``auto``: sandboxed when it works).
    Returns a context manager / handle whose ``restore()`` puts the previous setting back.
    """
    out = stream if stream is not None else sys.stderr
    if no_sandbox or mode() == "off":
        print(UNSANDBOXED_WARNING, file=out, flush=True)
        return _Choice(set_mode("off"))
    if policy in UNTRUSTED_POLICIES:
        st = probe()
        if not st.works:
            raise SandboxUnavailable(f"the {policy} policy runs model-written kernels only inside the sandbox, "
                                     f"which does not work here ({st.detail}): {INSTALL_HINT}, "
                                     f"or pass --no-sandbox to run them unprotected")
        return _Choice(set_mode("require"))
    return _Choice(set_mode(_MODE_OVERRIDE))


# --------------------------------------------------------------------------- argv


def _tmp_root() -> str:
    import tempfile

    return tempfile.gettempdir()


def _home_dirs() -> list[Path]:
    """Folders that must not be visible (used to decide which binds need narrowing)."""
    out = []
    for h in (os.environ.get("HOME"), str(Path.home())):
        if h:
            out.append(Path(h).resolve())
    return out


def python_roots() -> list[Path]:
    """The interpreter's installation and site-packages folders (the worker imports from them).

    A pyenv / conda / venv interpreter under ``$HOME`` is bound back read-only by itself; the rest
    of ``$HOME`` stays absent.
    """
    cands: list[str] = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    try:
        import site

        cands += list(site.getsitepackages())
        user = site.getusersitepackages()
        if user and Path(user).is_dir() and "site-packages" in user:
            cands.append(user)
    except Exception:  # noqa: BLE001 - a stripped site module: the prefixes are enough
        pass
    cands.append(str(Path(sys.executable).parent))
    try:
        cands.append(str(Path(sys.executable).resolve().parent.parent))
    except OSError:
        pass
    return _dedupe(Path(c) for c in cands if c)


def harness_root() -> Path:
    """The folder holding the ``harness`` package (PYTHONPATH inside the worker's sandbox)."""
    return Path(__file__).resolve().parent.parent


def _dedupe(paths: Iterable[Path]) -> list[Path]:
    """Existing paths, resolved, without those inside another one of the list."""
    res: list[Path] = []
    for p in paths:
        try:
            for q in (p, p.resolve()):
                if q.exists() and q not in res:
                    res.append(q)
        except OSError:
            continue
    res.sort(key=lambda p: len(p.parts))
    out: list[Path] = []
    for p in res:
        if not any(p == o or o in p.parents for o in out):
            out.append(p)
    return out


def _bind_ro(p: Path) -> list[str]:
    return ["--ro-bind", str(p), str(p)]


def _system_args() -> list[str]:
    args: list[str] = []
    for d in _SYSTEM_DIRS:
        p = Path(d)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), d]
        elif p.is_dir():
            args += _bind_ro(p)
    for name in _ETC_FILES:
        p = Path("/etc") / name
        if p.exists():
            args += ["--ro-bind", str(p), str(p)]
    return args


def _common(scratch: Path, *, worker: bool, ro: Sequence[Path] = ()) -> list[str]:
    """Options every sandbox shares; ``ro`` are extra read-only folders."""
    args = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--hostname", "l2tui-sandbox"]
    args += _system_args()
    # fresh /proc, /dev and /tmp first: the binds below may lie under /tmp and must stay on top
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
    system = [Path(d) for d in _SYSTEM_DIRS if Path(d).is_dir() and not Path(d).is_symlink()]
    homes = _home_dirs()
    for p in _dedupe(ro):
        if any(p == q or q in p.parents for q in system):
            continue   # already visible
        if any(h == p or p in h.parents for h in homes):
            # a prefix that holds $HOME (python installed in $HOME itself): only its program folders
            args += [a for sub in ("bin", "lib", "lib64", "include") if (p / sub).is_dir()
                     and not any(h == p / sub or (p / sub) in h.parents for h in homes) for a in _bind_ro(p / sub)]
            continue
        args += _bind_ro(p)
    if worker:
        if Path("/sys").is_dir():
            args += ["--ro-bind", "/sys", "/sys"]   # CUDA and NVML read PCI topology there
        for node in nvidia_device_nodes():
            args += ["--dev-bind", str(node), str(node)]
    args += ["--bind", str(scratch), str(scratch), "--chdir", str(scratch)]
    args.append("--clearenv")
    for k, v in sandbox_env(scratch).items():
        args += ["--setenv", k, v]
    return args


def nvidia_device_nodes() -> list[Path]:
    """The NVIDIA device nodes present (``/dev/nvidia0``, ``nvidiactl``, ``nvidia-uvm``, ``nvidia-caps``...)."""
    dev = Path("/dev")
    try:
        return sorted(p for p in dev.iterdir() if p.name.startswith("nvidia"))
    except OSError:
        return []


def sandbox_env(scratch: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment inside: device selection and paths, never a secret."""
    env: dict[str, str] = {}
    for k, v in os.environ.items():
        if (k in _ENV_NAMES or k.startswith(_ENV_PREFIXES)) and not _SECRETISH.search(k):
            env[k] = v
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["HOME"] = str(scratch)
    env["TMPDIR"] = "/tmp"
    env["CUPY_CACHE_DIR"] = str(scratch / "cupy")
    env["XDG_CACHE_HOME"] = str(scratch / "cache")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    env.setdefault("LANG", "C.UTF-8")
    if extra:
        env.update(extra)
    return env


def _clean_env(scratch: Path) -> dict[str, str]:
    """The environment of the bwrap process itself (it clears it inside anyway)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(scratch)}


def build_argv(cmd: Sequence[str], work: Path, *, ro: Sequence[Path] = (), bwrap: str | None = None) -> list[str]:
    """argv running ``cmd`` (nvcc) sandboxed: ``work`` is the only writable folder; ``ro`` are the
    CUDA toolkit and the CUTLASS include folders (the compiler sees the system, those and the
    kernel, nothing else: no Python, no site-packages beyond CUTLASS). TMPDIR is inside ``work``
    (nvcc's intermediates of a CUTLASS kernel are large for a tmpfs)."""
    b = bwrap or bwrap_path()
    if b is None:
        raise SandboxUnavailable(f"bwrap not found: {INSTALL_HINT}")
    (work / "tmp").mkdir(exist_ok=True)
    args = _common(work, worker=False, ro=list(ro))
    args += ["--setenv", "TMPDIR", str(work / "tmp")]
    return [b, *args, "--", *cmd]


def worker_argv(cmd: Sequence[str], scratch: Path, *, ro: Sequence[Path] = (), env: dict[str, str] | None = None,
                bwrap: str | None = None, info_fd: int | None = None) -> list[str]:
    """argv running the GPU worker sandboxed: the NVIDIA device nodes, the Python installation, the
    ``harness`` package and ``ro`` (the build cache) read-only; ``scratch`` writable. With
    ``info_fd`` bwrap writes ``{"child-pid": N}`` there (the worker's pid as the parent sees it)."""
    b = bwrap or bwrap_path()
    if b is None:
        raise SandboxUnavailable(f"bwrap not found: {INSTALL_HINT}")
    pkg = harness_root() / "harness"
    roots = [*python_roots(), pkg, *ro]
    args = _common(scratch, worker=True, ro=roots)
    extra = {"PYTHONPATH": str(harness_root()), "PYTHONUNBUFFERED": "1"}
    extra.update(env or {})
    for k, v in extra.items():
        args += ["--setenv", k, v]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    return [b, *args, "--", *cmd]


# --------------------------------------------------------------------------- spawning

#: a spawn request: argv, Popen's keywords, the box that receives the process (or the error) and
#: the event set once it is there
_SpawnJob = tuple[list[str], dict[str, Any], list["subprocess.Popen[bytes] | BaseException"], threading.Event]
_SPAWN_Q: "queue.Queue[_SpawnJob]" = queue.Queue()
_SPAWNER: threading.Thread | None = None
_SPAWN_LOCK = threading.Lock()


def _spawner() -> None:
    while True:
        argv, kw, box, done = _SPAWN_Q.get()
        try:
            # the callers pass no text/encoding keyword: the pipes carry bytes
            box.append(cast("subprocess.Popen[bytes]", subprocess.Popen(argv, **kw)))
        except BaseException as e:  # noqa: BLE001 - handed back to the caller
            box.append(e)
        done.set()


def spawn(argv: Sequence[str], **popen_kw: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen[bytes]`` from one long-lived thread.

    Why: ``--die-with-parent`` is the kernel's parent-death signal, which fires when the *thread*
    that started bwrap ends. A worker started from a short-lived thread (an executor's, the app's
    loop thread) would be killed when that thread finishes; a thread that lives as long as the
    process ties the sandbox to the process instead (kill -9 of the process still kills it).
    """
    global _SPAWNER
    with _SPAWN_LOCK:
        if _SPAWNER is None or not _SPAWNER.is_alive():
            _SPAWNER = threading.Thread(target=_spawner, name="l2tui-sandbox-spawner", daemon=True)
            _SPAWNER.start()
    box: list[subprocess.Popen[bytes] | BaseException] = []
    done = threading.Event()
    _SPAWN_Q.put((list(argv), popen_kw, box, done))
    done.wait()
    res = box[0]
    if isinstance(res, BaseException):
        raise res
    return res


def describe() -> str:
    """One line for ``doctor`` and logs: the setting and what the probe found."""
    st = probe()
    m = mode()
    if st.works:
        return f"{st.detail} at {st.path} (setting: {m})"
    return f"{st.detail} (setting: {m})"
