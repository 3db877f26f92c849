"""Search/replace patches: strict, whitespace-tolerant, nearest-lines feedback, rewrites."""

from l2tui.agent.patches import apply_patch, changed_lines, extract_rewrite, parse_blocks

SRC = """#include <cuda_fp16.h>
// l2: knobs begin
#define BM 64
#define BK 16
// l2: knobs end
__global__ void k() {
    int x = BM * BK;
    for (int i = 0; i < 4; ++i) { x += i; }
}
extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* s) { return 0; }
"""


def block(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def test_exact_block_applies_and_diff_is_unified():
    r = apply_patch(SRC, "Here:\n" + block("#define BK 16", "#define BK 32"))
    assert r.ok and r.error is None
    assert "#define BK 32" in r.source and "#define BK 16" not in r.source
    assert r.diff.startswith("--- a/kernel.cu\n+++ b/kernel.cu\n")
    assert "-#define BK 16" in r.diff and "+#define BK 32" in r.diff
    assert r.fuzzy == []


def test_several_blocks_all_or_nothing():
    reply = block("#define BM 64", "#define BM 128") + block("#define NOPE 1", "#define NOPE 2")
    r = apply_patch(SRC, reply)
    assert not r.ok and r.source == SRC
    assert "SEARCH block 2" in r.error


def test_whitespace_tolerant_fallback_reindents():
    reply = block("int x = BM * BK;\n  for (int i = 0;  i < 4; ++i) { x += i; }", "int x = BM;\nx *= 2;")
    r = apply_patch(SRC, reply)
    assert r.ok, r.error
    assert r.fuzzy == [1]
    assert "    int x = BM;\n    x *= 2;\n" in r.source


def test_no_match_reports_nearest_lines():
    r = apply_patch(SRC, block("#define BK 12", "#define BK 64"))
    assert not r.ok
    assert "does not match" in r.error and "nearest lines" in r.error
    assert "#define BK 16" in r.error  # the candidate line is shown, numbered
    assert "   4| #define BK 16" in r.error
    assert r.summary == r.error.splitlines()[0]


def test_ambiguous_match_is_refused():
    src = SRC + "#define BK 16\n"
    r = apply_patch(src, block("#define BK 16", "#define BK 32"))
    assert not r.ok and "matches 2 places" in r.error


def test_malformed_markers_and_no_code():
    r = apply_patch(SRC, "<<<<<<< SEARCH\n#define BK 16\n>>>>>>> REPLACE\n")
    assert not r.ok and "malformed" in r.error
    r = apply_patch(SRC, "I would make the tiles bigger.")
    assert not r.ok and "no SEARCH/REPLACE block" in r.error


def test_rewrite_only_when_allowed():
    new = SRC.replace("BK 16", "BK 64")
    reply = "Full file:\n```cuda\n" + new + "```\n"
    assert extract_rewrite(reply) == new
    r = apply_patch(SRC, reply, allow_rewrite=False)
    assert not r.ok and "rewrite is not allowed" in r.error
    r = apply_patch(SRC, reply, allow_rewrite=True)
    assert r.ok and r.rewrite and r.source == new


def test_noop_patch_is_refused():
    r = apply_patch(SRC, block("#define BK 16", "#define BK 16"))
    assert not r.ok and "changes nothing" in r.error


def test_parse_and_count():
    bl = parse_blocks(block("a\nb", "c") + "text\n" + block("d", ""))
    assert [(b.search, b.replace) for b in bl] == [("a\nb", "c"), ("d", "")]
    assert changed_lines("a\nb\nc\n", "a\nx\nc\n") == 2
