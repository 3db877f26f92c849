"""A config found in the working directory is trusted with neither secrets nor files (issue 51);
config value errors name the file; doctor reports a broken config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.testkernels import source as kernel_source
from l2tui.cli import main as cli_main
from l2tui.config import load_config
from l2tui.errors import ConfigError


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A working directory (a cloned repository, say) and an empty user config dir."""
    work = tmp_path / "clone"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("L2TUI_CONFIG_DIR", str(tmp_path / "user"))
    return work


def test_a_working_directory_config_is_named_in_one_line(workdir):
    (workdir / "l2tui.toml").write_text("[loop]\nmax_steps = 3\n")
    said: list[str] = []
    cfg = load_config(None, notice=said.append)
    assert said == ["l2tui: using ./l2tui.toml from the working directory"] and cfg.from_workdir


@pytest.mark.parametrize("name", ["HOME", "AWS_SECRET_ACCESS_KEY", "GITHUB_PAT", "SSH_AUTH_SOCK"])
def test_a_working_directory_config_may_not_point_the_key_at_any_variable(workdir, name):
    (workdir / "l2tui.toml").write_text(f'[llm]\napi_key_env = "{name}"\nbase_url = "http://127.0.0.1:9/v1"\n')
    with pytest.raises(ConfigError, match=r"l2tui\.toml: \[llm\] api_key_env = .*may name only a variable like "
                                          r"\*_API_KEY or \*_TOKEN") as e:
        load_config(None, notice=lambda _l: None)
    assert name not in str(e.value)


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "MY_LAB_TOKEN"])
def test_key_like_names_pass_from_the_working_directory(workdir, name):
    (workdir / "l2tui.toml").write_text(f'[llm]\napi_key_env = "{name}"\n')
    assert load_config(None, notice=lambda _l: None).llm["api_key_env"] == name


def test_the_users_own_config_may_name_any_variable(workdir, tmp_path):
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "l2tui.toml").write_text('[llm]\napi_key_env = "VAULT_LLM"\n')
    cfg = load_config(None, notice=lambda _l: pytest.fail("the user's own config is not announced"))
    assert cfg.llm["api_key_env"] == "VAULT_LLM" and not cfg.from_workdir


def test_an_explicit_config_may_name_any_variable(workdir):
    (workdir / "mine.toml").write_text('[llm]\napi_key_env = "VAULT_LLM"\n')
    assert load_config(workdir / "mine.toml").llm["api_key_env"] == "VAULT_LLM"


@pytest.mark.parametrize("seed, needle", [
    ("/etc/passwd", "expected a .cu kernel file"),
    ("notes.cu", "no extern \"C\" l2_hgemm entry point"),
    ("evil.cu", "source policy (host-io)"),
    ("missing.cu", "cannot read it"),
])
def test_a_seed_must_be_an_abi_kernel_the_policy_admits(workdir, seed, needle):
    (workdir / "notes.cu").write_text("my private notes\n")
    good = kernel_source("testgood_simple")
    (workdir / "evil.cu").write_text(good.replace("{\n", '{\n  (void)getenv("HOME");\n', 1))
    (workdir / "l2tui.toml").write_text(f'[loop]\nseed = "{seed}"\n')
    with pytest.raises(ConfigError) as e:
        load_config(None, notice=lambda _l: None)
    assert str(workdir / "l2tui.toml") in str(e.value) and needle in str(e.value)
    assert "private notes" not in str(e.value)


def test_an_honest_seed_kernel_and_a_family_name_pass(workdir):
    (workdir / "k.cu").write_text(kernel_source("testgood_simple"))
    (workdir / "l2tui.toml").write_text('[loop]\nseed = "k.cu"\n')
    assert load_config(None, notice=lambda _l: None).loop["seed"] == "k.cu"
    (workdir / "l2tui.toml").write_text('[loop]\nseed = "sm90_ksplit"\n')
    assert load_config(None, notice=lambda _l: None).loop["seed"] == "sm90_ksplit"


def test_a_bad_theme_names_the_config_file(workdir):
    (workdir / "l2tui.toml").write_text('[ui]\ntheme = "no-such-theme"\n')
    with pytest.raises(ConfigError, match=r"l2tui\.toml: \[ui\] theme = 'no-such-theme': not a Textual theme"):
        load_config(None, notice=lambda _l: None)


def test_doctor_reports_a_broken_working_directory_config(workdir, capsys):
    (workdir / "l2tui.toml").write_text("[loop]\nmax_stepz = 3\n")
    assert cli_main(["doctor", "--json"]) == 1
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert not checks["l2tui.toml"]["ok"] and "unknown key [loop] max_stepz" in checks["l2tui.toml"]["detail"]


@pytest.mark.parametrize("seed, needle", [
    ("notes.txt", "--seed: expected a .cu kernel file"),
    ("notes.cu", "--seed notes.cu: no extern \"C\" l2_hgemm entry point"),
    ("evil.cu", "--seed evil.cu line 9: source policy (host-io)"),
])
def test_the_command_lines_seed_is_checked_like_a_configs(workdir, scripted_server, capsys, seed, needle):
    """``l2tui run --seed FILE`` is held to the config seed's check, before a session or an LLM call."""
    (workdir / "notes.cu").write_text("my private notes\n")
    (workdir / "notes.txt").write_text("my private notes\n")
    good = kernel_source("testgood_simple")
    (workdir / "evil.cu").write_text(good.replace("{\n", '{\n  (void)getenv("HOME");\n', 1))
    recording = Path(__file__).resolve().parent.parent / "sessions" / "demo-h200" / "evaluations.json"
    rc = cli_main(["run", "--headless", "--policy", "llm", "--recorded", str(recording), "--shapes", "128x128x128",
                   "--base-url", scripted_server.base_url, "--seed", seed, "--session", str(workdir / "s")])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and needle in err[0], err
    assert "private notes" not in err[0] and "Traceback" not in err[0]
    assert not (workdir / "s").exists() and scripted_server.requests == []
