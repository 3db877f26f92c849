"""Sub-commands of the ``l2tui`` console script, one module each.

Every module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``.  Heavy imports happen inside ``run`` so ``l2tui --help``
and the app start fast.
"""

COMMAND_MODULES = (
    "bench",      # harness: time kernels and baselines
    "doctor",     # harness: what is installed
    "profile",    # harness: NCU metrics and verdict
    "run",        # agent: headless loop
    "sweep",      # agent: search policy over many shapes
    "build",      # agent: prebuild the seed catalog into a (portable) build cache
    "replay",     # tui: replay a session
    "export",     # export: kernels as a library
    "rl_data",    # rldata: training rows
    "known",      # harness.known: the known kernels for this GPU
)
