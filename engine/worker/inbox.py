"""What the worker's two threads share: the commands waiting for the model thread, and what a Cancel
changes at once. The command reader hands every command over here (`put`); the model thread
(WorkerCore) takes them in order. Light on purpose (no llama.cpp): the reader starts before the
engine's modules load."""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING

from engine import protocol as p
from engine.worker.stop_flag import StopFlag

if TYPE_CHECKING:
    from engine.worker.concurrent import ConcurrentAnswers


class Inbox:
    def __init__(self) -> None:
        self.commands: queue.Queue[p.Message] = queue.Queue()
        self.cancel = StopFlag()  # the one-at-a-time request's Stop, read mid-prefill by llama.cpp too
        self.current = ""  # the one-at-a-time request running now
        # requests cancelled by id: answers of the batched path, or one still waiting for its turn
        self.cancelled_ids: set[str] = set()
        self.stopping = threading.Event()  # Shutdown, or the client is gone
        self.batched: ConcurrentAnswers | None = None  # the loaded session's batched path, set by the model thread

    def put(self, msg: p.Message) -> None:
        """From the command reader: a Cancel acts now (it never waits behind the work it stops);
        anything else waits its turn, and a request that can join the answers decoded together
        stops the step under way."""
        if isinstance(msg, p.Cancel):
            if not msg.request_id or msg.request_id == self.current:
                self.cancel.set()
            if msg.request_id:
                self.cancelled_ids.add(msg.request_id)
            if (together := self.batched) is not None:
                together.stop_reading(msg.request_id)  # a prompt being read stops mid-batch
            return
        if isinstance(msg, p.Shutdown):
            self.stopping.set()
            self.cancel.set()
        self.commands.put(msg)
        if (together := self.batched) is not None:
            together.interrupt(msg)  # a request that can join stops the step under way

    def close(self) -> None:
        """The client is gone (the end of stdin): whatever runs stops, and the worker shuts down."""
        self.stopping.set()
        self.cancel.set()
        self.commands.put(p.Shutdown())
