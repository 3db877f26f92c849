"""The harness: everything that touches a compiler or a GPU.

Builds HGEMM kernels written to the l2tui ABI, checks them against an fp32
reference, times them against NVIDIA's libraries and profiles them with Nsight
Compute.  It never imports the UI (``l2tui.tui``) or the agent (``l2tui.agent``),
so it can be used alone: ``python -m harness ...`` or the Python API.
"""

__version__ = "0.1.0"
