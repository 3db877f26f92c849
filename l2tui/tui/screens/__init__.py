"""Screens of the l2tui app: the main (live) screen, its replay variant and modal dialogs."""
