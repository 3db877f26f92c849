"""Exports from hostile sessions, and error lines that never echo secrets or file contents.

A session folder is data someone may hand you: whatever its ``session.toml`` says must
not reach a shell when the export's ``build.sh`` runs.  The shell and the command line
here are real (``sh``, ``l2tui.cli.main``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from harness.errors import HarnessError
from l2tui.cli import main as cli_main
from l2tui.export import export_session
from l2tui.export.cdispatch import BUILD_SCRIPT, render_build_script
from l2tui.export.values import ExportValueError, check_arch
from tests.cli_support import one_line_error
from tests.fixtures.export import make_session as fx



def set_session_arch(session: Path, arch_toml: str) -> None:
    toml = (session / "session.toml").read_text()
    toml, n = re.subn(r'(?m)^arch = .*$', lambda _m: f"arch = {arch_toml}", toml)
    assert n == 1
    (session / "session.toml").write_text(toml)


@pytest.mark.parametrize("arch", [
    '"sm_90a$(touch {X})"', '"sm_90a`touch {X}`"', '"sm_90a; touch {X}"', "\"sm_90a' ; touch {X} ; '\"",
    '"sm_90a\\ntouch {X}"', '"-arch=sm_90a -Xcompiler=-fplugin={X}"', '"sm_99z"', "90",
])
def test_a_hostile_session_arch_is_refused_in_one_line_and_runs_nothing(tmp_path, arch, capsys):
    session = fx.make_session(tmp_path / "s")
    marker = tmp_path / "X"
    set_session_arch(session, arch.replace("{X}", str(marker)))
    out = tmp_path / "exp"
    assert cli_main(["export", str(session), "--out", str(out)]) == 2
    err = one_line_error(capsys)
    assert "not a known CUDA architecture name" in err and "touch" not in err
    assert not out.exists() and not marker.exists()


def test_a_hostile_arch_on_the_command_line_is_refused(tmp_path, capsys):
    session = fx.make_session(tmp_path / "s")
    assert cli_main(["export", str(session), "--out", str(tmp_path / "exp"), "--arch", "sm_90a$(id)"]) == 2
    assert "--arch is not a known CUDA architecture name" in one_line_error(capsys)


def test_build_script_quotes_what_it_carries(tmp_path):
    """The generated script is valid sh whose ARCH default is one quoted word; a flag list that is
    not nvcc's -gencode form is refused before it is written."""
    session = fx.make_session(tmp_path / "s")
    res = export_session(session, tmp_path / "exp")
    script = (tmp_path / "exp" / BUILD_SCRIPT).read_text()
    assert re.search(r"^ARCH_DEFAULT='?-gencode=arch=compute_90a,code=sm_90a'?$", script, re.M)
    assert subprocess.run(["sh", "-n", str(tmp_path / "exp" / BUILD_SCRIPT)], capture_output=True).returncode == 0
    marker = tmp_path / "Y"
    with pytest.raises(HarnessError):
        render_build_script(res.manifest, [f"-gencode=arch=compute_90a,code=sm_90a$(touch {marker})"])
    kernel = next(e for e in res.manifest["kernels"] if not e.get("fallback"))
    bad = dict(res.manifest, kernels=[dict(kernel, name="1_1_1; touch Y")])
    with pytest.raises(HarnessError):
        render_build_script(bad, ["-gencode=arch=compute_90a,code=sm_90a"])
    assert not marker.exists()


def test_build_script_default_arch_is_never_expanded(tmp_path):
    """Run the script's own ARCH lines in a real shell: the default comes back verbatim."""
    session = fx.make_session(tmp_path / "s")
    export_session(session, tmp_path / "exp")
    lines = [ln for ln in (tmp_path / "exp" / BUILD_SCRIPT).read_text().splitlines() if ln.startswith("ARCH")]
    proc = subprocess.run(["sh", "-c", "\n".join(lines + ['printf "%s" "$ARCH"'])], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.stdout == "-gencode=arch=compute_90a,code=sm_90a"


@pytest.mark.parametrize("value,want", [("sm_90a", "sm_90a"), ("90a", "sm_90a"), ("compute_80", "sm_80"),
                                        ("SM_120A", "sm_120a"), ("sm_75", "sm_75")])
def test_known_arch_names(value, want):
    assert check_arch(value) == want


@pytest.mark.parametrize("value", ["sm_91", "sm_90a x", "sm_90a;", "", None, 90, "sm_" + "9" * 40, "sm_90a\nid"])
def test_unknown_arch_names(value):
    with pytest.raises(ExportValueError) as e:
        check_arch(value)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------ secrets and file contents never echoed

def test_a_key_in_api_key_env_is_not_echoed(tmp_path, monkeypatch, capsys):
    key = "sk-proj-CANARY0123456789abcdefABCDEF"
    cfg = tmp_path / "l2tui.toml"
    cfg.write_text(f'[llm]\napi_key_env = "{key}"\n')
    monkeypatch.chdir(tmp_path)
    assert cli_main(["run", "--headless", "--config", str(cfg), "--shapes", "64x64x64", "--policy", "search"]) == 2
    err = one_line_error(capsys)
    assert "api_key_env" in err and key not in err and "CANARY" not in err


@pytest.mark.parametrize("section,key,value", [
    ("llm", "base_url", '"ftp://user:sk-CANARY-secret@host/v1"'),
    ("llm", "model", "42"),
    ("harness", "baselines", '["sk-CANARY-not-a-baseline"]'),
    ("loop", "seed", "7"),
])
def test_bad_config_values_are_described_not_echoed(tmp_path, section, key, value, capsys):
    cfg = tmp_path / "l2tui.toml"
    cfg.write_text(f"[{section}]\n{key} = {value}\n")
    assert cli_main(["run", "--headless", "--config", str(cfg), "--shapes", "64x64x64", "--policy", "search"]) == 2
    err = one_line_error(capsys)
    assert f"[{section}] {key}" in err and "CANARY" not in err


def test_shapes_from_a_file_that_is_not_a_shapes_file_echo_nothing(tmp_path, capsys):
    shadow = tmp_path / "shadow"
    shadow.write_text("root:$6$CANARYsalt$CANARYhash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n")
    assert cli_main(["export", str(tmp_path), "--out", str(tmp_path / "o"), "--shapes", str(shadow)]) == 2
    err = one_line_error(capsys)
    assert "CANARY" not in err and "19000" not in err and ":1: not a shape" in err


@pytest.mark.skipif(not Path("/etc/shadow").is_file(), reason="no /etc/shadow here")
def test_shapes_etc_shadow(tmp_path, capsys):
    code = cli_main(["rl-data", str(tmp_path), "--format", "trl", "--out", str(tmp_path / "o.jsonl"),
                     "--shapes", "/etc/shadow"])
    assert code == 2
    err = one_line_error(capsys)
    try:
        first = Path("/etc/shadow").read_text().splitlines()[0]
    except (OSError, IndexError):
        first = ""
    assert not first or first not in err
    assert "root:" not in err


def test_shapes_binary_and_huge_files_give_one_line(tmp_path, capsys):
    blob = tmp_path / "blob"
    blob.write_bytes(b"\x00\xff\xfe" * 100)
    assert cli_main(["rl-data", str(tmp_path), "--format", "trl", "--out", str(tmp_path / "o"), "--shapes", str(blob)]) == 2
    assert "is not text" in one_line_error(capsys)
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(5 << 20)
    assert cli_main(["rl-data", str(tmp_path), "--format", "trl", "--out", str(tmp_path / "o"), "--shapes", str(big)]) == 2
    assert "not a list of shapes" in one_line_error(capsys)
