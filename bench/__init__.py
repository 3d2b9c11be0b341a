"""Benchmarks of aner, measured side by side in one run: `python -m bench --help`."""
