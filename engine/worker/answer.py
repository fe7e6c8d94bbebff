"""One answer as its tokens come, on either path (the one-at-a-time EngineSession.generate and the
batched engine/worker/concurrent.py): text pieces sent at once for the first, then at most every
emit_every_s (text that may start a stop string held back), PromptProgress while a long prompt is
read, Stats now and then, and Done. One loop for both, so the server and the app cannot tell the
paths apart (the paths' Stats had drifted apart when each had its own)."""

from __future__ import annotations

import codecs
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from engine import protocol as p

Emit = Callable[[p.Message], None]
RECENT_S = 1.0  # Stats.recent_tok_s: the decode speed over about this long


class TextSource(Protocol):
    """What an answer needs of the loaded model."""

    def is_end(self, token: int) -> bool: ...
    def piece(self, token: int, special: bool = False) -> bytes: ...


# What the one-at-a-time path adds to an answer's Stats, from (decode tok/s, tokens generated): the
# mode that ran, its ratio to vanilla, the context used, the threads and the mode's own figures
StatsDetails = Callable[[float, int], dict[str, Any]]


class AnswerStream:
    def __init__(
        self,
        req: p.Generate,
        n_prompt: int,
        n_cached: int,
        source: TextSource,
        emit: Emit,
        t0: float,
        *,
        emit_every_s: float,
        stats_every_s: float,
        n_threads: int,
        long_prompt: int = 0,
        details: StatsDetails | None = None,
        logprob: Callable[[int, bytes], p.TokenLogprob] | None = None,
        margin: Callable[[], float] | None = None,
    ) -> None:
        """long_prompt: prompts with more than this many tokens to read get PromptProgress (read()).
        details: see StatsDetails. logprob: a generated token's Generate.logprobs entry (from its
        piece); margin: the gap between the top two logits the token just sampled came from
        (Generate.report_margins, every sampled token's, the ending one's too)."""
        self.req, self.n_prompt, self.n_cached = req, n_prompt, n_cached
        self._source, self._emit, self.t0 = source, emit, t0
        self._emit_every_s, self._stats_every_s, self._n_threads = emit_every_s, stats_every_s, n_threads
        self._details, self._logprob, self._margin = details, logprob, margin
        self._stops = [st for st in req.sampling.stop if st]
        self._live = req.live  # else the text goes out once, in close()
        self._hold = max((len(st) for st in self._stops), default=1) - 1
        self._preserved = set(req.preserved_tokens)  # a template's special tokens that the answer's text shows
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text, self._pending, self._unsent = "", "", ""
        self.tokens: list[int] = []
        self.margins: list[float] = []
        self._logprobs: list[p.TokenLogprob] = []  # the tokens not sent yet
        self._recent: deque[tuple[float, int]] = deque()  # (time, tokens generated): the last second of decode
        self._last_sent = self._last_stats = 0.0
        self.t_first = self.t_last = 0.0
        self.n_sampled = 0  # the end-of-generation token included: its decode step counts
        self.finish: p.FinishReason | None = None  # set once the answer ended
        self.n_ctx_used = n_prompt
        self._long_prompt, self._n_read = long_prompt or n_prompt, -1
        self.read(n_cached)

    @property
    def request_id(self) -> str:
        return self.req.request_id

    def read(self, n_done: int) -> None:
        """The prompt's reading went on (n_done of its tokens in the cache): a PromptProgress where
        it is long (more than `long_prompt` to read), once per change."""
        if self.n_prompt - self.n_cached > self._long_prompt and n_done != self._n_read:
            self._n_read = n_done
            t_ms = (time.perf_counter() - self.t0) * 1000
            self._emit(p.PromptProgress(self.request_id, self.n_prompt, self.n_cached, n_done, t_ms))

    def add(self, tok: int, context_full: bool) -> bool:
        """A sampled token; True when the answer ends with it (self.finish says why)."""
        now = time.perf_counter()
        self.t_first = self.t_first or now
        self.t_last = now
        self.n_sampled += 1
        if self._margin is not None:
            self.margins.append(self._margin())
        if self._source.is_end(tok):
            self.finish = p.FinishReason.STOP
            return True
        self.tokens.append(tok)
        self.n_ctx_used = self.n_prompt + len(self.tokens) - 1
        self._recent.append((now, len(self.tokens)))
        while len(self._recent) > 2 and self._recent[1][0] <= now - RECENT_S:
            self._recent.popleft()
        piece = self._source.piece(tok, tok in self._preserved)
        if self._logprob is not None:
            self._logprobs.append(self._logprob(tok, piece))
        self._pending += self._utf8.decode(piece)
        show, self._pending, hit = split_stop(self._pending, self._stops, self._hold)
        if show:
            self.text += show
            self._unsent += show
            if self._live and (not self._last_sent or now - self._last_sent >= self._emit_every_s):  # the first at once
                self._send(now)
        if hit:
            self.finish = p.FinishReason.STOP
            return True
        if self._live and now - self._last_stats >= self._stats_every_s:
            self._last_stats = now
            if self._unsent:  # the meter never counts text not yet shown
                self._send(now)
            self._emit(self.stats())
        s = self.req.sampling
        if s.max_tokens and len(self.tokens) >= s.max_tokens:
            self.finish = p.FinishReason.LENGTH
        elif context_full:
            self.finish = p.FinishReason.CONTEXT_FULL
        return self.finish is not None

    def cancel(self) -> None:
        self.finish = p.FinishReason.CANCELLED

    def _send(self, now: float) -> None:
        self._emit(p.Token(self.request_id, self._unsent, len(self.tokens) - 1, (now - self.t0) * 1000, self._logprobs))
        self._unsent, self._last_sent, self._logprobs = "", now, []

    def decode_tok_s(self) -> float:
        """Tokens sampled after the first over the time since it: the prompt's prefill never counts,
        and the end-of-generation token does, as the decode step it cost (llama-server counts it
        too: leaving it out read a 20-token answer 5% slow)."""
        n = self.n_sampled
        return (n - 1) / (self.t_last - self.t_first) if n > 1 and self.t_last > self.t_first else 0.0

    def stats(self) -> p.Stats:
        """ttft_ms and prefill_tok_s are 0 for an answer that got no token (stopped while its prompt was read)."""
        waited = self.t_first - self.t0 if self.t_first else 0.0
        n_gen = len(self.tokens)
        decode = self.decode_tok_s()
        (t_old, n_old), (t_new, n_new) = (self._recent[0], self._recent[-1]) if self._recent else ((0.0, 0), (0.0, 0))
        fields: dict[str, Any] = {"n_ctx_used": self.n_ctx_used, "n_threads": self._n_threads}
        if self._details is not None:
            fields.update(self._details(decode, n_gen))
        return p.Stats(
            request_id=self.request_id,
            n_prompt=self.n_prompt,
            n_prompt_cached=self.n_cached,
            n_generated=n_gen,
            ttft_ms=waited * 1000,
            prefill_tok_s=(self.n_prompt - self.n_cached) / max(waited, 1e-9) if waited else 0.0,
            decode_tok_s=decode,
            recent_tok_s=(n_new - n_old) / (t_new - t_old) if t_new > t_old else decode,
            **fields,
        )

    def close(self) -> None:
        """The last text, Stats and Done (finish: what ended it; an answer cut short by an error gets an Error instead)."""
        self._utf8.reset()  # a character cut by the end (max_tokens, cancel) is dropped, never shown as U+FFFD
        self.text += self._pending
        if self._unsent or self._pending or self._logprobs:  # a last Token may carry tokens and no text
            self._unsent += self._pending
            self._send(time.perf_counter())
        self._pending = ""
        self._emit(self.stats())
        finish = self.finish or p.FinishReason.CONTEXT_FULL  # the token stream ended on its own
        done = p.Done(self.request_id, finish, self.text, self.n_prompt, len(self.tokens), list(self.tokens), self.margins)
        self._emit(done)


def split_stop(pending: str, stops: list[str], hold: int) -> tuple[str, str, bool]:
    """(text safe to show, text held back because it may start a stop string, stop found)."""
    if not stops:
        return pending, "", False
    cut = min((i for i in (pending.find(st) for st in stops) if i >= 0), default=-1)
    if cut >= 0:
        return pending[:cut], "", True
    if hold <= 0:
        return pending, "", False
    # keep the longest tail that is a prefix of some stop string
    for k in range(min(hold, len(pending)), 0, -1):
        tail = pending[-k:]
        if any(st.startswith(tail) for st in stops):
            return pending[:-k], tail, False
    return pending, "", False
