"""The README's first screen tells the truth about the app: its keys table lists every key of the
keymap, it states the smallest terminal the layout is made for, the caption under the screenshot
names the session the image shows, and the quick start stays two commands."""

from __future__ import annotations

import re
from pathlib import Path

from l2tui.tui.keymap import APP, MAIN

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

#: Textual's key names for the keys the table writes as the character itself
CHARACTERS = {"full_stop": ".", "left_square_bracket": "[", "right_square_bracket": "]",
              "question_mark": "?"}


def _section(title: str) -> str:
    start = README.index(f"### {title}\n")
    end = README.index("\n## ", start)
    return README[start:end]


def _table_keys(section: str) -> set[str]:
    """Every backticked token in the first column of the section's table rows."""
    keys: set[str] = set()
    for row in section.splitlines():
        if row.startswith("| `"):
            keys.update(re.findall(r"`([^`]+)`", row.split(" | ")[0]))
    return keys


def test_the_keys_table_lists_every_key_of_the_app():
    listed = _table_keys(_section("Keys"))
    missing = [f"{s.id} ({s.key})" for s in (*APP, *MAIN)
               if CHARACTERS.get(s.key.split(",")[0], s.key.split(",")[0]) not in listed]
    assert not missing, f"README.md's keys table lacks {missing}"


def test_the_readme_says_the_smallest_terminal_and_what_w_and_f_do():
    keys = _section("Keys")
    assert "80×24" in keys and "`w`" in keys
    follow = next(row for row in keys.splitlines() if row.startswith("| `F` |"))
    assert "best" in follow and "follow" in follow


def test_the_screenshot_caption_names_the_session_the_image_shows():
    image = re.search(r"!\[[^\]]*\]\((docs/screenshots/[^)]+\.svg)\)\n\n\*([^*]+)\*", README)
    assert image, "the first screenshot has no caption under it"
    svg, caption = image.group(1), " ".join(image.group(2).split())
    session = re.search(r"`(sessions/[^`]+)`", caption)
    assert session and (ROOT / session.group(1)).is_dir()
    assert Path(session.group(1)).name in (ROOT / svg).read_text()
    assert "H200" in caption and "all-K view" in caption


def test_the_quick_start_is_two_commands():
    quick = README[README.index("## Quick start"):]
    block = quick[quick.index("```bash\n") + 8:quick.index("```\n", quick.index("```bash\n") + 8)]
    commands = [ln.split("#")[0].strip() for ln in block.splitlines() if ln.split("#")[0].strip()]
    assert len(commands) == 2 and commands[1] == "l2tui"
