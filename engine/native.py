"""Python's view of our native build: is the patched llama.cpp loaded, and what does it offer."""

from __future__ import annotations

import ctypes
import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

# The C API version our Python code expects (native/src/build-info.cpp SPECEE_NATIVE_API_VERSION).
EXPECTED_API_VERSION = 12


class NativeBuildError(RuntimeError):
    pass


@cache
def build_info() -> dict[str, Any]:
    """Facts about the loaded llama.cpp; {'patched': False} for a plain upstream build."""
    try:
        import llama_cpp
        from llama_cpp import llama_cpp as lib_mod
    except ImportError as exc:
        raise NativeBuildError(f"llama_cpp is not installed ({exc}); run `make setup` (native/build.py)") from exc
    lib = lib_mod._lib
    info: dict[str, Any] = {"llama_cpp_python": llama_cpp.__version__, "library": getattr(lib, "_name", "")}
    fn = getattr(lib, "llama_specee_build_info", None)
    if fn is None:
        info["patched"] = False
    else:
        fn.argtypes, fn.restype = [], ctypes.c_char_p
        info.update(json.loads(fn().decode()))
        info["patched"] = True
    info["system_info"] = lib_mod.llama_print_system_info().decode(errors="replace").strip()
    return info


def require_patched() -> dict[str, Any]:
    info = build_info()
    if not info.get("patched"):
        raise NativeBuildError("the loaded llama_cpp is plain upstream, not SpecEE Chat's build; run native/build.py")
    if info.get("api_version", 0) < EXPECTED_API_VERSION:
        raise NativeBuildError(f"native build API {info.get('api_version')} is older than {EXPECTED_API_VERSION}; rebuild it")
    return info


def _bind(handle: ctypes.CDLL, sigs: dict[str, tuple[list[Any], Any]]) -> ctypes.CDLL:
    for name, (args, res) in sigs.items():
        fn = getattr(handle, name)
        fn.argtypes, fn.restype = args, res
    return handle


@cache
def lib() -> ctypes.CDLL:
    """libllama with SpecEE Chat's C API (native/src/specee.h) bound."""
    info = require_patched()
    from llama_cpp import llama_cpp as lib_mod

    handle = lib_mod._lib
    handle.specee_capture_layer_input.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_bool]
    handle.specee_capture_layer_input.restype = None
    handle.specee_layer_input.argtypes = [ctypes.c_void_p, ctypes.c_int32]
    handle.specee_layer_input.restype = ctypes.POINTER(ctypes.c_float)
    assert "layer-capture" in info["features"]
    vp, i32, f32p = ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_float)
    assert "early-exit" in info["features"]
    sigs: dict[str, tuple[list[Any], Any]] = {
        "specee_last_error": ([], ctypes.c_char_p),
        "specee_ee_init": ([vp, vp, i32, i32], vp),
        "specee_ee_set_threads": ([vp, i32], None),
        "specee_exit_arch_supported": ([vp], ctypes.c_bool),
        "specee_exit_archs": ([], ctypes.c_char_p),
        "specee_ee_free": ([vp], None),
        "specee_ee_set_predictor": ([vp, i32, i32, f32p, f32p, f32p, ctypes.c_float, ctypes.c_float], i32),
        "specee_ee_clear_predictors": ([vp], None),
        "specee_ee_configure": ([vp, ctypes.c_bool, i32, i32, ctypes.c_float, ctypes.c_uint32], None),
        "specee_ee_prefill": ([vp, ctypes.POINTER(i32), i32, i32, vp], i32),
        "specee_ee_step": ([vp, vp, ctypes.POINTER(i32), f32p, ctypes.POINTER(i32), ctypes.POINTER(EeStats)], i32),
        "specee_ee_reset_stats": ([vp], None),
        "specee_ee_set_fill": ([vp, ctypes.c_bool], None),
        "specee_ee_draft_context": ([vp], vp),
        "specee_ee_set_stop_tokens": ([vp, ctypes.POINTER(i32), i32], None),
        "specee_ee_set_vocab_predictor": ([vp, f32p, ctypes.c_float, ctypes.c_float], i32),
        "specee_ee_verify": ([vp, vp, ctypes.POINTER(i32), i32, ctypes.POINTER(i32)], i32),
        "specee_ee_n_past": ([vp], i32),
        "specee_ee_set_use_head": ([vp, ctypes.c_bool], None),
        "specee_ee_get_stats": ([vp, ctypes.POINTER(EeStats)], None),
        "specee_exit_features": ([f32p, f32p, f32p, i32, f32p], None),
        "specee_set_first_layers_on_gpu": ([i32, ctypes.c_bool], None),
        "specee_devices_json": ([], ctypes.c_char_p),
        "specee_measure_read_bandwidth": ([i32, ctypes.c_int64], ctypes.c_double),
        "specee_measure_memory": ([ctypes.c_char_p, i32, i32, i32, ctypes.c_bool], ctypes.c_char_p),
        "specee_greedy": ([vp, i32], i32),
        "specee_vanilla_run": ([vp, vp, i32, i32, i32, i32, ctypes.c_int64, ctypes.POINTER(i32)], i32),
    }
    return _bind(handle, sigs)


