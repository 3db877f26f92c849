"""Helpers for tests of the ``l2tui`` command line's error contract."""

from __future__ import annotations


def one_line_error(capsys) -> str:
    """The command's stderr, asserted to be the one clear line every bad input gets."""
    err = capsys.readouterr().err.strip()
    assert err.startswith("l2tui: error: "), err
    assert "\n" not in err and "Traceback" not in err, err
    return err
