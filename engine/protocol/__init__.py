"""The one protocol between the app (client) and the engine worker process.

Transport: one JSON object per line; commands go to the worker's stdin, events come back on a
private pipe. Every message carries a "type" tag; `encode` / `decode` are the only (de)serialisers,
so both sides agree by construction. Closed sets of values (modes, layouts, finish reasons, error
kinds) are StrEnums: on the wire they are the same plain strings, in code they compare equal to
them (`msg.mode == "vanilla"`), and `decode` refuses a value outside the set. This package is also
the one home of the acceleration modes and of the limits the engine accepts: the worker enforces
them, the settings file, the CLI and the dialogs import them.

The package's modules: version, errors, enums, limits (and their checks), settings (Sampling,
Placement, Acceleration), message (the base and its registry), commands, events, codec (encode,
decode). Import the names from here: `from engine import protocol as p`.
"""

from engine.protocol.codec import decode, encode
from engine.protocol.commands import Cancel, CountTokens, Embed, Generate, Load, Shutdown, Unload
from engine.protocol.enums import (
    BATCHED_MODES,
    LAYOUTS,
    MEASURABLE_MODES,
    MODES,
    ErrorKind,
    FinishReason,
    Layout,
    Mode,
    Overflow,
)
from engine.protocol.errors import ProtocolError, SettingsError, VersionMismatch
from engine.protocol.events import (
    AutoDecided,
    Done,
    Embeddings,
    Error,
    Loaded,
    Notice,
    PromptProgress,
    Ready,
    Stats,
    Token,
    TokenCount,
    TokenLogprob,
    TopLogprob,
    Unloaded,
)
from engine.protocol.limits import (
    ANSWER_RESERVE,
    DRAFTER_RE,
    EXIT_CHECK_EVERY_MAX,
    KV_DISK_BUDGET_DEFAULT,
    KV_DISK_BUDGET_MAX,
    N_CTX_MAX,
    N_CTX_MIN,
    N_DRAFT_MAX,
    N_GPU_LAYERS_MAX,
    N_PARALLEL_MAX,
    N_THREADS_MAX,
    TOP_LOGPROBS_MAX,
    prompt_budget,
)
from engine.protocol.message import Message
from engine.protocol.settings import Acceleration, Placement, Sampling
from engine.protocol.version import PROTOCOL_VERSION

__all__ = [
    "ANSWER_RESERVE",
    "BATCHED_MODES",
    "DRAFTER_RE",
    "EXIT_CHECK_EVERY_MAX",
    "KV_DISK_BUDGET_DEFAULT",
    "KV_DISK_BUDGET_MAX",
    "LAYOUTS",
    "MEASURABLE_MODES",
    "MODES",
    "N_CTX_MAX",
    "N_CTX_MIN",
    "N_DRAFT_MAX",
    "N_GPU_LAYERS_MAX",
    "N_PARALLEL_MAX",
    "N_THREADS_MAX",
    "PROTOCOL_VERSION",
    "TOP_LOGPROBS_MAX",
    "Acceleration",
    "AutoDecided",
    "Cancel",
    "CountTokens",
    "Done",
    "Embed",
    "Embeddings",
    "Error",
    "ErrorKind",
    "FinishReason",
    "Generate",
    "Layout",
    "Load",
    "Loaded",
    "Message",
    "Mode",
    "Notice",
    "Overflow",
    "Placement",
    "PromptProgress",
    "ProtocolError",
    "Ready",
    "Sampling",
    "SettingsError",
    "Shutdown",
    "Stats",
    "Token",
    "TokenCount",
    "TokenLogprob",
    "TopLogprob",
    "Unload",
    "Unloaded",
    "VersionMismatch",
    "decode",
    "encode",
    "prompt_budget",
]
