"""Whether two kernel sources build to the same machine code, without a GPU and without cuobjdump.

Why: a family template edit (a new knob whose default keeps the old code paths, a comment, an
assertion) gives every render a new sha256, and what was measured or recorded under the old
sha256 would be lost although the GPU would run the same instructions. The library build embeds a
line table (``-lineinfo``) and a module id that change with any edit of the text, so libraries
cannot be compared; this compiles each source with the build's own nvcc command to a cubin and
compares every section but the debug ones: instructions, resources, constants, globals, symbols
(internal symbols' names carry a hash of the text, masked). Used by ``tools/rehash_winners.py``
(winners files) and ``tools/alias_recording.py`` (GPU recordings).
"""

from __future__ import annotations

import re
import struct
import subprocess
import tempfile
from pathlib import Path

from . import build as B
from .errors import HarnessError, KernelSourceError


def device_sections(source: str, arch: str) -> dict[str, bytes]:
    """Every section of the cubin ``source`` builds but its debug sections, by name: the kernels'
    instructions (``.text.<kernel>``), their resources and launch facts (``.nv.info.*``), constant
    banks, globals and the symbol table. The build's own nvcc command, writing a cubin instead of a
    library: a library's line table and module id change with any edit of the text; these do not
    unless the code does.
    A source the candidate policy refuses (:mod:`harness.source_policy`) is refused here too,
    before nvcc reads it, as for every other compile of a source."""
    from .source_policy import violations

    B.check_abi(source)
    bad = violations(source)
    if bad:
        line, _, msg = bad[0]
        raise KernelSourceError(f"line {line}: {msg}")
    with tempfile.TemporaryDirectory(prefix="l2tui-sass-") as d:
        src, cubin = Path(d) / B.SOURCE_NAME, Path(d) / "kernel.cubin"
        src.write_text(source)
        cmd = B.nvcc_command(B.nvcc_path(), arch, [], src, cubin, source)
        cmd = [c for c in cmd[:cmd.index("-o")] if c not in ("-shared", "-Xptxas=-v")]
        r = subprocess.run([*cmd, "-cubin", "-o", str(cubin), str(src)], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise HarnessError(f"nvcc -cubin failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
        return {name: _unsalted(name, data) for name, data in elf_sections(cubin.read_bytes()).items()
                if not _debug(name)}


#: names of internal-linkage symbols carry a hash of the translation unit's text (any edit changes
#: it); the hash has a fixed length, so masking it moves no offset of the symbol table
_TU_SALT = re.compile(rb"(_INTERNAL_|_GLOBAL__N__)[0-9a-f]{8}_")


def _unsalted(section: str, data: bytes) -> bytes:
    return _TU_SALT.sub(rb"\1xxxxxxxx_", data) if section in (".strtab", ".shstrtab") else data


def _debug(section: str) -> bool:
    """Line tables and debug strings: they follow the text of the source, not its code."""
    return section.removeprefix(".rela").startswith((".debug_", ".nv_debug_"))


def elf_sections(elf: bytes) -> dict[str, bytes]:
    """Every named section of a 64-bit little-endian ELF file (a cubin), read from its header table."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise HarnessError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = heads[shstrndx][4]
    out = {}
    for name_off, kind, _flags, _addr, offset, size in heads:
        end = elf.index(b"\0", names_at + name_off)
        name = elf[names_at + name_off:end].decode()
        out[name] = b"" if kind == 8 else elf[offset:offset + size]  # SHT_NOBITS holds no bytes
    return out


def same_code(old: str, new: str, arch: str) -> tuple[bool, str]:
    """Whether two sources build to the same device code, byte for byte outside the debug
    sections; why not, in a few words."""
    a, b = device_sections(old, arch), device_sections(new, arch)
    kernels = [n for n in a if n.startswith(".text.")]
    if not kernels:
        return False, "no kernel code found"
    if a.keys() != b.keys():
        return False, "other sections (other kernels, globals or constants)"
    for name in a:
        if a[name] != b[name]:
            return False, f"{name[:60]} differs"
    return True, f"the same machine code ({len(kernels)} kernel{'s' if len(kernels) != 1 else ''})"
