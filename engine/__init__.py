"""SpecEE Chat engine: Qt-free models, downloads, hardware, worker process and benchmarks."""

__version__ = "0.1.0"
