"""``geode serve``: the daemon that hosts every unattended and remote entry point.

One asyncio process, one :class:`~geode.daemon.runtime.Runtime` and one
:class:`~geode.daemon.lanes.LaneQueue` shared by all of:

* the IPC socket ``$GEODE_HOME/cli.sock`` for ``geode ask`` (IPC mode);
* the channel connectors slot (DAEMON mode; objects with ``async start()``,
  ``async stop()`` and a ``ready`` flag, added with :meth:`Daemon.add_connector`);
* the scheduler (SCHEDULER mode);
* the loopback health endpoint (``/healthz``, ``/readyz``, ``/metrics``).

Every turn goes through :meth:`Daemon.run_turn`: lanes first, then the session factory,
then the loop. Connectors call it too, so their turns count against the same global cap.

Shutdown (SIGTERM / SIGINT): stop intake (socket closed for new connections, scheduler
stops claiming, connectors stop), let running turns finish for up to ``drain_timeout_s``,
then stop the rest (each ends ``cancelled`` and is checkpointed ``paused``), close the
store, remove the socket, exit 0. A SIGKILL loses no record: every round is checkpointed
and effects carry receipts (the records issue).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import secrets
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import structlog
from prometheus_client import CollectorRegistry

from geode.daemon.display import ComputerDisplay, open_computer_display
from geode.daemon.health import HealthServer
from geode.daemon.ipc import Connection, HomeLock, IPCServer, RunRequest
from geode.daemon.lanes import LaneKind, LaneQueue, QueueObserver
from geode.daemon.metrics import DaemonMetrics, EventCounters
from geode.daemon.port import Admission, SessionStatus, TurnOutcome
from geode.daemon.runtime import Runtime
from geode.daemon.scheduler import Job, JobStore, Scheduler
from geode.daemon.session import Session, SessionContext
from geode.daemon.supervisor import Component, TaskSupervisor
from geode.errors import ConfigError, NotAdmitted, ShuttingDown
from geode.hooks.events import ObservedEvent
from geode.loop import TurnResult
from geode.messages import ImageBlock
from geode.providers.base import BaseProvider
from geode.settings import Secrets, Settings, SpendCaps
from geode.store.database import Database
from geode.store.space import volume_problem
from geode.voice import Speaker, Transcriber, voice_speaker, voice_transcriber

__all__ = ["Connector", "Daemon", "ProviderFactory"]

_Counters = TypeVar("_Counters", bound=EventCounters)

log = structlog.get_logger(__name__)

#: builds a fresh model adapter per session (``--demo``, GEODE_SCRIPTED_MODEL)
ProviderFactory = Callable[[], BaseProvider]


@runtime_checkable
class Connector(Protocol):
    """A channel connector hosted by the daemon (one per configured chat platform)."""

    @property
    def ready(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@runtime_checkable
class Supervised(Protocol):
    """A connector whose long-running tasks run under its own :class:`TaskSupervisor`;
    their components are reported on ``/readyz``."""

    supervisor: TaskSupervisor


@runtime_checkable
class Quiesces(Protocol):
    """A connector that can stop taking work while its running turns finish and deliver
    (SIGTERM's drain); ``idle`` once nothing of it runs."""

    async def quiesce(self) -> None: ...

    @property
    def idle(self) -> bool: ...


@runtime_checkable
class DescribesReadiness(Protocol):
    """A connector that says why it is not ready (``/readyz``'s ``connectors`` detail)."""

    def readiness(self) -> tuple[bool, str]: ...


class Daemon:
    """The ``geode serve`` process. ``await daemon.start()``, then ``serve_forever()``."""

    def __init__(
        self,
        *,
        settings: Settings,
        secrets: Secrets,
        provider_factory: ProviderFactory | None = None,
        workspace: Path | None = None,
        drain_timeout_s: float = 30.0,
        approval_timeout_s: float = 120.0,
        scheduler_tick_s: float = 1.0,
        runtime_kw: dict[str, Any] | None = None,
        settle_heap: bool = False,
        provider_label: str = "",
    ) -> None:
        """``settle_heap``: once started, freeze what startup allocated out of the cyclic
        garbage collector's scans (``geode serve`` sets it; see :func:`_settle_heap`).
        ``provider_label``: what ``provider_factory`` is, for the banner (``offline demo
        model``)."""
        self.settings = settings
        self.secrets = secrets
        self.provider_factory = provider_factory
        self.workspace = (workspace or settings.home / "workspace").resolve()
        self.drain_timeout_s = drain_timeout_s
        self.approval_timeout_s = approval_timeout_s
        self.scheduler_tick_s = scheduler_tick_s
        self.runtime_kw = runtime_kw or {}
        self.settle_heap = settle_heap
        self.provider_label = provider_label
        #: (usable, what or why not) of the default model; decided once at start (the
        #: credentials are read then), shown by /readyz and the banner
        self.model_status: tuple[bool, str] = (False, "not started")
        self.metrics = DaemonMetrics()
        self.lanes = LaneQueue.from_settings(settings.lanes, on_wait=self.metrics.lane_waited)
        self.socket_path = settings.home / "cli.sock"
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets_token()}"
        self.connectors: list[Connector] = []
        self.runtime: Runtime | None = None
        self.ipc: IPCServer | None = None
        self.health: HealthServer | None = None
        self.scheduler: Scheduler | None = None
        #: the X display of computer-use bindings (None: no binding enables computer use)
        self.computer: ComputerDisplay | None = None
        #: voice notes' transcriber (``[voice]``; None: voice notes are saved, unread)
        self.transcriber: Transcriber | None = voice_transcriber(settings.voice, secrets)
        #: answers' speaker (``[voice] tts_model``; None: no answer is spoken)
        self.speaker: Speaker | None = voice_speaker(settings.voice, secrets)
        self.draining = False
        self._lock = HomeLock(home=settings.home, socket_path=self.socket_path)
        self._stop: asyncio.Event | None = None
        #: a stop asked for before :meth:`start` made ``_stop`` (a signal during start)
        self._stop_early = False
        self._active: dict[asyncio.Task[Any], Session | None] = {}
        self._started = False
        #: the daemon's own long-running tasks (the scheduler); connectors have theirs
        self.supervisor = TaskSupervisor()
        #: the store's answer to the last readiness ping (its transitions are logged)
        self._store_up = True

    @property
    def home(self) -> Path:
        return self.settings.home

    # -- what hosted connectors use (bots.port.TurnHost): exactly these, never the runtime --

    @property
    def database(self) -> Database | None:
        """The database the channel records are built on (None until :meth:`start`)."""
        return self.runtime.store if self.runtime is not None else None

    def publish(self, event: ObservedEvent) -> None:
        """Tell the daemon's observers (shell hooks, plugins, traces) of a channel's event;
        they decide nothing. Before the store opened, nobody listens."""
        if self.runtime is not None:
            self.runtime.observers.publish(event)

    def add_metrics(self, build: Callable[[CollectorRegistry], _Counters]) -> _Counters:
        """A hosted layer's counters on this daemon's ``/metrics``, built once on the
        daemon's registry however many connectors ask (:meth:`DaemonMetrics.extend`) and
        handed back: the layer increments them itself, where its events happen (they
        observe nothing :meth:`publish` carries)."""
        return self.metrics.extend(build)

    @property
    def channel_capacity(self) -> int:
        """Channel turns this process may run at once (its ``[lanes]`` channel and global
        caps)."""
        lanes = self.settings.lanes
        return min(lanes.channel_cap, lanes.global_cap)

    # -- wiring ------------------------------------------------------------------------

    def add_connector(self, connector: Connector) -> None:
        """Host a channel connector; started with the daemon, stopped first at shutdown."""
        if self._started:
            raise RuntimeError("add connectors before Daemon.start()")
        self.connectors.append(connector)

    async def start(self) -> None:
        """Take the home lock, open the store (migrating it), then open every intake."""
        self._stop = asyncio.Event()
        if self._stop_early:  # SIGTERM came while it started: it stops once started
            self._stop.set()
        self._lock.acquire()
        self._started = True
        try:
            self.workspace.mkdir(parents=True, exist_ok=True)
            # before any connector: a computer-use turn may start as soon as one polls
            self.computer = await open_computer_display(self.settings)
            kw = dict(self.runtime_kw)
            if "mcp" not in kw and self.settings.mcp:
                from geode.mcp import MCPServerManager

                kw["mcp"] = MCPServerManager.from_settings(self.settings, self.secrets)
            self.runtime = await Runtime.create(settings=self.settings, secrets=self.secrets,
                                                **kw)
            await self._finish_rewinds(self.runtime)
            self.runtime.observers.subscribe_loop(self.metrics.on_loop_event,
                                                  only=DaemonMetrics.LOOP_EVENTS)
            self.runtime.observers.subscribe_events(self.metrics.on_event,
                                                    only=DaemonMetrics.EVENTS)
            self.model_status = self._check_model(self.runtime)
            if not self.model_status[0]:
                log.warning("daemon.model_not_ready", reason=self.model_status[1])
            self.ipc = IPCServer(
                path=self.socket_path, handler=self._handle_ipc,
                approval_timeout_s=self.approval_timeout_s,
                on_protocol_error=self.metrics.ipc_errors.inc,
            )
            await self.ipc.start()
            self.health = HealthServer(
                metrics=self.metrics,
                checks={"store": self._store_ready, "connectors": self._connectors_ready,
                        "intake": self._intake_ready, "model": self._model_ready,
                        **({"display": self._display_ready} if self.computer else {})},
                port=self.settings.health_port,
                host=self.settings.health_host,
                components=self.components,
            )
            await self.health.start()
            for c in self.connectors:
                await c.start()
            assert self.runtime.store is not None  # Runtime.create opened it
            self.scheduler = Scheduler(
                jobs=JobStore(store=self.runtime.store), run_job=self._run_job,
                owner=self.owner, tick_s=self.scheduler_tick_s,
            )
            # under the supervisor (not Scheduler.start's bare task): a death is logged and
            # restarted, and /readyz says when the scheduler stops ticking
            self.supervisor.spawn("scheduler", self._schedule,
                                  stale_after_s=max(60.0, 30 * self.scheduler_tick_s))
        except BaseException:
            await self._close_all()
            raise
        if self.settle_heap:
            _settle_heap()
        log.info("daemon.started", socket=str(self.socket_path),
                 health_port=self.health.port if self.health else None)

    def request_stop(self) -> None:
        """Begin a graceful shutdown (the SIGTERM/SIGINT handler; before or during
        :meth:`start` too: the daemon then stops as soon as it has started)."""
        if self._stop is not None:
            self._stop.set()
        else:
            self._stop_early = True

    def take_signals(self) -> None:
        """From now on SIGTERM / SIGINT begin a graceful shutdown (``geode serve`` calls it
        before :meth:`start`, so a signal while it starts is not the default, abrupt exit;
        :meth:`serve_forever` removes the handlers when it ends)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)

    async def serve_forever(self) -> None:
        """Run until SIGTERM/SIGINT (or :meth:`request_stop`), then shut down gracefully."""
        assert self._stop is not None, "call start() first"
        loop = asyncio.get_running_loop()
        self.take_signals()
        try:
            await self._stop.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await self.shutdown()

    async def shutdown(self) -> None:
        """Stop intake, drain running turns (bounded), stop the rest, release the home."""
        if self.draining:
            return
        self.draining = True
        log.info("daemon.draining", running=len(self._active))
        if self.ipc is not None:
            await self.ipc.stop_accepting()
        await self.supervisor.cancel("scheduler")
        if self.scheduler is not None:
            await self.scheduler.stop()
        # Connectors first stop taking work but keep delivering: a channel turn running now
        # finishes and its answer goes out within the drain bound (stopping the connector
        # first cancelled it, to be resumed only at the next start).
        for c in reversed(self.connectors):
            if isinstance(c, Quiesces):
                try:
                    await c.quiesce()
                except Exception:
                    log.warning("connector.quiesce_failed", connector=type(c).__name__,
                                exc_info=True)
        finished = await self._wait_drained(self.drain_timeout_s)
        # What still runs past the bound is stopped with its connector: a channel turn is
        # cancelled mid-flight and resumed from its checkpoint at the next start.
        for c in reversed(self.connectors):
            try:
                await c.stop()
            except Exception:
                log.warning("connector.stop_failed", connector=type(c).__name__, exc_info=True)
        if not finished:
            finished = await self._wait_active(0.0)
        if not finished:
            # Past the bound: stop each turn; the loop ends it `cancelled` and checkpoints
            # it `paused`, so the next turn of the session resumes from there.
            log.warning("daemon.drain_timeout", still_running=len(self._active))
            for session in list(self._active.values()):
                if session is not None:
                    session.cancel()
            await self._wait_active(10.0)
        if self.ipc is not None:
            await self.ipc.wait_runs(2.0)  # let final result frames go out
        await self._close_all()
        log.info("daemon.stopped")

    async def _wait_drained(self, timeout_s: float) -> bool:
        """Until no turn runs here and every quiesced connector is idle (its answers
        delivered), or ``timeout_s``; whether it drained."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            if not self._active and all(c.idle for c in self.connectors
                                        if isinstance(c, Quiesces)):
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.05)

    async def _wait_active(self, timeout_s: float) -> bool:
        if not self._active:
            return True
        _done, pending = await asyncio.wait(set(self._active), timeout=timeout_s)
        return not pending

    async def _close_all(self) -> None:
        if self.ipc is not None:
            for task in list(self.ipc.runs):
                task.cancel()  # only lane waiters are left here; cancelling frees them
            await self.ipc.close()
        await self.supervisor.stop()
        if self.scheduler is not None:
            await self.scheduler.stop()
        if self.health is not None:
            await self.health.stop()
        if self.runtime is not None:
            await self.runtime.observers.drain()
            with contextlib.suppress(Exception):
                await self.runtime.aclose()
            self.runtime = None
        computer, self.computer = self.computer, None
        if computer is not None:  # after the turns: none may still use the display
            await computer.aclose()
        self._lock.release()

    # -- readiness -----------------------------------------------------------------------

    def components(self) -> list[Component]:
        """Every supervised component of this process (the connectors' tasks), for /readyz."""
        return [*self.supervisor.components(),
                *(comp for c in self.connectors if isinstance(c, Supervised)
                  for comp in c.supervisor.components())]

    async def _schedule(self, health: Component) -> None:
        """The scheduler's loop: it wakes when a job is due (see :meth:`Scheduler.run`). A
        store error is one line and /readyz says so; the next pass retries."""
        scheduler = self.scheduler
        assert scheduler is not None
        await scheduler.run(health)

    async def _store_ready(self) -> tuple[bool, str]:
        store = self.runtime.store if self.runtime is not None else None
        if store is None:
            return False, "no store"
        # reads (the ping) still work on a full volume: say so, or it looks ready
        full = volume_problem(store.where) if store.dialect == "sqlite" else None
        if full is not None:
            return False, full
        ok = bool(await store.ping())
        # the transitions are logged, not every failed probe (a 10 s outage under a 1 s
        # probe used to print a line a probe)
        if ok != self._store_up:
            if ok:
                log.info("store.up", where=store.where)
            else:
                log.warning("store.down", where=store.where)
            self._store_up = ok
        return ok, store.where if ok else f"{store.where} does not answer"

    async def _connectors_ready(self) -> tuple[bool, str]:
        down = []
        for c in self.connectors:
            if isinstance(c, DescribesReadiness):
                ready, why = c.readiness()
                if not ready:
                    down.append(why)
            elif not c.ready:
                down.append(type(c).__name__)
        if down:
            return False, "not ready: " + "; ".join(down)
        return True, f"{len(self.connectors)} connector(s)"

    async def _intake_ready(self) -> tuple[bool, str]:
        return (False, "draining") if self.draining else (True, "accepting")

    async def _display_ready(self) -> tuple[bool, str]:
        computer = self.computer
        if computer is None:
            return False, "stopped"
        if computer.supervisor is None:
            return True, f"{computer.name} (configured)"
        if computer.supervisor.pid is None:
            return False, f"Xvfb {computer.name} is down (being restarted)"
        return True, f"Xvfb {computer.name} (pid {computer.supervisor.pid})"

    async def _model_ready(self) -> tuple[bool, str]:
        return self.model_status

    def _check_model(self, runtime: Runtime) -> tuple[bool, str]:
        """Can sessions without a model of their own (the default) get one? The checks a
        turn's adapter build makes (model, path, credential, endpoint), without building it:
        the SDK (~40 MB, ~0.5 s of CPU for openai) is imported by the first turn."""
        if self.provider_factory is not None:
            return True, self.provider_label or "a model given in code"
        default = self.settings.model.default
        try:
            runtime.check_provider(runtime.resolve(None))
        except ConfigError as exc:
            return False, str(exc)
        return True, default

    # -- turns ---------------------------------------------------------------------------

    async def run_turn(
        self,
        ctx: SessionContext,
        prompt: str,
        *,
        kind: LaneKind,
        lane_key: str | None = None,
        admit: Admission | None = None,
        on_session: Callable[[Session], Awaitable[None]] | None = None,
        turn_id: str | None = None,
        resume: bool = False,
        images: Sequence[ImageBlock] = (),
        on_queued: QueueObserver | None = None,
        queue_order: int | None = None,
    ) -> TurnResult:
        """Run one turn under the lanes; the entry point for IPC, scheduler and connectors.

        Args:
            ctx: the session context (mode, session id, approver, event sink, ...).
            prompt: the user's message.
            kind: lane kind (``cli``, ``channel``, ``scheduler``) for the sub-limit.
            lane_key: session lane key when ``ctx.session_id`` is None (a new session).
            admit: asked once the turn holds its lanes, before its session opens: False
                and it does not run (a channel's queued message dropped meanwhile).
            on_session: awaited once the session is open: the daemon's own entry points'
                (IPC's cancel, the scheduler's timeline row); not on the harness port.
            turn_id: the loop turn's id, when the caller recorded one beforehand.
            resume: continue the interrupted turn ``turn_id`` from its last checkpoint
                (``prompt`` is not used: the user's message is in the chain).
            images: image content sent with the prompt (a channel message's images).
            on_queued: given, the turn waits for its lanes without a bound (its caller
                keeps it queued durably) and is told how many wait ahead of it.
            queue_order: its place among waiting turns of its kind (a durable arrival id).

        What the turn does comes back through ``ctx.on_event`` (typed loop events, the
        first one ``TurnStarted``); :meth:`stop_turn` stops it.

        Raises:
            LaneBusy: the lanes stayed full for the wait bound (never with ``on_queued``).
            NotAdmitted: ``admit`` said no.
            ShuttingDown: the daemon is draining.
        """
        if self.draining or self.runtime is None:
            raise ShuttingDown()
        key = ctx.session_id or lane_key or f"new-{secrets_token()}"
        entered = time.monotonic()
        async with self.lanes.acquire(key, kind=kind, wait=on_queued is None,
                                      on_queued=on_queued, order=queue_order):
            if self.draining or self.runtime is None:
                raise ShuttingDown()
            if admit is not None and not await admit():
                raise NotAdmitted()
            began = time.monotonic()
            if ctx.provider is None and self.provider_factory is not None:
                ctx = dataclasses.replace(ctx, provider=self.provider_factory())
            task = asyncio.current_task()
            assert task is not None
            self._active[task] = None
            try:
                session = await self.runtime.open_session(ctx)
                self._active[task] = session
                if on_session is not None:
                    await on_session(session)
                if resume and turn_id:
                    result = await session.resume(turn_id)
                else:
                    result = await session.run(prompt, turn_id=turn_id, images=images)
            finally:
                self._active.pop(task, None)
        _log_turn(result, kind=kind, resumed=resume, entered=entered, began=began)
        return result

    def stop_turn(self, session_id: str) -> bool:
        """Stop the turn running in ``session_id`` (``/stop``): it ends ``cancelled``, its
        checkpoint saved. False: none runs there now (its loop not started yet, or ended)."""
        for session in self._active.values():
            if session is not None and session.session_id == session_id:
                return session.cancel()
        return False

    async def turn_outcome(self, session_id: str, turn_id: str) -> TurnOutcome:
        """What the checkpoint chain says about one turn (see :class:`TurnOutcome`)."""
        return await self._open_runtime().turn_outcome(session_id, turn_id)

    async def session_status(self, session_id: str) -> SessionStatus:
        """A session's record and its latest finished turn's termination."""
        return await self._open_runtime().session_status(session_id)

    async def usage_status(self, *, scope: str, caps: SpendCaps, thread: str = "",
                           platform: str = "", user: str = "") -> list[str]:
        """Today's usage under ``scope`` against its per-day caps (``/status``, ``/usage``)."""
        return await self._open_runtime().usage_status(scope=scope, caps=caps, thread=thread,
                                                       platform=platform, user=user)

    def _open_runtime(self) -> Runtime:
        if self.runtime is None:
            raise ShuttingDown()
        return self.runtime

    @staticmethod
    async def _finish_rewinds(runtime: Runtime) -> None:
        """Finish the rewinds a dead process left half done before anything runs: their files
        are put back and their heads moved now, not only when each session is next opened
        (a thread nobody writes to again would keep its files rewound and its turns)."""
        store, home = runtime.store, runtime.records.rewind_home
        if store is None or home is None:
            return
        from geode.rewind import BlobStore, finish_all_pending

        for done in await finish_all_pending(store, BlobStore(home)):
            log.info("rewind.finished_at_start", session_id=done.session_id, turns=done.turns)

    async def _handle_ipc(self, req: RunRequest, conn: Connection) -> dict[str, Any]:
        workspace = Path(req.cwd) if req.cwd else self.workspace
        ctx = SessionContext(
            mode="IPC", workspace=workspace, session_id=req.session_id, model=req.model,
            allow_tools=req.allow_tools, deny_tools=req.deny_tools, max_rounds=req.max_rounds,
            time_budget_s=req.time_budget_s, approver=conn.approver(req.id),
            on_event=conn.event_sink(req.id), stream=req.stream,
        )

        async def bind(session: Session) -> None:
            conn.cancel_run = session.cancel

        # a new session gets a private lane key: the client-chosen id must not collide
        result = await self.run_turn(ctx, req.prompt, kind="cli", on_session=bind)
        return result.to_json()

    async def _run_job(self, job: Job, due: int) -> tuple[str, str | None]:
        runtime = self.runtime
        assert runtime is not None and runtime.store is not None
        timeline = runtime.store.timeline
        ctx = SessionContext(mode="SCHEDULER", workspace=self.workspace,
                             session_id=job.session_id, model=job.model)

        async def started(session: Session) -> None:
            await timeline.append(
                session_id=session.session_id, turn_id="", kind="schedule.run_started",
                payload={"job_id": job.id, "cron": job.cron, "due": due, "owner": self.owner},
            )

        result = await self.run_turn(ctx, job.prompt, kind="scheduler",
                                     lane_key=f"job-{job.id}", on_session=started)
        await timeline.append(
            session_id=result.session_id, turn_id=result.turn_id, kind="schedule.run_finished",
            payload={"job_id": job.id, "due": due, "termination": result.termination.value,
                     "tool_calls": result.tool_calls},
        )
        self.metrics.schedule_runs.labels(outcome=result.termination.value).inc()
        log.info("scheduler.ran", job_id=job.id, termination=result.termination.value,
                 session_id=result.session_id)
        return result.termination.value, result.session_id


