"""The answers a worker loaded with n_parallel > 1 decodes together (EngineSession's batched path):
requests join the batch as they arrive, each step decodes one token of every answer being written
(and prompt chunks of new ones) in one llama_decode, and each answer streams and ends on its own."""

from __future__ import annotations

from collections.abc import Callable

from engine import protocol as p
from engine.llm.batched import Slot
from engine.worker.answer import AnswerStream, Emit
from engine.worker.session import EngineSession


class ConcurrentAnswers:
    def __init__(self, session: EngineSession, emit: Emit) -> None:
        self._session, self._emit = session, emit
        self._answers: dict[Slot, AnswerStream] = {}

    @property
    def busy(self) -> bool:
        return bool(self._answers)

    def has_room(self) -> bool:
        batch = self._session.batch
        return batch is not None and batch.free > 0

    def interrupt(self, req: p.Message) -> None:
        """From the command reader: a request that can join the answers being decoded stops the step
        under way (BatchedVanilla.interrupt) instead of waiting it out."""
        batch = self._session.batch
        if (
            batch is not None and self._answers and batch.free > 0
            and isinstance(req, p.Generate) and self._session.can_batch(req)
        ):  # fmt: skip
            batch.interrupt()

    def stop_reading(self, request_id: str) -> None:
        """From the command reader: a Cancel for an answer whose prompt is still being read stops
        the step under way (BatchedVanilla.stop_reading) instead of waiting out its batch."""
        batch = self._session.batch
        reading = [a for s, a in list(self._answers.items()) if s.n_fed < len(s.prompt)]
        if batch is not None and any(not request_id or a.request_id == request_id for a in reading):
            batch.stop_reading()

    def rearm(self) -> None:
        """Before new requests are looked for: only a request that comes after this stops the next step."""
        if self._session.batch is not None:
            self._session.batch.rearm()

    def admit(self, req: p.Generate, t0: float) -> None:
        """Start the request beside the others; raises as EngineSession.generate does for a refusal."""
        slot, answer = self._session.start_batched(req, self._emit, t0)
        self._answers[slot] = answer

    def step(self, cancelled: Callable[[str], bool]) -> list[str]:
        """Answers whose client cancelled end first, then one decode; the request ids that ended."""
        ended = [self._end(slot) for slot, answer in list(self._answers.items()) if cancelled(answer.request_id)]
        if not self._answers:
            return ended
        reading = [(s, a) for s, a in self._answers.items() if s.n_fed < len(s.prompt)]
        try:
            sampled = self._session.batch_step()
        except RuntimeError as exc:
            return ended + self.fail(str(exc))
        for slot, answer in reading:  # the last batch read too (all of it: its first token comes now)
            answer.read(slot.n_fed)
        for slot, tok, full in sampled:
            if self._answers[slot].add(tok, full):
                ended.append(self._end(slot))
        return ended

    def cancel_all(self) -> list[str]:
        return [self._end(slot) for slot in list(self._answers)]

    def fail(self, why: str) -> list[str]:
        """Every answer ends with an Error (llama.cpp failed the batch)."""
        ended = []
        for slot, answer in list(self._answers.items()):
            self._session.batch.finish(slot)  # type: ignore[union-attr]
            del self._answers[slot]
            self._emit(p.Error(answer.request_id, p.ErrorKind.INTERNAL, f"generation failed: {why}"))
            ended.append(answer.request_id)
        return ended

    def _end(self, slot: Slot) -> str:
        answer = self._answers.pop(slot)
        if answer.finish is None:
            answer.cancel()
        self._session.batch.finish(slot)  # type: ignore[union-attr]
        answer.close()
        return answer.request_id
