"""The router: what a dispatched event becomes, and the jobs that run it.

The dispatcher's middleware calls :meth:`Router.ignore`, :meth:`Router.pairing_notice` and
:meth:`Router.route`: a turn is accepted and submitted to the per-thread processor, a
command runs at once, a notice is queued and sent. Each processor job is wrapped by
:meth:`Router.bind`, which keeps its event live (recovery never starts it twice) and
resumes it in place after a store outage. Part of :class:`~bots.layer.ChannelLayer`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import structlog

from bots.bindings import BindingTable
from bots.commands import ActiveTurn, CommandContext, PrivateReply, run_command
from bots.dispatcher import BaseEventProcessor, Dispatch
from bots.outbound import Deliverer
from bots.port import ApprovalControls, PlatformClient
from bots.pump import ClaimState
from bots.senders import SenderPolicy
from bots.store import ChannelStore, OutboxRow, StoredEvent, Tx
from bots.store import ThreadLeaseLost as StoreLeaseLost
from bots.turns import EntryOrder, TurnRunner
from geode.errors import ShuttingDown
from geode.secret_redaction import redact_text
from geode.settings import BindingSettings
from geode.store._retry import is_transient, log_store_failure, retry_transient

__all__ = ["Router"]

log = structlog.get_logger(__name__)


class Router:
    """Decides and runs dispatched events; see the module docstring."""

    #: resumes of one job after store failures before its turn is ended with a message (a
    #: store that answers a probe but fails the turn's writes every time)
    MAX_RESUMES = 8

    def __init__(
        self,
        *,
        state: ClaimState,
        client: PlatformClient,
        records: ChannelStore,
        bindings: BindingTable,
        senders: SenderPolicy,
        processor: BaseEventProcessor,
        deliverer: Deliverer,
        turns: TurnRunner,
        commands: CommandContext,
        active: dict[str, ActiveTurn],
        entry: EntryOrder,
        fault: Callable[[str], None],
    ) -> None:
        self.state = state
        self.client = client
        self.records = records
        self.inbound = records.inbound
        self.outbox = records.outbox
        self.thread_leases = records.thread_leases
        self.bindings = bindings
        self.senders = senders
        self.processor = processor
        self.deliverer = deliverer
        self.turns = turns
        self.commands = commands
        self.active = active
        self.entry = entry
        self.fault = fault
        #: commands, notices and recoveries running outside the processor
        self.tasks: set[asyncio.Task[Any]] = set()
        #: events with a live job here (a turn submitted to the processor, a command
        #: running): recovery never starts them a second time
        self.live: set[int] = set()

    def spawn(self, coro: Any) -> None:
        self.track(asyncio.create_task(coro))

    def track(self, task: asyncio.Task[Any]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- decisions (called by the dispatcher's middleware) --------------------------------------

    async def ignore(self, d: Dispatch, decision: str) -> None:
        log.debug("channel.ignored", decision=decision, event_id=d.stored.id)
        await self.inbound.set_status(d.stored.id, "ignored", decision=decision)

    async def notice(
        self, d: Dispatch, text: str, *, decision: str, conn: Tx | None = None
    ) -> bool:
        """Queue a short answer in the event's thread (finishing the event) and send it."""
        ev = d.event
        queued = await self.outbox.add_notice(
            session_key=ev.thread_key, turn_key=f"ev{d.stored.id}", event_id=d.stored.id,
            platform=ev.platform, workspace=ev.workspace, target=ev.target(),
            chunks=self.client.render(redact_text(text)),
            decision=decision, conn=conn,
        )
        if queued and conn is None:
            await self._send_notice(ev.thread_key, f"ev{d.stored.id}")
        return queued

    async def _send_notice(self, session_key: str, turn_key: str) -> None:
        row = await self.outbox.get(session_key, turn_key)
        if row is not None:
            await self.deliverer.deliver(row)

    async def pairing_notice(self, d: Dispatch) -> None:
        # The code and its message (outbox row + event done) commit in ONE transaction: a
        # crash can never leave a code issued whose message was not queued (the sender
        # would then get nothing for an hour).
        # One sender writing in two threads at once (here or on another replica) still gets
        # one code: PairingStore.issue serialises a sender's issuance in the store.
        async with self.records.transaction() as conn:
            text = await self.senders.pairing_text(d.event, conn=conn)
            if text is not None:
                queued = await self.notice(d, text, decision="pairing", conn=conn)
                if not queued:
                    raise RuntimeError("pairing notice queued twice")  # rolls the code back
        if text is None:  # one code per sender per hour: stay quiet
            await self.ignore(d, "unknown_sender")
            return
        self.fault("pairing_issued")
        await self._send_notice(d.event.thread_key, f"ev{d.stored.id}")

    async def route(self, d: Dispatch) -> None:
        ev = d.event
        assert d.binding is not None
        if d.command is not None:
            self.live.add(d.stored.id)
            self.spawn(self._command(d, d.command, d.binding))
            return
        row = await self.records.accept_turn(ev, event_id=d.stored.id, thread=d.thread)
        if row is None:
            return  # accepted before; recovery owns it
        self.fault("turn_accepted")
        active = self.active.get(ev.thread_key)
        if active is not None and d.binding.busy_policy == "interrupt":
            log.info("channel.interrupt", thread=ev.thread_key)
            active.cancel()
        self.processor.submit(ev.thread_key, self.bind(self.turns.run, d.stored, row,
                                                       d.binding, event=d.stored.id))

    async def _command(self, d: Dispatch, name: str, binding: BindingSettings) -> None:
        try:
            await self._command_once(d, name, binding)
        finally:
            self.live.discard(d.stored.id)

    async def _command_once(self, d: Dispatch, name: str, binding: BindingSettings) -> None:
        try:
            text = await run_command(self.commands, name, d.event, binding)
        except Exception as exc:
            log.exception("command.failed", command=name)
            text = f"⚠️ /{name} failed ({type(exc).__name__})."
        private = isinstance(text, PrivateReply)
        if d.event.extra.get("action") or private:
            # a click on a button: answered where it was made; a private answer to a typed
            # command: ephemeral where the platform can (Slack), else nobody sees it
            try:
                if isinstance(self.client, ApprovalControls):
                    await self.client.answer_action(d.event, text)
            except Exception:
                log.warning("action.answer_failed", command=name, exc_info=True)
            else:
                private = private or d.event.extra.get("answer") == "private"
        if private:
            # The sender alone saw the answer (an ephemeral answer to the click), or nobody
            # did (a refusal to a non-approver's typed /approve): never a thread post, which
            # each click would repeat for everyone (a flood lever, issue #30).
            await self.inbound.set_status(d.stored.id, "done", decision=f"command:{name}")
            return
        await self.notice(d, text, decision=f"command:{name}")

    # -- the processor's jobs -------------------------------------------------------------------

    def bind(self, fn: Any, *args: Any, order: int | None = None,
             event: int | None = None) -> Callable[[], Any]:
        """A processor job; when it ends, a claim deferred at capacity is tried again. A
        recovered turn (``order``: its event id) takes its place in the lanes' arrival order
        as it starts (recovery starts them together, in order), and gives it up whatever way
        it ends.

        ``event``: the event the job answers. It is live from now until the job ends (no
        recovery starts it again meanwhile). If the job fails because the database went
        away, it is not dropped: once the store answers, the event is picked up again from
        its records, in place (the thread's later jobs still wait behind it), through the
        recovery a restart uses (:meth:`_resume_event`): the turn resumes from its
        checkpoint, an effect of unknown outcome is reported as uncertain, never re-run."""
        if event is not None:
            self.live.add(event)

        async def job() -> None:
            if order is not None:
                self.entry.register(order)
            try:
                attempt: Callable[[], Any] | None = functools.partial(fn, *args)
                resumes = 0
                while attempt is not None:
                    try:
                        await attempt()
                        attempt = None
                    except Exception as exc:
                        if event is None:
                            raise
                        if isinstance(exc, ShuttingDown):
                            # The daemon is stopping (a queued turn woken by the drain):
                            # neither answered nor failed; its pending row waits for the
                            # next start, or for the replica that takes the thread over.
                            log.info("turn.deferred_to_next_start", event_id=event)
                            return
                        if not is_transient(exc):
                            await self._fail_visibly(event, exc)
                            raise
                        resumes += 1
                        log_store_failure("turn.store_unavailable", exc, event_id=event,
                                          resumes=resumes)
                        attempt = await self._resume_event(event, resumes)
            finally:
                if event is not None:
                    self.live.discard(event)
                if order is not None:
                    self.entry.entered(order)
                if self.state.deferred:
                    self.state.poke()

        return job

    async def _resume_event(self, event_id: int, resumes: int) -> Callable[[], Any] | None:
        """After a store failure in event ``event_id``'s job: wait until the store answers,
        then what finishes the event (None: nothing is left to do here)."""
        self.state.outage = True
        await self.records.wait_until_answers(what="turn.waiting_for_store")

        async def read() -> tuple[StoredEvent | None, OutboxRow | None, bool]:
            stored = await self.inbound.get(event_id)
            if stored is None or stored.status not in ("processing", "running"):
                return stored, None, False
            c = self.client
            held = await self.thread_leases.renew(c.platform, c.workspace)
            mine = (stored.event.channel, stored.event.thread_root) in held
            return stored, (await self.outbox.for_event(event_id)) if mine else None, mine

        stored, row, mine = await retry_transient(read, what="turn.resume_read_failed")
        if stored is None or stored.status not in ("processing", "running"):
            return None  # decided meanwhile (its commit went through)
        if not mine:
            log.warning("turn.lease_lost_in_outage", event_id=event_id)
            return None  # another replica took the thread over: it recovers the event
        if row is None:
            # Claimed, never accepted: decided again from the start by the pump.
            await retry_transient(lambda: self.inbound.set_status(event_id, "received"),
                                  what="turn.resume_failed")
            self.state.poke()
            return None
        if row.kind != "turn":
            return None
        binding = await self.bindings.lookup(stored.event.platform, stored.event.workspace,
                                             stored.event.channel)
        log.info("turn.resumed_after_outage", event_id=event_id, row_status=row.status)
        if resumes > self.MAX_RESUMES and row.status == "pending":
            text = ("⚠️ I could not finish: the database kept failing this turn "
                    f"({resumes} tries). Please ask again.")
            return functools.partial(self.turns.finish, row, text)
        return functools.partial(self.turns.recover, stored, row, binding)

    async def _fail_visibly(self, event_id: int, exc: Exception) -> None:
        """A turn's job failed for a reason that is not the database going away (a bug): end
        the turn with a line in its thread, so its event is not left ``running`` with nobody
        to run it. Not when another replica took the thread over (that run counts), nor when
        the daemon is stopping (``ShuttingDown``): ended here, the next start found the row
        ``ready`` and delivered "Something went wrong" instead of the answer."""
        if isinstance(exc, StoreLeaseLost | ShuttingDown):
            return
        try:
            row = await self.outbox.for_event(event_id)
            if row is not None and row.kind == "turn" and row.status == "pending":
                await self.turns.finish(row, f"⚠️ Something went wrong ({type(exc).__name__}). "
                                             "The operator can find details in the logs.")
        except Exception as again:
            log_store_failure("turn.fail_visibly_failed", again, event_id=event_id)