@cache
def interrupt_hooks() -> tuple[Callable[[int, int | None, int | None], None], int]:
    """(llama_set_abort_callback, the address of specee_interrupt_requested): a context whose abort
    callback is that function with a bool's address stops its decode once the bool is set. A
    prototype of its own, so llama-cpp-python's binding of the setter keeps its argument types."""
    handle = lib()
    handle.specee_interrupt_quiet_log.argtypes, handle.specee_interrupt_quiet_log.restype = [], None
    handle.specee_interrupt_quiet_log()  # a stopped step's routine warnings stay out of the log
    vp = ctypes.c_void_p
    setter = ctypes.CFUNCTYPE(None, vp, vp, vp)(ctypes.cast(handle.llama_set_abort_callback, vp).value)  # type: ignore[arg-type]  # a bound symbol is never NULL
    return setter, ctypes.cast(handle.specee_interrupt_requested, vp).value  # type: ignore[return-value]


@cache
def exit_archs() -> tuple[str, ...]:
    """The GGUF architectures whose llama.cpp graph builders carry our hooks (EAGLE layer capture,
    SpecEE exit checks and K/V fill), as the loaded library lists them (specee_exit_archs): the one
    list, which specee_exit_arch_supported also reads. None for a plain upstream build. Code that runs
    without the native library uses engine.models.acceleration.ACCELERATED_ARCHS, a tested copy."""
    if not build_info().get("patched"):
        return ()
    return tuple(lib().specee_exit_archs().decode().split(","))


def backends() -> list[dict[str, Any]]:
    """ggml's backends as this build and machine offer them: each module the build ships
    (libggml-<name>, loaded at run time), whether it loaded and how many devices it found.
    A module that did not load lacks its runtime (a driver, libvulkan); one with no device found
    none it may use."""
    require_patched()
    import llama_cpp
    from llama_cpp import llama_cpp as lib_mod

    handle = lib_mod._lib  # dlsym on it also finds libggml's registry, a dependency of libllama
    vp = ctypes.c_void_p
    size = ctypes.c_size_t
    _bind(handle, {"ggml_backend_reg_count": ([], size), "ggml_backend_reg_get": ([size], vp),
                   "ggml_backend_reg_name": ([vp], ctypes.c_char_p), "ggml_backend_reg_dev_count": ([vp], size)})  # fmt: skip
    loaded = {}
    for i in range(handle.ggml_backend_reg_count()):
        reg = handle.ggml_backend_reg_get(i)
        loaded[handle.ggml_backend_reg_name(reg).decode().lower()] = int(handle.ggml_backend_reg_dev_count(reg))
    folder = Path(llama_cpp.__file__).parent / "lib"
    shipped = {m.group(1).lower() for p in folder.iterdir() if (m := _BACKEND_MODULE.fullmatch(p.name))}
    shipped -= {"base"}
    return [{"name": name, "shipped": name in shipped, "loaded": name in loaded, "devices": loaded.get(name, 0)}
            for name in sorted(shipped | set(loaded), key=lambda n: (n != "cpu", n))]  # fmt: skip


# libggml-vulkan.so, ggml-cuda.dll, libggml-cpu-haswell.so (one CPU module per ISA level): the backend's name
_BACKEND_MODULE = re.compile(r"(?:lib)?ggml-([a-z]+)(?:-[a-z0-9_]+)?\.(?:so|dll|dylib)")


class DrafterStats(ctypes.Structure):
    """native/src/specee.h: struct specee_drafter_stats."""

    _fields_ = [
        ("n_steps", ctypes.c_int32),
        ("n_drafted", ctypes.c_int32),
        ("n_accepted", ctypes.c_int32),
        ("n_emitted", ctypes.c_int32),
        ("t_draft_ms", ctypes.c_double),
        ("t_verify_ms", ctypes.c_double),
        ("t_feed_ms", ctypes.c_double),
    ]


class GateInfo(ctypes.Structure):
    """native/src/specee.h: struct specee_gate_info."""

    _fields_ = [
        ("first", ctypes.c_double * 10),
        ("later", ctypes.c_double * 10),
        ("verify_ms", ctypes.c_double * 4),
        ("step_ms", ctypes.c_double),
        ("draft_ms", ctypes.c_double),
    ]


