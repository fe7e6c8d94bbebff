"""A downloaded EAGLE-3 head -> a GGUF our engine loads: llama.cpp's own converter (convert_hf_to_gguf.py
in the pinned sources, run as a subprocess; nothing of it lives in this repository), then the result
is bound to its target model: the target's exact tokenizer fields (the converter wrote those of the
rebuilt HF tokenizer) and `specee.target_sha256`, as our own exported heads carry them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from functools import cache
from pathlib import Path

from engine.models.acceleration import TARGET_SHA_KEY
from engine.models.gguf_fields import STRING, GGUFField, GGUFFieldError, read_header, rewrite
from engine.paths import REPO_ROOT

SOURCE_KEY = "specee.source"  # JSON: where an imported head came from
# What the converter imports (conversion/base.py: transformers at the top, sentencepiece before it looks
# for a tokenizer.model, torch throughout): the optional `heads` extra.
CONVERTER_PACKAGES = ("torch", "transformers", "sentencepiece", "numpy")
# Matrices as Q8_0, like our own heads: half the bytes a draft step reads, no measurable loss in hit rate.
OUTTYPE = "q8_0"


class ConvertError(Exception):
    """kind: missing_packages | no_converter | convert_failed | bad_output"""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def check_packages() -> None:
    missing = [name for name in CONVERTER_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConvertError(
            "missing_packages",
            f"importing a head runs llama.cpp's converter, which needs {', '.join(missing)}: pip install -e '.[heads]'",
        )


@cache
def converter_script() -> Path:
    """convert_hf_to_gguf.py of the pinned llama.cpp (native/build.py extracts the sources on first use)."""
    build = REPO_ROOT / "native" / "build.py"
    if not build.is_file():
        raise ConvertError("no_converter", "importing a head needs the source checkout's native/build.py (llama.cpp's converter)")
    proc = subprocess.run([sys.executable, str(build), "--converter"], capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise ConvertError("no_converter", f"could not locate llama.cpp's converter: {proc.stderr.strip() or 'no output'}")
    return Path(lines[-1])


def run_converter(
    checkpoint: Path, target_dir: Path, out: Path, source: str, progress: Callable[[str], None] | None = None
) -> Path:
    """Convert the checkpoint folder to `out` (`--target-model-dir`: the target's HF tokenizer and config)."""
    check_packages()
    script = converter_script()
    cmd = [sys.executable, str(script), str(checkpoint), "--outfile", str(out), "--outtype", OUTTYPE]
    cmd += ["--target-model-dir", str(target_dir)]
    tail: deque[str] = deque(maxlen=40)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # everything it reads is local: it must never fetch anything
    with subprocess.Popen(cmd, cwd=script.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip())
            if progress is not None and "-->" in line:  # one line per tensor written
                progress(line.rstrip().split(":", 2)[-1])
        rc = proc.wait()
    if rc != 0 or not out.is_file():
        raise ConvertError("convert_failed", f"llama.cpp's converter could not convert {source}: {_reason(list(tail))}")
    return out


def _reason(lines: list[str]) -> str:
    """The converter's own message: the last error line, else the last lines of its output."""
    errors = [ln for ln in lines if "Error" in ln or ln.startswith("ERROR")]
    return errors[-1].strip() if errors else " / ".join(ln.strip() for ln in lines[-3:]) or "no output"


def bind(converted: Path, target_tokenizer: list[GGUFField], target_sha256: str, source_json: str, out: Path) -> dict:
    """Write `converted` to `out` with the target's tokenizer fields and the binding keys; returns the
    head's facts (architecture fields) for the manifest."""
    try:
        header = read_header(converted)
    except GGUFFieldError as exc:
        raise ConvertError("bad_output", f"the converter wrote an unreadable GGUF: {exc}") from None
    arch = header.fields.get("general.architecture")
    if arch is None or arch.value != b"eagle3":
        got = arch.value.decode(errors="replace") if arch is not None else "none"
        raise ConvertError("bad_output", f"the converter did not write an EAGLE-3 head (architecture {got!r})")
    own = [f for k, f in header.fields.items() if not k.startswith(("tokenizer.", "specee."))]
    binding = [GGUFField(TARGET_SHA_KEY, target_sha256.encode(), STRING), GGUFField(SOURCE_KEY, source_json.encode(), STRING)]
    try:
        rewrite(converted, out, "eagle3", own + target_tokenizer + binding)
    except GGUFFieldError as exc:
        raise ConvertError("bad_output", f"the converter wrote a damaged GGUF: {exc}") from None
    return {k.removeprefix("eagle3."): f.value for k, f in header.fields.items() if k.startswith("eagle3.")}
