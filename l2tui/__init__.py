"""l2tui: steer an agent that writes, tests, times and profiles HGEMM kernels."""

__version__ = "0.1.0"
