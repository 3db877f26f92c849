"""Shared pytest fixtures.

* ``scripted_server`` - a real OpenAI-compatible HTTP server on 127.0.0.1
  (tests/openai_server.py) with a scripted reply queue; usable by any test
  (the TUI tests too): ``scripted_server.add("reply")``, ``.base_url``.
* ``scenarios`` - the scripted agent scenarios (tests/fixtures/recorded/scenarios.py).
* ``agent_cache`` - a build cache shared by the agent tests of one pytest run (of one worker
  under pytest-xdist).

Under pytest-xdist (``tools/test.sh``: ``-n CORES --dist loadgroup``) each test file is a group
that runs on one worker, so a module-scoped fixture (a built kernel, a started server) is made
once; the files that start a local Ray cluster share one group, so two clusters never compete.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # so `from tests.openai_server import ScriptedServer` works under plain `pytest`
    sys.path.insert(0, str(ROOT))

from tests.openai_server import ScriptedServer  # noqa: E402

RECORDED_DIR = ROOT / "tests" / "fixtures" / "recorded"

# plain `pytest` builds into the checkout's own cache, as tools/test.sh does: test kernels never
# land in the user's ~/.cache/l2tui (an L2TUI_CACHE_DIR set by hand is kept)
os.environ.setdefault("L2TUI_CACHE_DIR", str(ROOT / ".test-cache"))

#: files whose tests must not run beside each other's (each starts a Ray cluster on this machine)
SHARED_GROUPS = {"test_executor_ray.py": "ray", "test_sweep_ray.py": "ray", "test_sweep_ray_head.py": "ray"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One xdist group per test file (see the module docstring); nothing without pytest-xdist."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        name = item.path.name
        item.add_marker(pytest.mark.xdist_group(SHARED_GROUPS.get(name, name)))


def load_scenarios():
    spec = importlib.util.spec_from_file_location("l2tui_test_scenarios", RECORDED_DIR / "scenarios.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def _starts_nvcc(args: Any) -> bool:
    """Whether a Popen argument list runs nvcc (directly or inside bwrap), other than ``--version``."""
    argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else [str(args)]
    return any(Path(a).name == "nvcc" for a in argv) and argv[-1] != "--version"


@pytest.fixture(autouse=True)
def _nvcc_needs_the_compile_marker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In the fast loop (``-m`` with ``not compile``), a test that starts nvcc in this process
    fails at once, naming the marker it lacks: the fast loop stays free of builds as tests are added.
    (Builds in child processes are not seen here; the full run is the check for those.)"""
    if "not compile" not in (request.config.option.markexpr or "") or request.node.get_closest_marker("compile"):
        yield
        return
    start = subprocess.Popen.__init__

    def refuse_nvcc(self: subprocess.Popen, args: Any, *rest: Any, **kw: Any) -> None:
        if _starts_nvcc(args):
            pytest.fail(f"{request.node.nodeid} runs nvcc: mark it @pytest.mark.compile", pytrace=False)
        start(self, args, *rest, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse_nvcc)
    yield


@pytest.fixture
def scripted_server():
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture(scope="session")
def scenarios():
    return load_scenarios()


@pytest.fixture(scope="session")
def agent_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("l2cache")


@pytest.fixture
def agent_cache(agent_cache_dir, monkeypatch):
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(agent_cache_dir))
    return agent_cache_dir


@pytest.fixture(autouse=True)
def private_known_kernels(tmp_path_factory, monkeypatch):
    """Every test gets an empty local layer of known kernels (harness.known), never the user's."""
    monkeypatch.setenv("L2TUI_KNOWN_DIR", str(tmp_path_factory.mktemp("known")))
