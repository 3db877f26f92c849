"""``bench --abi``: the candidate sets of a bench run, each with the adapter of its calling
convention (:mod:`harness.foreign`).

Why a module of its own: the bench reads, builds and labels candidates in one place for our ABI;
the sets of another ABI need a translation before the build, their adapter's nvcc flags, and the
B layout their kernels read passed to the worker (``b_layout`` of a candidate). Keeping that here
leaves ``harness/bench.py`` with one call per step.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

from .errors import HarnessError, KernelSourceError
from .foreign import ForeignAbi, abis_for
from .gemm_shape import Shape


class ForeignSets:
    """The adapters of the ``--kernels`` sets, by label, and the B layout of each built file."""

    def __init__(self, pairs: list[tuple[str, str]], abi_names: list[str] | str | None, acc: str) -> None:
        abis = abis_for(abi_names, len(pairs))
        self.by_label: dict[str, ForeignAbi] = {label: abi for (label, _), abi in zip(pairs, abis)}
        self.active = any(abi.name != "l2" for abi in abis)
        for label, abi in self.by_label.items():
            if abi.acc and abi.acc != acc:
                raise HarnessError(f"--abi {abi.name} kernels ({label}) accumulate in {abi.acc}: run with --acc {abi.acc}")
        self.layouts: dict[tuple[Shape, str], str] = {}
        self.refused: dict[tuple[Shape, str], str] = {}

    def read_sources(self, wanted: list[tuple[Shape, str, Path]], dtype: str,
                     read_ours: Callable[[list[Path], str], list[str]]) -> list[str]:
        """Each wanted file as a source of our ABI (``read_ours`` reads our own: the bench's
        reader). A foreign file its adapter cannot read gets an empty source and its one-line
        reason in ``refused``: the bench charges it as that shape's compile error and goes on."""
        if not self.active:
            return read_ours([path for _, _, path in wanted], dtype)
        if dtype != "fp16" and any(self.by_label[label].name != "l2" for _, label, _ in wanted):
            raise HarnessError(f"--abi adapters take fp16 kernels: this run is {dtype}")
        out = []
        for shape, label, path in wanted:
            abi = self.by_label[label]
            if abi.name == "l2":
                out.extend(read_ours([path], dtype))
                continue
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError) as e:
                raise KernelSourceError(f"cannot read kernel file {str(path)!r}: {e}") from None
            try:
                done = abi.translate(text, shape, path.name)
            except KernelSourceError as e:   # charged to this file alone, as a compile error
                self.refused[(shape, label)] = str(e)
                out.append("")
                continue
            self.layouts[(shape, label)] = done.b_layout
            out.append(done.source)
        return out

    def build_sets(self, wanted: list[tuple[Shape, str, Path]], sources: list[str],
                   arch: str) -> tuple[dict[Shape, list[dict[str, Any]]], dict[tuple[Shape, str], str]]:
        """Build each set with its adapter's flags; the candidates as the worker takes them, with
        ``b_layout`` for those that read the column-major copy of B."""
        from . import build as buildmod
        from .evaluate import is_nondeterministic, uses_pdl

        so_for: dict[Shape, list[dict[str, Any]]] = {}
        build_fail: dict[tuple[Shape, str], str] = dict(self.refused)
        for abi in dict.fromkeys(self.by_label.values()):
            idx = [i for i, (shape, label, _) in enumerate(wanted)
                   if self.by_label[label] is abi and (shape, label) not in self.refused]
            if not idx:
                continue
            print(f"bench: building {len(idx)} {abi.name} source(s)", file=sys.stderr)
            results = buildmod.build_many([sources[i] for i in idx], arch=arch, flags=list(abi.flags))
            for i, br in zip(idx, results):
                shape, label, _ = wanted[i]
                if br is None or not br.ok:
                    build_fail[(shape, label)] = str(br.errors[0]) if br is not None and br.errors else "compile error"
                    continue
                cand = {"label": label, "so_path": str(br.so_path), "nondeterministic": is_nondeterministic(sources[i]),
                        "pdl": uses_pdl(sources[i])}
                if self.layouts.get((shape, label), "row") == "col":
                    cand["b_layout"] = "col"
                so_for.setdefault(shape, []).append(cand)
        return so_for, build_fail

    def meta(self) -> dict[str, Any]:
        """What a result file records of the sets' conventions (only when one is foreign)."""
        if not self.active:
            return {}
        return {"abis": {label: abi.name for label, abi in self.by_label.items()},
                "b_layouts": {f"{s}:{label}": lay for (s, label), lay in sorted(self.layouts.items(),
                                                                                 key=lambda kv: (str(kv[0][0]), kv[0][1]))}}
