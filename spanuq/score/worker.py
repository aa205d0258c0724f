"""The lanes of `spanuq serve`: bounded queues, each drained in order by its own thread.

* the **answer lane** scores given answers (every request of the job has a ``response``): cheap
  work, one teacher-forced pass, that never waits behind a generation;
* the **generation lane** runs everything that makes the backbone answer: ``/score`` without a
  response, streams, ``/v1/chat/completions``, ``/refine`` (and a ``/score/batch`` that mixes both).

Both share one `SpanUQ`, whose ``lock`` is held for model work only (a teacher-forced pass, the
probe, transformers' decoding), never while the llama.cpp server generates: a given answer waits
at most for one such piece, not for a whole generation.  Scoring requests waiting together in a
lane are scored together, up to ``score.micro_batch`` at a time (`SpanUQ.score_many`: one batched
teacher-forced pass); a stream or a call (refine) runs by itself, in its turn.  A full lane is a
503; nothing a job does can stop a lane: an unexpected failure answers that job (or batch) only.
A stream's ``cancel`` event (set when its client leaves) stops its generation at the next token.

Memory: each answer's pass allocates tensors of its own shape, from whichever thread runs it, and
glibc keeps what is freed in per-thread arenas, so a long-running service's RSS creeps up with no
object kept alive.  `ScoringWorker` caps glibc at two arenas (``mallopt(M_ARENA_MAX, 2)``, before its
threads start) and hands freed memory back (``malloc_trim(0)``) whenever a lane runs dry;
`benchmarks/bench_lanes.py` measures RSS over a long mixed soak.  Elsewhere (not glibc) both are no-ops.
""" 
from __future__ import annotations

import ctypes
import ctypes.util
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


M_ARENA_MAX = -8  # glibc's mallopt parameter


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None
    except OSError:
        return None


LIBC = _libc()


def cap_arenas(n: int = 2) -> None:
    """At most ``n`` glibc malloc arenas for this process (threads share them instead of each growing one)."""
    if LIBC is not None:
        LIBC.mallopt(M_ARENA_MAX, n)


def release_memory() -> None:
    """Hand the heap's freed pages back to the system (glibc ``malloc_trim``)."""
    if LIBC is not None:
        LIBC.malloc_trim(0)


class QueueFull(Exception):
    """The queue holds ``max_queue`` jobs: retry later (the service answers 503)."""


class ScoringWorker:
    """The two lanes (module docstring); `submit` returns a Future of per-item results."""

    def __init__(self, uq, micro_batch: int = 8, max_queue: int = 256):
        self.uq, self.micro_batch = uq, max(1, micro_batch)
        self.q: queue.Queue = queue.Queue(maxsize=max_queue)  # the generation lane
        self.answers: queue.Queue = queue.Queue(maxsize=max_queue)  # the answer lane: given answers
        self.batches = 0
        self.streams = {"done": 0, "cancelled": 0, "failed": 0}  # how the streams ended
        cap_arenas()  # before the lanes' threads allocate (module docstring)
        self._threads = [threading.Thread(target=self._run, args=(lane,), name=f"spanuq-{name}", daemon=True)
                         for name, lane in (("generate", self.q), ("answers", self.answers))]
        for t in self._threads:
            t.start()

    def queued(self) -> dict:
        return {"answers": self.answers.qsize(), "generate": self.q.qsize()}

    def submit(self, reqs: list[ScoreRequest]) -> Future:
        """Given answers go to the answer lane; a job with any answer to generate, to the generation lane."""
        return self._put(self.answers if all(r.response is not None for r in reqs) else self.q, reqs)

    def call(self, fn) -> Future:
        """Run ``fn(uq)`` on the generation lane, in queue order (a job that is not a scoring batch: refine)."""
        return self._put(self.q, fn)

    def _put(self, lane: queue.Queue, job) -> Future:
        fut: Future = Future()
        try:
            lane.put_nowait((job, fut))
        except queue.Full:
            raise QueueFull(f"the service is busy ({lane.maxsize} requests waiting); retry later") from None
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

    def _run(self, lane: queue.Queue) -> None:
        while True:
            if lane.empty():
                release_memory()  # the lane ran dry: give what its jobs freed back (module docstring)
            job = lane.get()
            if job is None:
                return
            if self._alone(job):
                self._run_alone(job)
                continue
            jobs, later = [job], None
            while len(jobs) < self.micro_batch:
                try:
                    nxt = lane.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    lane.put(None)
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
        for lane in (self.q, self.answers):
            lane.put(None)
        for t in self._threads:
            t.join(timeout=30)


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
