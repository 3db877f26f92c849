"""Sub-commands of the ``l2tui`` console script, one module each.

Every module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``.  Heavy imports happen inside ``run`` so ``l2tui --help``
and the app start fast.
"""

COMMAND_MODULES = (
    "bench",      # harness: time kernels and baselines (issue 2)
    "doctor",     # harness: what is installed (issue 2)
    "profile",    # harness: NCU metrics and verdict (issue 3)
    "run",        # agent: headless loop (issue 4)
    "sweep",      # agent: search policy over many shapes (issue 5)
    "build",      # agent: prebuild the seed catalog into a (portable) build cache
    "replay",     # tui: replay a session (issue 6)
    "export",     # export: kernels as a library (issue 7)
    "rl_data",    # rldata: training rows (issue 7)
)
