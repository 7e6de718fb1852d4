"""Linux: its backend (`backend.py`, `bundler.platforms.backends`); no part or package format of its own yet.

This file imports nothing, like the other platforms' packages.
"""
