"""l2tui.toml: defaults, search path, one-line errors naming file and key, example file."""

from pathlib import Path

import pytest

from l2tui.config import SCHEMA, example_toml, load_config, parse_config
from l2tui.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def write(p: Path, text: str) -> Path:
    p.write_text(text)
    return p


def test_defaults_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("L2TUI_CONFIG_DIR", str(tmp_path / "none"))
    cfg = load_config()
    assert cfg.source is None
    assert cfg.loop["debug_rounds"] == 3 and cfg.loop["profile_after"] == 6
    assert cfg.llm["api_key_env"] == "OPENAI_API_KEY"


def test_cwd_wins_over_user_dir(tmp_path, monkeypatch):
    user = tmp_path / "user"
    user.mkdir()
    write(user / "l2tui.toml", "[loop]\nmax_steps = 7\n")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("L2TUI_CONFIG_DIR", str(user))
    assert load_config().loop["max_steps"] == 7
    write(work / "l2tui.toml", "[loop]\nmax_steps = 3\n[keys]\npause = \"p\"\n")
    cfg = load_config()
    assert cfg.loop["max_steps"] == 3 and cfg.keys == {"pause": "p"}
    assert cfg.source == work / "l2tui.toml"


@pytest.mark.parametrize("text, needle", [
    ("[loop]\nmax_stepz = 3\n", "unknown key [loop] max_stepz"),
    ("[loop]\nmax_steps = \"many\"\n", "[loop] max_steps = 'many': expected an integer between 1 and 100000"),
    ("[loop]\ndebug_rounds = -1\n", "[loop] debug_rounds"),
    ("[llm]\nbase_url = \"ftp://x\"\n", "[llm] base_url"),
    ("[llm]\napi_key = \"sk-abc\"\n", "secrets are never read from config files"),
    ("[llm]\napi_key_env = \"sk-live-123 456\"\n", "NAME of an environment variable"),
    ("[harness]\nbaseline = \"mkl\"\n", "[harness] baseline"),
    ("[harness]\nbaselines = [\"cublas\"]\nbaseline = \"torch\"\n", "must be one of [harness] baselines"),
    ("[keys]\npause = 3\n", "[keys] pause: expected a key name string"),
    ("[colors]\nx = 1\n", "unknown section [colors]"),
    ("[loop\n", "not valid TOML"),
])
def test_bad_config_is_one_line_naming_file_and_key(tmp_path, text, needle):
    p = write(tmp_path / "l2tui.toml", text)
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    msg = str(ei.value)
    assert needle in msg
    assert str(p) in msg
    assert "\n" not in msg


def test_secret_value_never_echoed(tmp_path):
    p = write(tmp_path / "l2tui.toml", "[llm]\napi_key = \"sk-very-secret\"\n")
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert "sk-very-secret" not in str(ei.value)


def test_missing_explicit_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")


def test_overrides_are_validated():
    cfg = parse_config({})
    assert cfg.with_overrides({"loop.max_steps": 2}).loop["max_steps"] == 2
    with pytest.raises(ConfigError, match="command line"):
        cfg.with_overrides({"loop.max_steps": 0})


def test_example_file_documents_every_key_and_parses():
    text = (ROOT / "l2tui.example.toml").read_text()
    assert text == example_toml(), "regenerate l2tui.example.toml from l2tui.config.example_toml()"
    from l2tui.config import tomllib

    parse_config(tomllib.loads(text))
    for section, keys in SCHEMA.items():
        assert f"[{section}]" in text
        for key in keys:
            assert f"\n{key} = " in text


def test_snapshot_has_no_secret(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-appear")
    cfg = parse_config({})
    assert cfg.api_key() == "sk-should-not-appear"
    assert "sk-should-not-appear" not in repr(cfg.snapshot())


def test_url_credentials_are_not_snapshotted():
    cfg = parse_config({"llm": {"base_url": "https://bob:s3cret@llm.example.com/v1"}})
    assert cfg.snapshot()["llm"]["base_url"] == "https://llm.example.com/v1"
    assert cfg.llm["base_url"] == "https://bob:s3cret@llm.example.com/v1"  # still used for requests


@pytest.mark.parametrize("where", ["before", "after"])
def test_replay_reads_config_given_before_or_after_the_subcommand(tmp_path, where):
    """`l2tui --config F replay S` and `l2tui replay --config F S` both read F (a subcommand's own
    --config default once overwrote the global one, and a malformed file was silently ignored)."""
    import subprocess
    import sys
    from pathlib import Path

    bad = write(tmp_path / "bad.toml", "[loop\n")
    session = Path(__file__).resolve().parent / "fixtures" / "sessions" / "demo-h200-scripted"
    cmd = ["--config", str(bad), "replay", str(session)] if where == "before" else \
        ["replay", "--config", str(bad), str(session)]
    p = subprocess.run([sys.executable, "-m", "l2tui.cli", *cmd], capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr[-500:]
    assert lines[0].startswith(f"l2tui: error: {bad}: not valid TOML")
