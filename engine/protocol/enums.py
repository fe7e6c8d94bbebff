"""Closed sets of values: StrEnums on the wire as plain strings (decode refuses any other), and the
one list of acceleration modes the settings, the CLI and the dialogs offer."""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    AUTO = "auto"  # measured per machine: the fastest of the modes this model can run here
    VANILLA = "vanilla"
    EAGLE = "eagle"  # trained weights for the model: an EAGLE-3 head
    SPECEE = "specee"  # ... the head and the exit predictors
    NGRAM = "ngram"  # training-free: llama.cpp's n-gram drafters
    DRAFT = "draft"  # training-free: a smaller model with the same tokenizer drafts
    COMBINED = "combined"  # ngram's copy drafts where they pay, specee's early exits on the other steps
    REMOTE = "remote"  # an OpenAI-compatible server answers (Stats/Loaded of a remote engine); never loaded locally


# What a local Load may ask for (and the settings and the CLI offer), as plain strings
MODES: tuple[str, ...] = tuple(m.value for m in Mode if m is not Mode.REMOTE)
# The modes `auto` may pick: every local one but auto itself
MEASURABLE_MODES: tuple[str, ...] = tuple(m for m in MODES if m != Mode.AUTO)
# The modes whose requests a worker loaded with n_parallel > 1 decodes together (as vanilla rows:
# drafting and early exit follow one sequence); the others answer one request at a time
BATCHED_MODES: frozenset[str] = frozenset({Mode.VANILLA.value, Mode.NGRAM.value})


class Layout(StrEnum):
    AUTO = "auto"  # the worker's planner decides
    LAST = "last"  # upstream: n_gpu_layers offloads the last layers
    FIRST = "first"  # SpecEE's: the first n_gpu_layers on the GPU (exits then skip CPU layers)


LAYOUTS: tuple[str, ...] = tuple(m.value for m in Layout)


class FinishReason(StrEnum):
    STOP = "stop"  # the model ended its answer, or a stop string appeared
    LENGTH = "length"  # max_tokens reached: Generate.continue_answer can go on
    CONTEXT_FULL = "context_full"
    CANCELLED = "cancelled"


class Overflow(StrEnum):
    """What Generate does with a conversation longer than the context."""

    TRIM = "trim"  # the app: leave the oldest turns out (or cut the last message's middle), with a Notice
    REFUSE = "refuse"  # the HTTP server: an Error of kind context_length_exceeded; the client decides what to cut


class ErrorKind(StrEnum):
    MODEL_FILE = "model_file"  # the GGUF is missing, truncated, corrupt or not a model
    LOAD_FAILED = "load_failed"  # llama.cpp refused a file that passed our checks
    NO_MODEL = "no_model"
    BAD_SETTINGS = "bad_settings"
    BAD_REQUEST = "bad_request"
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # Generate.on_overflow refuse: the prompt does not fit
    BUSY = "busy"
    WORKER_DIED = "worker_died"
    INTERNAL = "internal"
    NATIVE = "native"  # the native build is missing or broken
    VERSION_MISMATCH = "version_mismatch"  # app and engine speak different protocol versions
    TIMEOUT = "timeout"  # no reply in time (the local client's wait, or a remote server)
    # a requested mode cannot run for this model (the message says how to get it)
    NO_ACCELERATION = "no_acceleration"
    NOT_MEASURED = "not_measured"
    UNSUPPORTED_ARCHITECTURE = "unsupported_architecture"
    NO_DRAFT_MODEL = "no_draft_model"
    # acceleration weights or a draft model that cannot be used
    BAD_HEAD = "bad_head"
    WRONG_HEAD = "wrong_head"
    BAD_PREDICTORS = "bad_predictors"
    WRONG_PREDICTORS = "wrong_predictors"
    BAD_DRAFT_MODEL = "bad_draft_model"
    BAD_DRAFT = "bad_draft"
    # remote engines (an OpenAI-compatible server)
    UNREACHABLE = "unreachable"
    UNAUTHORIZED = "unauthorized"
    BAD_RESPONSE = "bad_response"
    SERVER_STOPPED = "server_stopped"  # it stopped answering mid-reply: it died, restarted, or the connection dropped
