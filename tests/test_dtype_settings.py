"""``--dtype fp16|bf16`` (issue 55): the config key, the run/sweep/app command lines, the session's
record of it (an old session without it is fp16), bf16 with f16 accumulation refused in one line,
and rl-data rows that carry it."""

from __future__ import annotations

import json

import pytest

from l2tui.cli import main as cli_main
from l2tui.config import ConfigError, load_config, parse_config, session_dtype
from l2tui.rldata import rl_data
from l2tui.session import Session
from tests.fixtures.export import make_session as fx


def test_the_config_key_defaults_to_fp16_and_takes_bf16():
    assert parse_config({}).loop["dtype"] == "fp16"
    assert parse_config({"loop": {"dtype": "bf16"}}).loop["dtype"] == "bf16"
    with pytest.raises(ConfigError, match=r"\[loop\] dtype"):
        parse_config({"loop": {"dtype": "fp8"}})


def test_bf16_with_f16_accumulation_is_refused_in_one_line():
    with pytest.raises(ConfigError) as e:
        parse_config({"loop": {"dtype": "bf16", "acc": "f16"}})
    assert "\n" not in str(e.value) and "bf16 accumulates in f32 only" in str(e.value)
    with pytest.raises(ConfigError, match="command line: acc f16 with dtype bf16"):
        parse_config({"loop": {"acc": "f16"}}).with_overrides({"loop.dtype": "bf16"})


def test_a_session_records_its_dtype_and_an_old_one_reads_as_fp16(tmp_path):
    cfg = parse_config({"loop": {"dtype": "bf16"}})
    s = Session.create(tmp_path / "new", config=cfg.snapshot(), gpu={}, versions={})
    again = Session.open(s.path)
    assert session_dtype(again.config) == "bf16"
    assert parse_config({}).with_session_budgets(again.config).loop["dtype"] == "bf16"
    old = Session.create(tmp_path / "old", config={"loop": {"max_steps": 2}}, gpu={}, versions={})
    assert session_dtype(Session.open(old.path).config) == "fp16"
    assert parse_config({"loop": {"dtype": "bf16"}}).with_session_budgets(old.config).loop["dtype"] == "fp16"


@pytest.mark.parametrize("argv", [
    ["run", "--headless", "--shapes", "64x64x64", "--dtype", "bf16", "--acc", "f16"],
    ["sweep", "--shapes", "64x64x64", "--dtype", "bf16", "--acc", "f16"],
    ["--dtype", "bf16", "--shapes", "64x64x64", "--config", "{cfg}"],
])
def test_the_commands_refuse_bf16_with_f16_accumulation_in_one_line(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "f16.toml"
    cfg.write_text('[loop]\nacc = "f16"\n')
    argv = [a.replace("{cfg}", str(cfg)) for a in argv]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("l2tui: error:") and "bf16 accumulates in f32 only" in err[0], err
    assert not (tmp_path / "sessions").exists()


def test_the_parsers_take_dtype_and_refuse_others(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["run", "--dtype", "fp8"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--dtype" in err[0] and "fp8" in err[0]


def test_rl_data_rows_carry_the_sessions_dtype(tmp_path):
    old = fx.make_session(tmp_path / "old")            # recorded without a dtype: fp16
    rl_data([old], "trl", tmp_path / "a.jsonl")
    rows = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert rows and {r["dtype"] for r in rows} == {"fp16"}
    toml = old / "session.toml"
    text = toml.read_text()
    assert "[config.loop]" not in text
    toml.write_text(text + '\n[config.loop]\ndtype = "bf16"\n')
    rl_data([old], "trl", tmp_path / "b.jsonl")
    rows = [json.loads(x) for x in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert {r["dtype"] for r in rows} == {"bf16"}


def test_load_config_reads_dtype_from_a_file(tmp_path):
    f = tmp_path / "l2tui.toml"
    f.write_text('[loop]\ndtype = "bf16"\n')
    assert load_config(f).loop["dtype"] == "bf16"
