"""The engine worker: a separate OS process that owns the model (see process.py)."""
