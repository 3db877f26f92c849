"""One GEMM problem size, alone in its module: harness.models builds shapes from a model's
dimensions and harness.shapes resolves model names among its other shape specs, so both import
this without importing each other."""

from __future__ import annotations

from dataclasses import dataclass

MAX_DIM = 1 << 18   # vocabularies up to 256k (an LM head GEMM's N)


@dataclass(frozen=True, order=True)
class Shape:
    """One GEMM problem size."""

    m: int
    n: int
    k: int

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def min_bytes(self) -> int:
        """Bytes every kernel must move at least: read A and B once, write C once (fp16)."""
        return 2 * (self.m * self.k + self.k * self.n + self.m * self.n)

    @property
    def size_class(self) -> str:
        """small / mid / big by work, used for summary tables.

        small: under 2^30 flop (tens of microseconds at most on an H200, where
        launch and tail effects dominate); big: 2^37 flop or more; mid: between.
        """
        if self.flops < 1 << 30:
            return "small"
        if self.flops >= 1 << 37:
            return "big"
        return "mid"

    @property
    def file_stem(self) -> str:
        """Name used for kernel files in a kernels directory: ``M_N_K``."""
        return f"{self.m}_{self.n}_{self.k}"