@cache
def spec_lib() -> ctypes.CDLL:
    """libspecee-spec: every drafter (EAGLE-3 and llama.cpp's own) behind one handle,
    specee_drafter_* (native/src/spec/drafter.cpp, patch 0006)."""
    require_patched()
    import llama_cpp

    folder = Path(llama_cpp.__file__).parent / "lib"
    found = sorted(folder.glob("libspecee-spec.*")) + sorted(folder.glob("specee-spec.dll"))
    if not found:
        raise NativeBuildError(f"the drafters library is missing from {folder}; rebuild with native/build.py")
    handle = ctypes.CDLL(str(found[0]))
    vp, i32 = ctypes.c_void_p, ctypes.c_int32
    sigs: dict[str, tuple[list[Any], Any]] = {
        "specee_drafter_init": ([vp, ctypes.c_char_p, vp, i32, i32], vp),
        "specee_drafter_init_exits": ([vp, vp, i32], vp),
        "specee_drafter_free": ([vp], None),
        "specee_drafter_set_threads": ([vp, i32], None),
        "specee_drafter_set_gated": ([vp, ctypes.c_bool], None),
        "specee_drafter_last_error": ([], ctypes.c_char_p),
        "specee_drafter_prefill": ([vp, ctypes.POINTER(i32), i32, i32, vp], i32),
        "specee_drafter_step": ([vp, vp, ctypes.POINTER(i32), i32, ctypes.POINTER(DrafterStats)], i32),
        "specee_drafter_steps": ([vp, vp, ctypes.POINTER(i32), i32, i32, ctypes.c_int64, ctypes.POINTER(DrafterStats)], i32),
        "specee_drafter_n_past": ([vp], i32),
        "specee_drafter_draft_context": ([vp], vp),
        "specee_drafter_reset_stats": ([vp], None),
        "specee_drafter_copy_acceptance": ([vp, ctypes.POINTER(ctypes.c_double), i32], i32),
        "specee_drafter_gate_info": ([vp, ctypes.POINTER(GateInfo)], ctypes.c_bool),
    }
    return _bind(handle, sigs)


def copy_lookup(ctx: list[int], last: int, max_out: int) -> tuple[int, int, list[int]]:
    """The native copy drafter's lookup on ctx + [last] (specee_copy_lookup): the end position of the
    longest earlier occurrence of its last tokens (-1: none), its length, and up to max_out of the
    tokens that followed it. engine.sequences.CopyLookup is its Python twin (offline replays)."""
    fn = getattr(spec_lib(), "specee_copy_lookup", None)
    if fn is None:
        raise NativeBuildError("the native build predates specee_copy_lookup; rebuild it with native/build.py")
    i32 = ctypes.c_int32
    p_i32 = ctypes.POINTER(i32)
    fn.argtypes, fn.restype = [p_i32, i32, i32, i32, p_i32, p_i32, p_i32], i32
    arr = (i32 * max(1, len(ctx)))(*ctx)
    out = (i32 * max(1, max_out))()
    n_out, length = i32(0), i32(0)
    pos = fn(arr, len(ctx), last, max_out, out, ctypes.byref(n_out), ctypes.byref(length))
    return int(pos), int(length.value), list(out[: n_out.value])


@cache
def chat_lib() -> ctypes.CDLL:
    """libspecee-spec's chat templates with tool calls, specee_chat_* (native/src/chat-api.h):
    llama.cpp's common/chat behind JSON strings. Bound apart from spec_lib() so that a build without
    them still drafts; NativeBuildError (rebuild) where they are missing."""
    handle = spec_lib()
    if not hasattr(handle, "specee_chat_apply"):
        raise NativeBuildError("the native build predates tool calls (specee_chat_*); rebuild it with native/build.py")
    vp, text = ctypes.c_void_p, ctypes.c_char_p
    sigs: dict[str, tuple[list[Any], Any]] = {
        "specee_chat_init": ([text], vp),
        "specee_chat_free": ([vp], None),
        "specee_chat_last_error": ([], text),
        "specee_chat_caps": ([vp], text),
        "specee_chat_apply": ([vp, text], text),
        "specee_chat_parse": ([vp, text, ctypes.c_bool, text], text),
    }
    return _bind(handle, sigs)


