"""Names for the cupy objects the worker's checks and timing pass around.

cupy ships no type information, so to the type checker every cupy object is untyped (``Any``).
These aliases do not change what mypy checks; they say which cupy object a parameter holds, so
that a reader (and a later stub) can tell a device array from a stream or a captured graph.
cupy itself is imported only inside the worker (harness.gpu).
"""

from __future__ import annotations

from typing import Any, TypeAlias

#: the ``cupy`` module itself (``cp``)
CupyModule: TypeAlias = Any
#: a ``cupy.ndarray`` in GPU memory
DeviceArray: TypeAlias = Any
#: a ``cupy.cuda.Stream``
CudaStream: TypeAlias = Any
#: a captured ``cupy.cuda.Graph``
CudaGraph: TypeAlias = Any
#: a ``cupy.cuda.Event`` (timing marks)
CudaEvent: TypeAlias = Any
#: a compiled ``cupy.RawKernel`` / ``cupy.ElementwiseKernel``
CudaKernel: TypeAlias = Any
#: an element type as cupy takes it (``cupy.float16``, ``cupy.uint16``, a numpy dtype)
CupyDtype: TypeAlias = Any
#: a ``cupy.random.RandomState``
DeviceRandom: TypeAlias = Any
