"""The one thread that owns the model in `spanuq serve`: a bounded queue of jobs, drained in order.

Scoring requests waiting together are scored together, up to ``score.micro_batch`` at a time
(`SpanUQ.score_many`: one batched teacher-forced pass for given answers); a stream or a call
(refine) runs by itself, in its turn.  A full queue is a 503; nothing a job does can stop
the thread: an unexpected failure answers that job (or batch) only.  A stream's ``cancel``
event (set when its client leaves) stops its generation at the next token.
"""
from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future

from .errors import GenerationError, InputError
from .schema import ScoreRequest

log = logging.getLogger(__name__)


def loop_emitter(loop, events, on_closed):
    """``emit(item)`` for the worker thread: puts ``item`` on ``events``, an asyncio queue of ``loop``;
    once the loop has closed (shutdown: nobody is listening) it calls ``on_closed()`` instead."""

    def emit(item) -> None:
        try:
            loop.call_soon_threadsafe(events.put_nowait, item)
        except RuntimeError:
            on_closed()

    return emit


class QueueFull(Exception):
    """The queue holds ``max_queue`` jobs: retry later (the service answers 503)."""


class ScoringWorker:
    """The one thread that owns the model; `submit` returns a Future of per-item results."""

    def __init__(self, uq, micro_batch: int = 8, max_queue: int = 256):
        self.uq, self.micro_batch = uq, max(1, micro_batch)
        self.q: queue.Queue = queue.Queue(maxsize=max_queue)
        self.batches = 0
        self.streams = {"done": 0, "cancelled": 0, "failed": 0}  # how the streams ended
        self._thread = threading.Thread(target=self._run, name="spanuq-worker", daemon=True)
        self._thread.start()

    def submit(self, reqs: list[ScoreRequest]) -> Future:
        return self._put(reqs)

    def call(self, fn) -> Future:
        """Run ``fn(uq)`` on the worker thread, in queue order (a job that is not a scoring batch: refine)."""
        return self._put(fn)

    def _put(self, job) -> Future:
        fut: Future = Future()
        try:
            self.q.put_nowait((job, fut))
        except queue.Full:
            raise QueueFull(f"the service is busy ({self.q.maxsize} requests waiting); retry later") from None
        return fut

    def submit_stream(self, job: "StreamJob") -> None:
        try:
            self.q.put_nowait(job)
        except queue.Full:
            raise QueueFull(f"the service is busy ({self.q.maxsize} requests waiting); retry later") from None

    @staticmethod
    def _alone(job) -> bool:
        """A stream or a call (refine) runs by itself, in its turn; scoring requests are batched."""
        return isinstance(job, StreamJob) or callable(job[0])

    def _run_alone(self, job) -> None:
        if isinstance(job, StreamJob):
            self.streams[job.run(self.uq)] += 1
        else:
            self._call(*job)

    def _call(self, fn, fut: Future) -> None:
        try:
            fut.set_result(fn(self.uq))
        except Exception as e:  # noqa: BLE001 - answers this request, the worker lives on
            fut.set_exception(e)

    def _run(self) -> None:
        while True:
            job = self.q.get()
            if job is None:
                return
            if self._alone(job):
                self._run_alone(job)
                continue
            jobs, later = [job], None
            while len(jobs) < self.micro_batch:
                try:
                    nxt = self.q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self.q.put(None)
                    break
                if self._alone(nxt):  # run after this batch, in its turn
                    later = nxt
                    break
                jobs.append(nxt)
            self._batch(jobs)
            if later is not None:
                self._run_alone(later)

    def _batch(self, jobs: list) -> None:
        reqs = [r for rs, _ in jobs for r in rs]
        try:
            out = self.uq.score_many(reqs, progress=False, return_errors=True)
        except Exception as e:  # noqa: BLE001 - a failure answers this batch, the worker lives on
            log.exception("scoring failed")
            for _, fut in jobs:
                fut.set_exception(e)
            return
        self.batches += 1
        k = 0
        for rs, fut in jobs:
            fut.set_result(out[k: k + len(rs)])
            k += len(rs)

    def close(self) -> None:
        self.q.put(None)
        self._thread.join(timeout=30)


class StreamJob:
    """One streamed answer: the worker runs `SpanUQ.score_stream` and hands each update (then an
    error, if any, then None) to ``emit``; ``cancel`` (set when the client leaves) stops it."""

    def __init__(self, prompt: str, emit, cancel: threading.Event | None = None, context: list | None = None):
        self.prompt, self.emit, self.context = prompt, emit, context
        self.cancel = cancel or threading.Event()

    def run(self, uq) -> str:
        """Stream the answer; says how it ended: ``done``, ``cancelled`` or ``failed``."""
        outcome = "cancelled"
        try:
            if not self.cancel.is_set():  # nobody is left to read it when the client left while it waited
                for update in uq.score_stream(self.prompt, cancel=self.cancel, context=self.context):
                    self.emit(update)
                    if update.done:
                        outcome = "done"
                    if self.cancel.is_set():
                        break
        except Exception as e:  # noqa: BLE001 - the stream ends with its error, the worker lives on
            if not isinstance(e, (InputError, GenerationError)):
                log.exception("streaming failed")
            self.emit(e)
            outcome = "failed"
        finally:
            self.emit(None)
        return outcome
