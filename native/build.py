"""Build our patched llama.cpp and install it as the `llama_cpp` package of a Python environment.

Pipeline: fetch the pinned llama-cpp-python sdist from PyPI (sha256-checked) -> extract once ->
apply native/patches/*.patch and add native/src/ -> build a wheel with a persistent CMake tree
(incremental rebuilds) -> cache the wheel under the user cache dir, keyed by a hash of everything
that goes in -> pip-install it. A repeat run with nothing changed only compares one key.

Run with the interpreter of the target environment:  .venv/bin/python native/build.py
Stdlib + platformdirs + tqdm only: it runs before the project itself is importable.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from tqdm import tqdm

NATIVE_DIR = Path(__file__).resolve().parent
PATCH_DIR = NATIVE_DIR / "patches"
SOURCE_DIR = NATIVE_DIR / "src"

SDIST_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/" + SDIST_NAME
)
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"

# Bump to invalidate every cached wheel when this script's build recipe changes meaning.
RECIPE_VERSION = "1"

# What we never need from llama-cpp-python's build: multimodal, tools, tests, examples.
BASE_CMAKE_ARGS = [
    "-DLLAVA_BUILD=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    # Batch-invariant kernels: llamafile's sgemm picks tiles (and so summation order) by batch
    # shape. With it, a speculative verify batch drifted from one-token decoding (4/12 dev answers
    # identical) and, limiting it to prompt-sized batches, still did wherever two workers cached a
    # different prefix (85/102). Without it every row is computed the same way whatever the batch:
    # eagle == vanilla on 102/102, and an answer no longer depends on what was cached. Cost,
    # measured side by side: prefill 3% slower than upstream, decode unchanged.
    "-DGGML_LLAMAFILE=OFF",
]


class BuildError(RuntimeError):
    """A failed step, with what to do about it."""

    def __init__(self, step: str, problem: str, fix: str) -> None:
        super().__init__(f"[native build] step '{step}' failed: {problem}\n  how to fix: {fix}")
        self.step = step


def cache_root() -> Path:
    """The build cache: SPECEE_NATIVE_CACHE, else native/ under the app's cache dir (tests give the
    app a fresh cache per run but keep sharing the build)."""
    if os.environ.get("SPECEE_NATIVE_CACHE"):
        return Path(os.environ["SPECEE_NATIVE_CACHE"])
    return Path(os.environ.get("SPECEE_CACHE_DIR") or platformdirs.user_cache_dir("specee-chat")) / "native"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


GPU_BACKENDS = ("cuda", "metal", "vulkan")


def detect_backends() -> tuple[str, ...]:
    """The GPU backends to build beside the CPU one, each a module loaded at run time
    (GGML_BACKEND_DL): a machine without the driver runs on the CPU. SPECEE_BACKEND overrides
    with a comma list ("cpu" alone: none). CUDA needs the toolkit and a visible NVIDIA device, or
    every CPU-only box with a toolkit pays for it; Vulkan needs only its toolchain (glslc and the
    headers), since tests run it on Mesa's CPU driver (lavapipe) everywhere."""
    forced = os.environ.get("SPECEE_BACKEND", "").strip().lower()
    if forced:
        names = tuple(dict.fromkeys(n.strip() for n in forced.split(",") if n.strip()))
        unknown = [n for n in names if n not in ("cpu", *GPU_BACKENDS)]
        if unknown or not names:
            raise BuildError("detect", f"SPECEE_BACKEND={forced!r} is unknown", "use cpu, cuda, metal or vulkan, or a comma list")
        return tuple(n for n in GPU_BACKENDS if n in names)
    found = []
    if shutil.which("nvcc") and (Path("/dev/nvidia0").exists() or _runs(["nvidia-smi", "-L"])):
        found.append("cuda")
    if sys.platform == "darwin":
        found.append("metal")
    if vulkan_toolchain():
        found.append("vulkan")
    return tuple(found)