@cache
def cpu_lib() -> ctypes.CDLL | None:
    """ggml's CPU backend, for the switch of our multi-column kernels (patch 0009,
    native/src/kernels/multicol.h); None for a build without them."""
    require_patched()
    import llama_cpp

    folder = Path(llama_cpp.__file__).parent / "lib"
    # the copy libllama loaded: the wheel holds libggml-cpu.so and .so.0 as two files, and a
    # switch flipped in the other copy would change nothing
    loaded = _loaded_library_path("ggml-cpu")
    by_soname = sorted(folder.glob("libggml-cpu.so.*"), key=lambda p: len(p.name))
    found = [loaded] if loaded else by_soname + sorted(folder.glob("*ggml-cpu.*"))
    if not found:
        return None
    handle = ctypes.CDLL(str(found[0]))
    if not hasattr(handle, "specee_multicol_set"):
        return None
    sigs: dict[str, tuple[list[Any], Any]] = {
        "specee_multicol_set": ([ctypes.c_bool], None),
        "specee_multicol_available": ([], ctypes.c_bool),
        "specee_multicol_rows": ([], ctypes.c_int64),
        "specee_split_by_thread_set": ([ctypes.c_bool], None),
        "specee_split_by_thread_count": ([], ctypes.c_int64),
    }
    if hasattr(handle, "specee_fa_tiles_set"):  # builds before the attention tiles lack it
        sigs["specee_fa_tiles_set"] = ([ctypes.c_bool], None)
    return _bind(handle, sigs)


def _loaded_library_path(name: str) -> Path | None:
    """The file of an already loaded shared library whose name contains `name` (Linux)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if name in Path(path).name and path.startswith("/"):
                    return Path(path)
    except OSError:
        pass
    return None


def multicol_available() -> bool:
    """Whether this build's CPU kernels compute small batches several rows at a time."""
    handle = cpu_lib()
    return bool(handle and handle.specee_multicol_available())


def multicol_rows() -> int:
    """Weight rows the multi-column kernels have computed in this process so far."""
    handle = cpu_lib()
    return int(handle.specee_multicol_rows()) if handle else 0


def set_multicol(on: bool) -> None:
    """Turn the multi-column kernels on or off for the following decodes (measurements only)."""
    handle = cpu_lib()
    if handle is not None:
        handle.specee_multicol_set(on)


def apply_kernel_knobs() -> None:
    """The CPU kernels' switches from engine/knobs.py, set once at the worker's start (the kernels
    themselves read no environment): SPECEE_TEST_MULTICOL_KERNELS, SPECEE_TEST_SPLIT_BY_THREAD,
    SPECEE_TEST_ATTENTION_TILES, each on unless set to 0. KnobError for a value that is not a switch."""
    from engine import knobs

    multicol, split = knobs.MULTICOL_KERNELS.flag(), knobs.SPLIT_BY_THREAD.flag()
    set_multicol(multicol is not False)
    set_split_by_thread(split is not False)
    set_attention_tiles(knobs.ATTENTION_TILES.flag() is not False)


def set_attention_tiles(on: bool) -> None:
    """Prompt batches' flash attention in tiles of query rows (on, native/src/kernels/flash_attn_rows.cpp)
    or ggml's one pass per row (off): the same bits, for measurements and the tests that check it."""
    handle = cpu_lib()
    if handle is not None and hasattr(handle, "specee_fa_tiles_set"):
        handle.specee_fa_tiles_set(on)


def split_by_thread_count() -> int:
    """How many times a thread took one run of weight rows in this process so far (patch 0019)."""
    handle = cpu_lib()
    return int(handle.specee_split_by_thread_count()) if handle else 0


def set_split_by_thread(on: bool) -> None:
    """Small batches: one contiguous run of weight rows per thread (on, patch 0019) or upstream's
    small chunks taken in turns (off), for the following decodes (measurements only)."""
    handle = cpu_lib()
    if handle is not None:
        handle.specee_split_by_thread_set(on)


EE_MAX_LAYERS = 128  # specee.h SPECEE_EE_MAX_LAYERS


class EeStats(ctypes.Structure):
    """native/src/specee.h: struct specee_ee_stats."""

    _fields_ = [
        ("n_steps", ctypes.c_int32),
        ("n_exits", ctypes.c_int32),
        ("n_vocab_exits", ctypes.c_int32),
        ("n_cand_hits", ctypes.c_int32),
        ("n_layers_run", ctypes.c_int64),
        ("n_shadow", ctypes.c_int32),
        ("n_shadow_exits", ctypes.c_int32),
        ("n_shadow_correct", ctypes.c_int32),
        ("exit_hist", ctypes.c_int32 * (EE_MAX_LAYERS + 1)),
        ("t_draft_ms", ctypes.c_double),
        ("t_target_ms", ctypes.c_double),
        ("t_other_ms", ctypes.c_double),
        ("n_confirmed", ctypes.c_int32),
    ]
