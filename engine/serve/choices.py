"""A request's n answers (OpenAI's `n`): one Generation each, their events merged as (index, event).

Each choice is a request of its own to the bridge, so the worker decodes them together where it
batches (vanilla and ngram with --parallel > 1) and one after another otherwise (each later one then
finds the prompt in the cache). The first choice is started (and its refusal raised) before the
response begins; the others are started as their turns come, while the first streams.

Seeds: choice i samples with seed + i (modulo 2^32) when the request gives a seed, so a seeded
request repeats and its choices still differ; without a seed each choice draws its own. With
temperature 0 every choice is the same greedy answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable

from engine import protocol as p
from engine.serve.bridge import Generation
from engine.serve.errors import ApiError

Start = Callable[[p.Generate], Awaitable[Generation]]


def nth_request(generate: p.Generate, i: int) -> p.Generate:
    """Choice i's request: the same prompt and settings, its own id and (seeded) seed + i."""
    if i == 0:
        return generate
    seed = generate.sampling.seed
    sampling = dataclasses.replace(generate.sampling, seed=(seed + i) % 2**32 if seed >= 0 else -1)
    return dataclasses.replace(generate, request_id="", sampling=sampling)


class Choices:
    def __init__(self, first: Generation, generate: p.Generate, n: int, start: Start) -> None:
        """first: choice 0, started; start(request): a later choice's Generation (ApiError for a refusal)."""
        self.first, self.n = first, n
        self._generate, self._start = generate, start
        self._generations: list[Generation] = [first]
        self._tasks: list[asyncio.Task[None]] = []
        self._queue: asyncio.Queue[tuple[int, p.Message | ApiError | None]] = asyncio.Queue()

    @property
    def request_id(self) -> str:
        return self.first.request_id

    async def events(self) -> AsyncIterator[tuple[int, p.Message]]:
        """(choice index, event) of every choice up to each one's Done; the first Error raises ApiError."""
        if self.n == 1:  # no tasks: the events as they come
            async for msg in self.first.events():
                yield 0, msg
            return
        self._tasks = [asyncio.ensure_future(self._pump(i)) for i in range(self.n)]
        running = self.n
        while running:
            i, item = await self._queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, ApiError):
                raise item
            else:
                yield i, item

    async def _pump(self, i: int) -> None:
        generation: Generation | None = self.first if i == 0 else None
        try:
            if generation is None:
                generation = await self._start(nth_request(self._generate, i))
                self._generations.append(generation)
            async for msg in generation.events():
                self._queue.put_nowait((i, msg))
        except ApiError as exc:
            self._queue.put_nowait((i, exc))
        finally:
            if generation is not None:
                generation.close()
            self._queue.put_nowait((i, None))

    def close(self) -> None:
        """Synchronous (it runs where the caller is being cancelled): unfinished choices are cancelled."""
        for task in self._tasks:
            task.cancel()
        for generation in self._generations:
            generation.close()
