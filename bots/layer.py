"""ChannelLayer: the platform-neutral part every connector shares.

It builds the store-backed parts (inbound log, outbox, threads, message index, pairing,
bindings), the per-thread processor and the turn runner, and composes four parts, handing
each what it uses at construction; none of them calls back into the layer:

* the **intake** (:class:`bots.intake.Intake`) records what platform code hands in and
  answers its reads (the :class:`~bots.port.Intake` port). When no pass is running, it claims
  what it records in the record's own transaction and hands the batch to the pump;
* the **pump** (:class:`bots.intake.Pump`, beside the intake) claims recorded events in id
  order and hands them to the router: the events of one thread in order, different threads
  concurrently;
* the **router** (:mod:`bots.router`) runs the middleware chain (dedupe, self-ignore,
  binding, mention gate, sender policy) and decides what an event becomes (a turn for the
  per-thread processor, a command run at once, a notice), and wraps each processor job (live
  events, resume after an outage). It learns the bot's identity from
  :meth:`start_processing`, once the connector has logged in;
* the **lease keeper** (:mod:`bots.lease_keeper`) renews this replica's thread leases,
  drops idle ones, takes over the threads of a replica that stopped renewing
  (:class:`~bots.store.ThreadLeases`) and **recovers** what a previous run left in the
  threads it takes (at :meth:`start_processing`, then at each heartbeat): events claimed
  but not decided are dispatched again, accepted turns are resumed or delivered, ready
  outbox rows are sent.

Every replica processes (active-active); a thread's events are claimed only with its
thread lease, so one replica at a time runs a thread, in order, and two replicas never
answer the same event. Only the intake (Telegram's ``getUpdates``, catch-up) is single, under
the connector's bot lease.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from bots._aio import reap
from bots.approvals import ApprovalWaiters
from bots.bindings import BindingTable
from bots.commands import ActiveTurn, CommandContext
from bots.console.chat_command import console_dm, is_console
from bots.events import InboundEvent
from bots.intake import ClaimState, Intake, Pump
from bots.lease_keeper import LeaseKeeper
from bots.memory_commands import ThreadMemory
from bots.metrics import ChannelMetrics
from bots.options import LayerOptions
from bots.port import PlatformClient, TurnHost
from bots.reminders import ThreadReminders
from bots.router import (
    DEFAULT_CHAIN,
    BaseEventProcessor,
    BotIdentity,
    Router,
    ThreadOrderedProcessor,
    binding,
    with_dm_command,
)
from bots.store import ChannelStore
from bots.turn import Deliverer, EntryOrder, TurnDeps, TurnRunner
from bots.uploads import FileSender
from geode.daemon.supervisor import TaskSupervisor
from geode.settings import BindingSettings
from geode.tools.builtin.schedule import make_schedule

__all__ = ["ChannelLayer", "LayerOptions"]

log = structlog.get_logger(__name__)


class ChannelLayer:
    """See the module docstring. Built by :meth:`BaseConnector.start`.

    Its collaborators are ports, given at construction: ``client`` (the platform's I/O and
    identity, :class:`~bots.port.PlatformClient`; never the connector's lifecycle),
    ``records`` (the channel store), ``host`` (the harness, :class:`~bots.port.TurnHost`)
    and the ``fault`` seam. Platform code sees the layer only as :attr:`intake`.
    """

    def __init__(
        self,
        *,
        client: PlatformClient,
        records: ChannelStore,
        host: TurnHost,
        bindings: Sequence[BindingSettings],
        options: LayerOptions,
        processor: BaseEventProcessor | None = None,
        fault: Callable[[str], None] | None = None,
        supervisor: TaskSupervisor | None = None,
    ) -> None:
        self.client = client
        #: runs the pump, the lease keeper and the listener (restarted when they die) and
        #: reports their health on /readyz
        self.supervisor = supervisor or TaskSupervisor()
        self.records = records
        self.host = host
        self.options = options
        self.owner = records.owner
        self.inbound = records.inbound
        self.outbox = records.outbox
        self.threads = records.threads
        self.index = records.index
        self.pairing = records.pairing
        self.thread_leases = records.thread_leases
        self.approvals = records.approvals
        self.bindings = BindingTable(configured=bindings, stored=records.bindings)
        self.processor = processor or ThreadOrderedProcessor(
            max_concurrent=options.max_concurrent_threads)
        # ``fault``, the test seam (called with a point name; a test raises there to simulate
        # a crash), is given as it is to the intake, the router, the deliverer and the turns
        # (None: they call nothing); nothing calls back into the layer for it.
        self.active: dict[str, ActiveTurn] = {}
        self.entry = EntryOrder()
        self.waiters = ApprovalWaiters()
        #: the daemon's channel counters on its /metrics (one instance per daemon, shared by
        #: its connectors), handed to the components that count: each increments them where
        #: the thing happens (the events they publish are for the daemon's observers)
        self.metrics: ChannelMetrics = host.add_metrics(ChannelMetrics)
        # Collaborators get what they use, at construction (never the layer itself).
        self.deliverer = Deliverer(client=client, outbox=self.outbox,
                                   fault=fault, observe=host.publish, metrics=self.metrics)
        self.files = FileSender(client=client, outbox=self.outbox)
        #: /remind, /reminders, the schedule tool; fired into their threads by this layer
        self.reminders = (None if host.database is None else ThreadReminders(
            database=host.database, submit=self.submit, owner=self.owner,
            active=self.active, events=self._event, bindings=self.bindings))
        self.turns = TurnRunner(deps=TurnDeps(
            client=client, host=host, inbound=self.inbound, outbox=self.outbox,
            deliverer=self.deliverer, threads=self.threads, index=self.index,
            thread_leases=self.thread_leases, options=options, active=self.active,
            fault=fault, approvals=self.approvals, waiters=self.waiters,
            entry=self.entry, queue=records.queue, files=self.files,
            attachments=records.attachments,
            chat_tools=() if self.reminders is None else (make_schedule(self.reminders),),
        ))
        self.commands = CommandContext(threads=self.threads, host=host, active=self.active,
                                       queued=self.processor.pending,
                                       approvals=self.approvals, waiters=self.waiters,
                                       reminders=self.reminders,
                                       memory=None if host.database is None else ThreadMemory(
                                           database=host.database, threads=self.threads))
        #: what the intake, the pump, the router and the lease keeper share about claiming
        self.state = ClaimState()
        #: the middleware chain, the sender policy and the decisions (bots.router)
        self.router = Router(
            signals=self.state, client=client, records=records, bindings=self.bindings,
            processor=self.processor, deliverer=self.deliverer, turns=self.turns,
            commands=self.commands, active=self.active, entry=self.entry, fault=fault,
            chain=with_dm_command(DEFAULT_CHAIN, is_console, console_dm(client, host),
                                  before=binding))
        self.keeper = LeaseKeeper(
            state=self.state, router=self.router, client=client, records=records, host=host,
            options=options, bindings=self.bindings, processor=self.processor,
            deliverer=self.deliverer, turns=self.turns, metrics=self.metrics)
        self.pump = Pump(
            state=self.state, client=client, records=records, host=host, options=options,
            processor=self.processor, router=self.router,
            after_outage=self.keeper.after_outage_soon)
        #: the port platform code uses (``BaseConnector.intake``)
        self.intake = Intake(
            state=self.state, pump=self.pump, client=client, records=records, host=host,
            options=options, bindings=self.bindings, fault=fault, metrics=self.metrics)

    @property
    def processing(self) -> bool:
        return self.state.processing

    async def submit(
        self, events: Sequence[tuple[InboundEvent, str]], *, cursor: tuple[str, str] | None = None
    ) -> list[int]:
        return await self.intake.submit(events, cursor=cursor)

    # -- processing ---------------------------------------------------------------------------

    async def start_processing(self) -> None:
        """Take over and recover the threads nobody holds, then pump new events.

        The pump, the lease keeper and the PostgreSQL listener run under the supervisor as
        ``<platform>.pump``, ``<platform>.leases`` and ``<platform>.listen``: a death is
        logged with its cause and restarted with backoff, and each beats as it works
        (``/readyz`` names the one that stalls). Raises if the take-over fails (the caller
        retries: nothing has started then).
        """
        # the connector has logged in: who the bot is is known now, and handed on as a value
        c = self.client
        self.router.identify(BotIdentity(user_id=c.bot_user_id(), username=c.bot_username()))
        if self.state.processing:
            return
        await self.bindings.refresh(force=True)
        self.state.processing = True
        try:
            await self.take_over()
        except BaseException:
            self.state.processing = False
            raise
        p = self.client.platform
        sup = self.supervisor
        interval = self.options.pump_interval_s
        sup.spawn(f"{p}.pump", self.pump.run, stale_after_s=max(60.0, 10 * interval))
        sup.spawn(f"{p}.leases", self.keeper.run, stale_after_s=self.options.lease_ttl_s)
        self.pump.task = sup.task(f"{p}.pump")
        if self.records.is_postgres:
            sup.spawn(f"{p}.listen", self.pump.listen)
        if self.reminders is not None:  # this bot's threads' reminders
            reminders, bot = self.reminders, f"{p}:{self.client.workspace}:"
            sup.spawn(f"{p}.reminders", lambda health: reminders.run(health, threads=bot),
                      stale_after_s=max(60.0, 30 * reminders.tick_s))

    async def stop_claiming(self) -> None:
        """Claim nothing more (SIGTERM's drain): the pump and the listener stop; the intake
        only records from now on. Running jobs go on; :meth:`stop_processing` ends them."""
        p = self.client.platform
        self.pump.task = None  # submit records without claiming (see Intake.submit)
        await self.supervisor.cancel(f"{p}.pump")
        await self.supervisor.cancel(f"{p}.listen")

    @property
    def idle(self) -> bool:
        """No thread job (a turn, its delivery) and no command runs here."""
        return self.processor.busy == 0 and not self.router.tasks

    async def _event(self, event_id: int) -> InboundEvent | None:
        stored = await self.inbound.get(event_id)
        return None if stored is None else stored.event

    async def stop_processing(self) -> None:
        was = self.state.processing
        self.state.processing = False
        p = self.client.platform
        for name in (f"{p}.reminders", f"{p}.listen", f"{p}.leases", f"{p}.pump"):
            await self.supervisor.cancel(name)
        self.pump.task = None
        # never dispatched: claimed and undecided, recovered by whoever takes the threads
        self.state.handed.clear()
        await self.processor.aclose()
        for t in list(self.router.tasks):
            await reap(t)
        if was:
            # Nothing of ours runs any more: whatever is unfinished is recovered by the
            # replica (or the next run) that takes the threads.
            c = self.client
            try:
                await self.thread_leases.release_all(c.platform, c.workspace)
            except Exception:
                log.warning("thread_leases.release_failed", exc_info=True)

    async def stop(self) -> None:
        await self.stop_processing()

    async def heartbeat_once(self) -> None:
        await self.keeper.heartbeat_once()

    async def take_over(self) -> None:
        await self.keeper.take_over()

