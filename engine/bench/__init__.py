"""Benchmarks: decode/prefill speed per acceleration mode, measured side by side in one run."""
