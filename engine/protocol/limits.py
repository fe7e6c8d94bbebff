"""Limits: the one set (the worker enforces them; settings, CLI and dialogs use them), and the checks
that enforce them with a SettingsError naming the setting."""

from __future__ import annotations

import math
import re

from engine.protocol.errors import SettingsError

TOP_LOGPROBS_MAX = 20  # Generate.top_logprobs: the most alternatives reported per token (OpenAI's limit)
# conversations' saved KV caches on disk (engine.kept_caches): the default budget and the most accepted
KV_DISK_BUDGET_DEFAULT = 4 * 1024**3
KV_DISK_BUDGET_MAX = 1024**4
N_CTX_MIN, N_CTX_MAX = 256, 1 << 20  # tokens
N_THREADS_MAX = 512  # 0 = the physical cores (and fewer while other processes are busy)
N_GPU_LAYERS_MAX = 10_000  # -1 = all
N_DRAFT_MAX = 16  # draft chain length; 0 = the mode's default
# requests decoded together (Load.n_parallel): each takes a sequence and a full context's KV cells
N_PARALLEL_MAX = 16
EXIT_CHECK_EVERY_MAX = 1_000_000
DRAFTER_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")  # a llama.cpp drafter type name; the engine checks it exists


def prompt_budget(n_ctx: int, max_tokens: int) -> int:
    """The tokens a prompt may take: the context less the room kept for the answer, never more
    than half the context (a long history is worth more than a huge max_tokens rarely used).
    max_tokens 0 (the answer may take all the room left) keeps ANSWER_RESERVE free for it."""
    return n_ctx - min(max_tokens or ANSWER_RESERVE, n_ctx // 2)


ANSWER_RESERVE = 512  # tokens kept free for an answer with no length limit (max_tokens 0) when old turns are dropped


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise SettingsError(what)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
