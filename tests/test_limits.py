"""Limits on what sessions and configs may hold (issue 51): kernel ids in rl-data are sha256
strings, and budgets have upper bounds, each refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from l2tui.cli import main as cli_main
from l2tui.config import load_config
from l2tui.errors import ConfigError
from tests.cli_support import one_line_error
from tests.fixtures.export import make_session as fx


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    return fx.make_session(tmp_path_factory.mktemp("sess") / "run-1")


def _with_reward_field(recorded: Path, tmp_path: Path, key: str, value: str) -> Path:
    s = tmp_path / "copy"
    shutil.copytree(recorded, s)
    lines = (s / "rewards.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row[key] = value
    lines[0] = json.dumps(row)
    (s / "rewards.jsonl").write_text("\n".join(lines) + "\n")
    return s


@pytest.mark.parametrize("key", ["child_sha", "parent_sha"])
def test_rl_data_refuses_a_kernel_id_that_is_not_a_sha256(recorded, tmp_path, capsys, key):
    s = _with_reward_field(recorded, tmp_path, key, "../../../../root/x")
    out = tmp_path / "rows.jsonl"
    assert cli_main(["rl-data", str(s), "--format", "trl", "--out", str(out)]) != 0
    err = one_line_error(capsys)
    assert f"row 1: {key} is not a kernel id" in err and "../" not in err
    assert not out.exists()


def test_rl_data_keeps_well_formed_kernel_ids(recorded, tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    assert cli_main(["rl-data", str(recorded), "--format", "trl", "--out", str(out)]) == 0
    rows = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert rows and all(len(r["child_sha"]) == 64 for r in rows if r.get("child_sha"))


@pytest.mark.parametrize("text, key", [
    ("[loop]\nmax_steps = 100000000000000000000\n", "[loop] max_steps"),
    ("[loop]\nwall_time_s = 1e20\n", "[loop] wall_time_s"),
    ("[loop]\nglobal_token_budget = 100000000000000000000\n", "[loop] global_token_budget"),
    ("[llm]\nmax_tokens = 99999999999\n", "[llm] max_tokens"),
    ("[harness]\ntimeout_s = 1e12\n", "[harness] timeout_s"),
])
def test_budgets_beyond_their_bound_are_refused_naming_the_file(tmp_path, text, key):
    f = tmp_path / "l2tui.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert str(f) in str(e.value) and key in str(e.value) and "between" in str(e.value)


def test_a_command_line_budget_beyond_its_bound_is_one_line(capsys):
    cfg = load_config(None)
    with pytest.raises(ConfigError, match=r"command line: \[loop\] max_steps = .*between 1 and 100000"):
        cfg.with_overrides({"loop.max_steps": 10**20})


def test_sweep_refuses_steps_beyond_the_bound(tmp_path, capsys):
    assert cli_main(["sweep", "--shapes", "128x128x128", "--steps", str(10**9),
                     "--session", str(tmp_path / "s"), "--recorded", "tests/fixtures/recorded/evaluations.json"]) != 0
    assert "--steps must be at most" in one_line_error(capsys)
