"""The source policy refuses every namespace-scope or static-member initialiser that runs code when
the library is loaded (issue 51), and still passes every kernel the project ships."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import source_policy as sp
from harness.build import build
from harness.families import catalog
from harness.paths import KERNELS_DIR
from harness.testkernels import source as kernel_source

GOOD = kernel_source("testgood_simple")
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("top", [
    "static int boot() { return 1; }\nstatic int t = (boot)();",
    "static int boot() { return 1; }\nint (*fp)() = boot;\nint t = (*fp)();",
    "static int boot() { return 1; }\nstatic int t{(boot)()};",
    "static int f() { return 1; }\nstruct C { static inline int v = f(); };",
    "static int f() { return 1; }\nclass C { public: static inline int v{f()}; };",
    "static int f() { return 1; }\nstruct O { struct I { static inline int v = f(); }; };",
    "static int f() { return 1; }\ntemplate <int N> struct C { static inline int v = f() + N; };\ntemplate struct C<0>;",
    "static int f() { return 1; }\ntemplate<int N> int tv = f();\ntemplate int tv<0>;",
    "static int f() { return 1; }\nstruct A { static int v; };\nint A::v = f();",
    "struct S { S() {} };\nstruct C { static inline S s; };",
    "static int f() { return 1; }\nstatic int arr[2] = {f(), 2};",
])
def test_load_time_initialisers_are_refused(top):
    found = sp.violations(top + "\n" + GOOD)
    assert any("(static-init)" in msg for _, _, msg in found), found


def test_the_refusal_is_a_build_error_with_its_line_before_nvcc_runs():
    res = build("static int boot() { return 1; }\nstatic int t = (boot)();\n" + GOOD, arch="sm_90a")
    assert not res.ok and res.so_path is None
    assert res.errors[0].line == 2 and "(static-init)" in res.errors[0].message


@pytest.mark.parametrize("top", [
    "struct C { static constexpr int v = 4; static const int w = 2; static int count; static int f(int x); };",
    "template <int N> struct Tile { static constexpr int value = N * 2; static int size() { return N; } };",
    "template <int N> constexpr int kTiles = N / 2;\ntemplate <typename T> inline constexpr bool kIsHalf = false;",
    "struct P { int m = 0; int n{4}; static inline int count = 0; static inline const char* name = nullptr; };",
    "static const int kWarps = (4);\nstatic const size_t kBytes = size_t(32) << 20;\nstatic float kScale = float(1.5);",
    "template <int N> __device__ int dtv = N;",
    "template struct std::pair<int, int>;",
])
def test_constant_initialisers_pass(top):
    assert sp.violations(top + "\n" + GOOD) == []


def test_every_shipped_kernel_and_catalog_render_passes():
    bad = {}
    for acc in ("f32", "f16"):
        for arch in ("sm_90a", "sm_80"):
            for c in catalog(acc, arch):
                v = sp.violations(c.source())
                if v:
                    bad[f"{arch}/{acc}/{c.name}"] = v[0]
    for f in sorted(KERNELS_DIR.glob("*.cu")):
        if f.name != "cublas_shim.cu":
            v = sp.violations(kernel_source(f.name))
            if v:
                bad[f.name] = v[0]
    assert bad == {}


@pytest.mark.parametrize("name", ["winners-f32.json", "winners-f16.json"])
def test_the_committed_winners_sources_pass(name):
    from harness import winners as W

    sources = W.render_sources(W.load(REPO / "results" / "h200" / name))
    assert sources and {k: sp.violations(v)[0] for k, v in sources.items() if sp.violations(v)} == {}