def secrets_token() -> str:
    return secrets.token_hex(4)


def describe(daemon: Daemon) -> Sequence[str]:
    """Lines printed when ``geode serve`` is up."""
    port = daemon.health.port if daemon.health else daemon.settings.health_port
    host = daemon.settings.health_host
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else f"[{host}]" if ":" in host else host
    store = daemon.runtime.store if daemon.runtime else None
    return [
        f"geode serve: socket {daemon.socket_path}",
        f"  health  http://{shown}:{port}/healthz  /readyz  /metrics"
        + (f"  (listening on {host})" if shown != host else ""),
        f"  store   {store.where if store is not None else '-'}",
        f"  model   {daemon.model_status[1]}" if daemon.model_status[0]
        else f"  model   NOT READY ({daemon.settings.model.default}): {daemon.model_status[1]}",
        f"  lanes   global {daemon.lanes.global_cap}, "
        + ", ".join(f"{k} {v}" for k, v in daemon.lanes.caps.items()),
        f"  connectors {len(daemon.connectors)}",
        *([] if daemon.computer is None else [
            f"  display {daemon.computer.name} for computer use"
            + (" (Xvfb started and supervised by serve)" if daemon.computer.supervisor
               else " (configured)")]),
    ]


def scripted_factory(path: Path) -> ProviderFactory:
    """A testing aid: every session replays the JSON script at ``path`` from the start.

    The file holds a JSON list (or ``{"latency": SECONDS, "script": [...]}``, with
    ``"stream_piece"`` / ``"stream_every_s"`` to stream text answers in paced pieces): a string is a
    text answer; ``{"tool": NAME, "input": {...}}`` is a tool call; a list of those is one
    batch of parallel calls; ``{"after_results": ITEM, "otherwise": ITEM}`` answers the
    first when the request ends with tool results, else the second (a turn resumed after a
    restart replays the script from the start). Used via
    ``GEODE_SCRIPTED_MODEL=/path/script.json``.
    """
    import json

    from geode.errors import ConfigError
    from geode.providers.base import ModelRequest
    from geode.providers.scripted import ScriptedProvider, ToolCall

    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the scripted model {path}: {exc}") from exc
    latency = 0.0
    pace: dict[str, Any] = {}
    if isinstance(raw, dict):
        latency = float(raw.get("latency", 0.0))
        # a streamed answer's pieces: {"stream_piece": CHARS, "stream_every_s": SECONDS}
        pace = {k: raw[k] for k in ("stream_piece", "stream_every_s") if k in raw}
        raw = raw.get("script")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"the scripted model {path} must be a non-empty JSON list")

    def call(item: Any) -> ToolCall:
        if not isinstance(item, dict) or not isinstance(item.get("tool"), str):
            raise ConfigError(f"bad scripted item {item!r}: use a string or "
                              '{"tool": NAME, "input": {...}}')
        return ToolCall(item["tool"], dict(item.get("input") or {}))

    def one(item: Any) -> Any:
        if isinstance(item, str):
            return item
        if isinstance(item, list):
            return [call(x) for x in item]
        if isinstance(item, dict) and "after_results" in item:
            after, otherwise = one(item["after_results"]), one(item.get("otherwise", ""))

            def respond(request: ModelRequest) -> Any:
                last = request.messages[-1] if request.messages else None
                return after if last is not None and last.tool_results else otherwise

            return respond
        return call(item)

    script: list[Any] = [one(item) for item in raw]

    def build() -> BaseProvider:
        return ScriptedProvider(list(script), latency=latency, **pace)

    return build


