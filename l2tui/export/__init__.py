"""Export a session's kernels as a library.

* :func:`export_session` writes ``DIR/kernels/M_N_K.cu``, ``DIR/manifest.json``
  and the C dispatcher sources (and, with ``build=True``, ``DIR/lib/libl2hgemm.so``);
* :mod:`l2tui.export.runtime` loads such a folder from Python (``load(DIR).matmul``);
* ``python -m l2tui.export.bench DIR`` measures it on a GPU.
"""

from .core import ExportError, ExportResult, export_session
from .manifest import SCHEMA, ManifestError, load as load_manifest
from .select import select_kernels

__all__ = ["ExportError", "ExportResult", "ManifestError", "SCHEMA", "export_session", "load_manifest", "select_kernels"]