def vulkan_toolchain() -> bool:
    """glslc and the Vulkan headers (Debian: glslc, libvulkan-dev; elsewhere the LunarG SDK)."""
    sdk = os.environ.get("VULKAN_SDK")
    headers = [Path(sdk) / "include" / "vulkan" / "vulkan.h"] if sdk else []
    headers.append(Path("/usr/include/vulkan/vulkan.h"))
    return shutil.which("glslc") is not None and any(h.is_file() for h in headers)


def _runs(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def backend_label(gpu_backends: tuple[str, ...]) -> str:
    return "+".join(("cpu", *gpu_backends))


def cmake_args(gpu_backends: tuple[str, ...], dynamic: bool = True) -> list[str]:
    """Our build loads its backends at run time (patch 0011 finds them beside libggml); the plain
    upstream flavour links them in, as upstream llama-cpp-python does."""
    args = list(BASE_CMAKE_ARGS)
    args.append(f"-DGGML_BACKEND_DL={'ON' if dynamic else 'OFF'}")
    for name in GPU_BACKENDS:
        args.append(f"-DGGML_{name.upper()}={'ON' if name in gpu_backends else 'OFF'}")
    args += cpu_isa_args(dynamic, portable=os.environ.get("SPECEE_PORTABLE") == "1")
    extra = os.environ.get("SPECEE_CMAKE_ARGS", "").split()
    return args + extra


# cpuinfo flag -> ggml's option for it (x86). GGML_AVX512 wants the whole F/CD/VL/DQ/BW set.
X86_ISA_OPTIONS = {
    "sse4_2": "GGML_SSE42", "avx": "GGML_AVX", "avx2": "GGML_AVX2", "fma": "GGML_FMA", "f16c": "GGML_F16C",
    "bmi2": "GGML_BMI2", "avx_vnni": "GGML_AVX_VNNI", "avx512vbmi": "GGML_AVX512_VBMI",
    "avx512_vnni": "GGML_AVX512_VNNI", "avx512_bf16": "GGML_AVX512_BF16",
}  # fmt: skip
AVX512_BASE = {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"}
# Never built, even on a CPU that has them (Xeon Sapphire Rapids and later; no laptop has AMX): the
# AMX weights buffer runs batches through tile kernels that sum in another order than a one-row
# decode (speculative decoding would stop being lossless), and on a Sapphire Rapids VM here its
# first batch (an EAGLE head's) died of SIGILL at `tilezero` unless Mesa's LLVM had loaded first.
X86_ISA_NEVER = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")


def cpu_isa_args(dynamic: bool, portable: bool) -> list[str]:
    """How the CPU backend targets an instruction set. Installers (portable) build one CPU module
    per x86/ARM level and ggml loads the best the user's CPU runs. A build for this machine uses
    this CPU's instruction sets: -march=native where backends are linked in; with loadable backends
    ggml refuses GGML_NATIVE (its module's feature check needs the ISA named), so on x86 this CPU's
    flags are named one by one, and elsewhere every level is built."""
    if portable:
        return ["-DGGML_NATIVE=OFF", "-DGGML_CPU_ALL_VARIANTS=ON"] if dynamic else ["-DGGML_NATIVE=OFF"]
    if not dynamic:
        return ["-DGGML_NATIVE=ON"]
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return ["-DGGML_NATIVE=OFF", "-DGGML_CPU_ALL_VARIANTS=ON"]
    flags = set(cpu_fingerprint().split())
    on = {opt for flag, opt in X86_ISA_OPTIONS.items() if flag in flags}
    if flags >= AVX512_BASE:
        on.add("GGML_AVX512")
    options = sorted({*X86_ISA_OPTIONS.values(), "GGML_AVX512", *X86_ISA_NEVER})
    return ["-DGGML_NATIVE=OFF", *(f"-D{opt}={'ON' if opt in on else 'OFF'}" for opt in options)]


def cpu_fingerprint() -> str:
    """-march=native output depends on the CPU, so native builds are keyed by its flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        flags = re.search(r"^(flags|Features)\s*:\s*(.*)$", text, re.M)
        return flags.group(2) if flags else platform.processor()
    except OSError:
        return platform.machine() + platform.processor()


@dataclass(frozen=True)
class Recipe:
    patches: tuple[Path, ...]
    sources: tuple[Path, ...]
    cmake_args: tuple[str, ...]
    backend: str

    @property
    def key(self) -> str:
        h = hashlib.sha256()
        for part in (RECIPE_VERSION, SDIST_SHA256, self.backend, *self.cmake_args):
            h.update(part.encode() + b"\0")
        if "-DGGML_NATIVE=ON" in self.cmake_args:  # other builds name their ISA flags in cmake_args
            h.update(cpu_fingerprint().encode())
        for path in (*self.patches, *self.sources):
            # the path under native/, not the name: a file moved between folders builds elsewhere
            where = path.relative_to(NATIVE_DIR).as_posix() if path.is_relative_to(NATIVE_DIR) else str(path)
            h.update(where.encode() + b"\0" + path.read_bytes() + b"\0")
        return h.hexdigest()[:16]

    @property
    def patch_names(self) -> str:
        return ",".join(p.stem for p in self.patches)


def make_recipe(upstream: bool) -> Recipe:
    gpu_backends = detect_backends()
    patches = () if upstream else tuple(sorted(PATCH_DIR.glob("*.patch")))
    sources = () if upstream else tuple(sorted(p for p in SOURCE_DIR.rglob("*") if p.is_file()))
    return Recipe(patches, sources, tuple(cmake_args(gpu_backends, dynamic=not upstream)), backend_label(gpu_backends))


# ---------------------------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------------------------


def fetch_sdist(root: Path) -> Path:
    target = root / "sdist" / SDIST_NAME
    if target.exists() and sha256_file(target) == SDIST_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    local = os.environ.get("SPECEE_SDIST")
    tmp = target.with_suffix(".part")
    try:
        if local:
            shutil.copyfile(local, tmp)
        else:
            with urllib.request.urlopen(SDIST_URL, timeout=60) as resp, tmp.open("wb") as out:
                total = int(resp.headers.get("Content-Length") or 0)
                with tqdm(total=total, unit="B", unit_scale=True, desc="llama-cpp-python sdist") as bar:
                    for block in iter(lambda: resp.read(1 << 16), b""):
                        out.write(block)
                        bar.update(len(block))
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise BuildError(
            "fetch",
            f"could not download {SDIST_URL}: {exc}",
            f"check network access to PyPI, or download {SDIST_NAME} yourself and set SPECEE_SDIST=/path/to/it",
        ) from exc
    got = sha256_file(tmp)
    if got != SDIST_SHA256:
        tmp.unlink(missing_ok=True)
        raise BuildError(
            "verify",
            f"{SDIST_NAME} has sha256 {got}, expected {SDIST_SHA256}",
            "the download is corrupt or not the pinned file; run again",
        )
    tmp.replace(target)
    return target


def extract_pristine(root: Path, sdist: Path) -> Path:
    pristine = root / f"pristine-{SDIST_SHA256[:12]}"
    if (pristine / "CMakeLists.txt").exists():
        return pristine
    tmp = Path(tempfile.mkdtemp(dir=root, prefix="extract-"))
    try:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        (tmp / f"llama_cpp_python-{SDIST_VERSION}").rename(pristine)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return pristine


def stage_sources(root: Path, pristine: Path, recipe: Recipe) -> Path:
    """A fresh patched copy of the sdist, with our sources in src/specee/."""
    staging = Path(tempfile.mkdtemp(dir=root, prefix="staging-"))
    tree = staging / "tree"
    shutil.copytree(pristine, tree, symlinks=True)
    for patch in recipe.patches:
        result = subprocess.run(
            ["git", "apply", "--whitespace=nowarn", "-p1", str(patch)], cwd=tree, capture_output=True, text=True
        )
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise BuildError(
                "patch",
                f"{patch.name} does not apply to llama-cpp-python {SDIST_VERSION}:\n{result.stderr.strip()}",
                "regenerate the patch against the pinned sdist (see native/README.md)",
            )
    if recipe.sources:
        dest = tree / "vendor" / "llama.cpp" / "src" / "specee"
        dest.mkdir(parents=True)
        for src in recipe.sources:
            target = dest / src.relative_to(SOURCE_DIR)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)
    return staging


def sync_tree(src: Path, dst: Path) -> int:
    """Make dst equal src, rewriting only files whose bytes differ so CMake rebuilds only those."""
    changed = 0
    dst.mkdir(parents=True, exist_ok=True)
    wanted: set[Path] = set()
    for path in src.rglob("*"):
        rel = path.relative_to(src)
        wanted.add(rel)
        out = dst / rel
        if path.is_dir() and not path.is_symlink():
            out.mkdir(exist_ok=True)
            continue
        data = path.read_bytes()
        if out.is_file() and out.stat().st_size == len(data) and out.read_bytes() == data:
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        shutil.copymode(path, out)
        changed += 1
    for path in sorted(dst.rglob("*"), reverse=True):
        if path.relative_to(dst) not in wanted:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            changed += 1
    return changed


PROGRESS = re.compile(r"^\s*\[\s*(\d+)/(\d+)\]|^\s*\[\s*(\d+)%\]")


class BuildProgress:
    """The compile's percentage from its output lines: ninja's "[done/total]" of the build with the
    most steps seen (a sub-build such as vulkan-shaders-gen runs its own "[1/2]", "[2/2]" in the
    middle of the main build's), else make's "[ NN%]"."""

    def __init__(self) -> None:
        self.steps = 0

    def percent(self, line: str) -> int | None:
        m = PROGRESS.match(line)
        if m is None:
            return None
        if m.group(1):
            done, total = int(m.group(1)), int(m.group(2))
            if total < self.steps:
                return None
            self.steps = total
            return done * 100 // total
        return None if self.steps else int(m.group(3))


def build_wheel(root: Path, worktree: Path, recipe: Recipe, name: str) -> Path:
    out = Path(tempfile.mkdtemp(dir=root, prefix="wheel-"))
    log_path = root / f"build-{name}.log"
    env = dict(os.environ)
    env["CMAKE_ARGS"] = " ".join(
        [*recipe.cmake_args, f"-DSPECEE_BUILD_KEY={recipe.key}", f"-DSPECEE_PATCHES={recipe.patch_names}"]
    )
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    cmd = [
        sys.executable, "-m", "pip", "wheel", str(worktree), "--no-deps", "--no-build-isolation",
        "-w", str(out), "-v",
        f"--config-settings=build-dir={root / f'cmake-{name}-{recipe.backend}'}",  # persistent: incremental
        "--config-settings=cmake.build-type=Release",
    ]  # fmt: skip
    # CMake keeps cached options when a flag is merely dropped from the command line: reconfigure
    # from scratch whenever the flags differ from the last build in this tree.
    build_dir = root / f"cmake-{name}-{recipe.backend}"
    flags_file = build_dir / "specee-cmake-args.json"
    flags = json.dumps(list(recipe.cmake_args))
    if not flags_file.exists() or flags_file.read_text() != flags:
        (build_dir / "CMakeCache.txt").unlink(missing_ok=True)
    start = time.monotonic()
    with log_path.open("w") as log, tqdm(total=100, desc=f"compiling llama.cpp ({name})", unit="%") as bar:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        progress = BuildProgress()
        for line in proc.stdout:
            log.write(line)
            pct = progress.percent(line)
            if pct is not None:
                bar.n = pct
                bar.refresh()
        rc = proc.wait()
    if rc != 0:
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-25:])
        shutil.rmtree(out, ignore_errors=True)
        raise BuildError(
            "compile",
            f"pip wheel exited with {rc}; last lines of {log_path}:\n{tail}",
            "install a C/C++ toolchain and cmake>=3.21 (Debian: apt install build-essential cmake"
            + (" glslc libvulkan-dev spirv-headers" if "vulkan" in recipe.backend else "")
            + "), then run again; set SPECEE_BACKEND=cpu to rule out a GPU toolkit problem",
        )
    build_dir.mkdir(parents=True, exist_ok=True)
    flags_file.write_text(flags)
    wheels = list(out.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError("compile", f"expected one wheel in {out}, found {wheels}", "report this as a bug")
    print(f"[native build] compiled in {time.monotonic() - start:.0f}s", file=sys.stderr)
    return wheels[0]


def install_wheel(wheel: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--force-reinstall", "--no-deps", "-q", str(wheel)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError("install", result.stderr.strip()[-2000:], f"check that {sys.prefix} is writable")


def marker_path() -> Path:
    return Path(sys.prefix) / ".specee-native.json"


def build(upstream: bool = False, force: bool = False, install: bool = True) -> dict:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    recipe = make_recipe(upstream)
    name = "upstream" if upstream else "specee"
    info = {"key": recipe.key, "backend": recipe.backend, "flavour": name, "patches": recipe.patch_names}
    marker = marker_path()
    if not force and marker.exists() and json.loads(marker.read_text()) == info:
        print(f"[native build] up to date ({name}, key {recipe.key}, {recipe.backend})", file=sys.stderr)
        return info
    cached_dir = root / "wheels" / recipe.key
    cached = next(iter(cached_dir.glob("*.whl")), None) if cached_dir.exists() else None
    if cached is None or force:
        print(f"[native build] building {name} llama.cpp (key {recipe.key}, backend {recipe.backend})", file=sys.stderr)
        pristine = extract_pristine(root, fetch_sdist(root))
        staging = stage_sources(root, pristine, recipe)
        try:
            changed = sync_tree(staging / "tree", root / f"work-{name}")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        print(f"[native build] {changed} source files changed since the last build", file=sys.stderr)
        wheel = build_wheel(root, root / f"work-{name}", recipe, name)
        tmp_dir = root / "wheels" / f".{recipe.key}.tmp"
        shutil.rmtree(tmp_dir, ignore_errors=True)
        tmp_dir.mkdir(parents=True)
        shutil.move(str(wheel), tmp_dir / wheel.name)
        shutil.rmtree(wheel.parent, ignore_errors=True)
        shutil.rmtree(cached_dir, ignore_errors=True)
        tmp_dir.rename(cached_dir)  # atomic: a cached wheel is always complete
        cached = cached_dir / wheel.name
    else:
        print(f"[native build] using cached wheel {cached}", file=sys.stderr)
    if not install:
        print(f"[native build] built {cached} (not installed)", file=sys.stderr)
        return info
    install_wheel(cached)
    marker.write_text(json.dumps(info))
    print(f"[native build] installed {name} llama_cpp into {sys.prefix}", file=sys.stderr)
    return info


SERVER_CMAKE_ARGS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_CURL=OFF",
]  # fmt: skip


def server_cmake_args() -> list[str]:
    """The peer's flags: upstream's defaults but for the CPU's instruction sets, which are ours (this
    CPU's, named one by one, AMX never): the bench compares the engines, not the compilers' targets;
    and upstream's -march=native build took AMX and crashed (SIGILL/SIGSEGV) on a Sapphire Rapids VM."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return [*SERVER_CMAKE_ARGS, "-DGGML_NATIVE=ON"]
    return SERVER_CMAKE_ARGS + cpu_isa_args(dynamic=True, portable=False)


def server_path() -> Path:
    """Where `--server` puts llama-server for this sdist, flags and CPU."""
    h = hashlib.sha256("\0".join([SDIST_SHA256, *server_cmake_args(), cpu_fingerprint()]).encode()).hexdigest()[:16]
    return cache_root() / f"server-{h}" / "llama-server"


def build_server() -> Path:
    """Plain upstream llama-server from the same pinned sources, with upstream's defaults: the peer
    that `specee bench --modes peer,peer:ngram-simple,peer:draft` runs side by side with ours."""
    target = server_path()
    if target.exists():
        print(f"[native build] llama-server up to date: {target}", file=sys.stderr)
        return target
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    pristine = extract_pristine(root, fetch_sdist(root))
    build_dir = target.parent / "build"
    log_path = target.parent / "build.log"
    target.parent.mkdir(parents=True, exist_ok=True)
    jobs = str(os.cpu_count() or 2)
    steps = [
        ["cmake", "-S", str(pristine / "vendor" / "llama.cpp"), "-B", str(build_dir), *server_cmake_args()],
        ["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", jobs],
    ]
    with log_path.open("w") as log:
        for cmd in steps:
            if subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
                fix = "install cmake>=3.21 and a C++ compiler"
                raise BuildError("server", f"{' '.join(cmd[:3])} failed; see {log_path}", fix)
    built = next(build_dir.rglob("llama-server"), None)
    if built is None:
        raise BuildError("server", f"no llama-server binary under {build_dir}", "report this as a bug")
    shutil.copy2(built, target)
    shutil.rmtree(build_dir, ignore_errors=True)
    print(f"[native build] built {target}", file=sys.stderr)
    return target


def converter_path() -> Path:
    """llama.cpp's own Hugging Face -> GGUF converter (convert_hf_to_gguf.py, with its conversion/
    package and gguf-py) in the pristine pinned sources, extracted on first use. The engine runs it
    as a subprocess to import published EAGLE-3 heads (engine/models/head_convert.py); nothing of
    it is copied into this repository."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    script = extract_pristine(root, fetch_sdist(root)) / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py"
    if not script.is_file():
        raise BuildError("converter", f"{script} is missing from the pinned sources", "delete the pristine-* folder and retry")
    return script


def build_tool(name: str) -> Path:
    """Compile src/tools/<name>.c (kernel-bench: the small-batch matmul kernels; fa-bench: the
    attention rows) against the installed build's ggml libraries (the kernels the worker runs) into
    the cache; returns the program's path."""
    import llama_cpp

    root = cache_root()
    include = extract_pristine(root, fetch_sdist(root)) / "vendor" / "llama.cpp" / "ggml" / "include"
    lib = Path(llama_cpp.__file__).parent / "lib"
    out = root / name
    source = SOURCE_DIR / "tools" / f"{name}.c"
    cmd = [os.environ.get("CC", "cc"), "-O2", "-Wno-deprecated-declarations", str(source), f"-I{include}", f"-L{lib}",
           "-lggml", "-lggml-base", "-lggml-cpu", f"-Wl,-rpath,{lib}", "-lm", "-o", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(name, done.stderr.strip()[-2000:], "install a C compiler and run native/build.py first")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", action="store_true", help="build plain upstream (no patches) for comparisons")
    parser.add_argument("--force", action="store_true", help="rebuild even if a cached wheel exists")
    parser.add_argument("--no-install", action="store_true", help="build and cache the wheel only (a CUDA build where no GPU is)")
    parser.add_argument("--print-key", action="store_true", help="print the build key and exit")
    parser.add_argument("--server", action="store_true", help="build upstream llama-server (the bench's peer) and print its path")
    parser.add_argument("--converter", action="store_true", help="print the path of llama.cpp's HF -> GGUF converter")
    parser.add_argument("--kernel-bench", action="store_true", help="build the small-batch kernel benchmark")
    parser.add_argument("--fa-bench", action="store_true", help="build the attention-rows benchmark")
    args = parser.parse_args(argv)
    try:
        if args.kernel_bench or args.fa_bench:
            print(build_tool("kernel-bench" if args.kernel_bench else "fa-bench"))
            return 0
        if args.print_key:
            print(make_recipe(args.upstream).key)
            return 0
        if args.server:
            print(build_server())
            return 0
        if args.converter:
            print(converter_path())
            return 0
        build(upstream=args.upstream, force=args.force, install=not args.no_install)
    except BuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