def _settle_heap() -> None:
    """Collect startup's garbage once, then freeze every object alive now (modules, classes,
    SDK clients, settings) out of the cyclic collector's reach.

    Without it every full collection walks those ~170k long-lived objects: on the
    development machine a gen-2 pass under a 50-thread burst paused the event loop for
    100-150 ms, a few times a minute, and each pause landed on every reply in flight (the
    burst's p99). Frozen objects are never freed, which is what startup's objects are for
    anyway; garbage made later is collected as before. One collection here costs ~0.1 s of
    CPU, before the daemon reports itself started.
    """
    gc.collect()
    gc.freeze()
    log.debug("daemon.heap_settled", frozen=gc.get_freeze_count())


def _log_turn(result: TurnResult, *, kind: LaneKind, resumed: bool, entered: float,
              began: float) -> None:
    """The one INFO line of a finished turn (``geode serve`` logs at INFO by default, so
    ``journalctl -u geode -f`` shows every turn). A channel turn's ``platform``, ``channel``
    and ``thread`` come from the dispatcher's bound context; ``session_id`` is the thread's
    fixed session. Latency is from the request to the result, lane wait included."""
    now = time.monotonic()
    log.info("turn.done", turn_id=result.turn_id, session_id=result.session_id, kind=kind,
             termination=result.termination.value, rounds=result.rounds,
             input_tokens=result.usage.input_tokens, output_tokens=result.usage.output_tokens,
             tool_calls=len(result.tool_calls), resumed=resumed,
             latency_ms=round((now - entered) * 1000), queued_ms=round((began - entered) * 1000))
