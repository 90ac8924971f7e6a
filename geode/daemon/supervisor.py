"""One supervisor for every long-running task of ``geode serve``, and their health.

A long-running task (a platform's poller or gateway client, the channel pump, the lease
keeper, a connector's connect loop) runs under a :class:`TaskSupervisor`: when it dies, the
supervisor logs the death with its cause (error class and message; the traceback at most
once a minute per distinct error, see :func:`geode.logging.throttle_tracebacks`) and
starts it again after an exponential backoff with jitter. Nothing is left to end silently.

Each task reports what it is doing through its :class:`Component`: ``beat()`` when its work
succeeds (a ``getUpdates`` answered, a pump pass done, the leases renewed), ``down(why)``
when it fails and retries by itself. A loop that passes often (the pump, a poller: each
pass may carry a message) reports a pass that changes nothing as plain data, the time in
``last_beat`` (see :attr:`Component.last_beat`), and calls ``beat()`` only for what changes
(up again, a new detail): a chat message's walk makes no call into this module.
``/readyz`` reads :meth:`Component.status`: a component that is down, dead (restarting), or
whose last beat is older than its staleness bound is not ready, and the detail says which
and why. "The task exists" is never enough.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import structlog

__all__ = ["Backoff", "Component", "TaskSupervisor", "describe_error"]

log = structlog.get_logger(__name__)

State = Literal["starting", "up", "down", "restarting", "done", "stopped"]


def describe_error(exc: BaseException) -> str:
    """``ErrorClass: message`` on one line, bounded (what logs and /readyz show)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Exponential backoff with jitter: ``initial_s * factor**(attempt-1)``, capped at
    ``max_s``, times a random factor in ``[1 - jitter, 1 + jitter]`` (replicas that lost
    the same dependency at the same moment do not retry in lockstep)."""

    initial_s: float = 0.5
    max_s: float = 30.0
    factor: float = 2.0
    jitter: float = 0.3

    def delay(self, attempt: int, *, rand: Callable[[], float] = random.random) -> float:
        """The pause before retry number ``attempt`` (1 for the first retry)."""
        base = min(self.max_s, self.initial_s * self.factor ** max(0, attempt - 1))
        return max(0.0, base * (1.0 + self.jitter * (2.0 * rand() - 1.0)))


class Component:
    """The health of one supervised part, as ``/readyz`` shows it.

    Args:
        name: what ``/readyz`` calls it (``<platform>.poller``, ``<platform>.pump``).
        stale_after_s: a component that has not beaten for this long is not ready
            (None: no staleness bound, e.g. a connection that is either up or down).
        clock: monotonic seconds (tests).
    """

    def __init__(
        self, *, name: str, stale_after_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.stale_after_s = stale_after_s
        self.clock = clock
        self.state: State = "starting"
        self.detail = "starting"
        #: the time (``clock``) of the last beat. A loop whose component is already up with
        #: the detail it would give may write it directly, ``c.last_beat = c.clock()``: a
        #: pass reported as data, no call per pass (``beat()`` for a transition)
        self.last_beat: float | None = None
        self.since = clock()
        #: how many times its task died and was started again
        self.restarts = 0
        #: what the last failure was (``ErrorClass: message``), kept after recovery
        self.last_error: str | None = None

    def beat(self, detail: str | None = None) -> None:
        """The work succeeded just now (and is up, if it was down)."""
        if self.state != "up":
            if self.state in ("down", "restarting"):
                log.info("component.up", component=self.name, was=self.detail)
            self.state = "up"
            self.since = self.clock()
        if detail is not None:
            self.detail = detail
        elif self.detail.startswith(("starting", "down", "dead")):
            self.detail = "ok"
        self.last_beat = self.clock()

    def down(self, why: str) -> None:
        """The work fails and is being retried (``why`` says what and what happens next).
        Logs the transition only: a retry loop may call this on every attempt."""
        if self.state != "down":
            log.warning("component.down", component=self.name, why=why)
            self.since = self.clock()
        self.state = "down"
        self.detail = why
        self.last_error = why

    def status(self) -> tuple[bool, str]:
        """(ready, detail) for ``/readyz``."""
        now = self.clock()
        if self.state == "done":
            return True, self.detail
        if self.state != "up":
            return False, f"{self.state} for {now - self.since:.0f}s: {self.detail}"
        if self.stale_after_s is not None and self.last_beat is not None:
            age = now - self.last_beat
            if age > self.stale_after_s:
                return False, (f"stalled: no progress for {age:.0f}s "
                               f"(bound {self.stale_after_s:.0f}s); last: {self.detail}")
        return True, self.detail


#: a supervised task's body: runs until cancelled, reporting through its component
Body = Callable[[Component], Awaitable[None]]


class TaskSupervisor:
    """Runs named long-running tasks and keeps them running. See the module docstring.

    Args:
        backoff: the restart policy (a task that ran ``reset_after_s`` or beat since its
            start begins again from the first step).
        clock: monotonic seconds (tests).
    """

    #: a task that lived this long before dying restarts from the first backoff step
    reset_after_s = 60.0

    def __init__(
        self, *, backoff: Backoff | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.backoff = backoff or Backoff()
        self.clock = clock
        self._components: dict[str, Component] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def component(self, name: str, *, stale_after_s: float | None = None) -> Component:
        """A component reported on ``/readyz`` (created once; the same object after)."""
        comp = self._components.get(name)
        if comp is None:
            comp = Component(name=name, stale_after_s=stale_after_s, clock=self.clock)
            self._components[name] = comp
        else:
            comp.stale_after_s = stale_after_s
        return comp

    def components(self) -> list[Component]:
        return list(self._components.values())

    def spawn(
        self, name: str, body: Body, *, stale_after_s: float | None = None,
        once: bool = False, backoff: Backoff | None = None,
    ) -> Component:
        """Run ``body(component)`` as the task ``name``, restarted whenever it dies.

        ``once``: a body that returns normally has finished its job (a connect loop) and
        is not started again; otherwise returning is a death like raising (a poller that
        returns has stopped polling).
        """
        if name in self._tasks and not self._tasks[name].done():
            raise RuntimeError(f"task {name} is already running")
        comp = self.component(name, stale_after_s=stale_after_s)
        comp.state, comp.detail, comp.since = "starting", "starting", self.clock()
        self._tasks[name] = asyncio.create_task(
            self._keep(comp, body, once=once, backoff=backoff or self.backoff), name=name)
        return comp

    def task(self, name: str) -> asyncio.Task[None] | None:
        """The task that keeps ``name`` running (it outlives each death of the body)."""
        return self._tasks.get(name)

    def running(self, name: str) -> bool:
        task = self._tasks.get(name)
        return task is not None and not task.done()

    async def cancel(self, name: str) -> None:
        """Stop one task (and forget its component)."""
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()
            await _settled([task])
        comp = self._components.pop(name, None)
        if comp is not None:
            comp.state, comp.detail = "stopped", "stopped"

    async def stop(self) -> None:
        """Cancel every task and wait for them."""
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        await _settled(tasks)
        for comp in self._components.values():
            comp.state, comp.detail = "stopped", "stopped"

    async def _keep(self, comp: Component, body: Body, *, once: bool, backoff: Backoff) -> None:
        attempt = 0
        while True:
            started = self.clock()
            if comp.stale_after_s is None:
                comp.beat("running")  # no progress to report: alive is up
            beat_before = comp.last_beat
            error: Exception | None = None
            try:
                await body(comp)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every death is logged and restarted, never silent
                error = exc
            else:
                if once:
                    comp.state, comp.detail = "done", "done"
                    return
            lived = self.clock() - started
            attempt = 1 if lived >= self.reset_after_s or comp.last_beat != beat_before \
                else attempt + 1
            delay = backoff.delay(attempt)
            cause = describe_error(error) if error is not None else "returned (it must not)"
            comp.restarts += 1
            comp.last_error = cause
            comp.state, comp.since = "restarting", self.clock()
            comp.detail = f"dead ({cause}); restarting in {delay:.1f}s (attempt {attempt})"
            log.error("supervisor.task_died", component=comp.name, error=cause,
                      error_class=type(error).__name__ if error is not None else None,
                      lived_s=round(lived, 1), restart_in_s=round(delay, 2), attempt=attempt,
                      exc_info=error)
            await asyncio.sleep(delay)
            log.info("supervisor.task_restarting", component=comp.name, attempt=attempt)


async def _settled(tasks: list[asyncio.Task[None]]) -> None:
    """Wait for ``tasks`` to end and retrieve how each ended (never raises: a test's
    simulated crash, a BaseException, ended its task and is not re-raised in the stopper)."""
    if not tasks:
        return
    await asyncio.wait(tasks)
    for task in tasks:
        if not task.cancelled():
            error = task.exception()
            if error is not None:
                log.debug("supervisor.task_ended_with", task=task.get_name(),
                          error=describe_error(error))
