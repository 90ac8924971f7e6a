"""The channel layer's records: the only package of ``bots`` that speaks SQL.

Inbound events and cursors (:class:`InboundLog`, :class:`Cursors`), leases
(:class:`Lease`, :class:`ThreadLeases`), threads and the message index
(:class:`ThreadSessions`, :class:`MessageIndex`), the outbox (:class:`Outbox`), pairing
codes (:class:`PairingStore`), stored bindings (:class:`StoredBindings`) and approval
requests (:class:`ApprovalRequests`), what was received of attachments
(:class:`AttachmentRecords`), the operator's view of queued turns
(:class:`ChannelQueue`), the operator console's links and sessions
(:class:`ConsoleLinks`, :class:`ConsoleSessions`), the web chat's messages
(:class:`WebChatRecords`), each with
named operations; :class:`ChannelStore` builds them on the harness's store and holds the
units of work that span several tables (accepting a turn). The tables are on
:data:`CHANNEL_METADATA`, handed to the harness by the composition root.

The rest of ``bots`` (layer, connectors) never touches a table; where it must group
several operations in one transaction it holds an opaque :data:`Tx`.
"""

from __future__ import annotations

from bots.store._channel import ChannelStore, Tx
from bots.store._tables import CHANNEL_METADATA
from bots.store.approvals import ApprovalRecord, ApprovalRequests, ApprovalStatus, Decision
from bots.store.attachments import AttachmentRecord, AttachmentRecords, AttachmentStatus
from bots.store.bindings import StoredBindings
from bots.store.console import ConsoleLinks, ConsoleSession, ConsoleSessions, ConsoleThreads
from bots.store.inbound import EVENTS_CHANNEL, Cursors, InboundLog, StoredEvent
from bots.store.leases import Lease, Thread, ThreadLeaseLost, ThreadLeases, ThreadStops
from bots.store.outbox import PLACEHOLDER, Outbox, OutboxRow
from bots.store.pairing import CODE_TTL_S, PairingRecord, PairingStore
from bots.store.queue import DROPPED_NOTICE, ChannelQueue, QueuedMessage
from bots.store.threads import MessageIndex, ThreadSessions, ThreadState
from bots.store.webchat import WebChatRecords

__all__ = [
    "CHANNEL_METADATA",
    "CODE_TTL_S",
    "DROPPED_NOTICE",
    "EVENTS_CHANNEL",
    "PLACEHOLDER",
    "ApprovalRecord",
    "ApprovalRequests",
    "ApprovalStatus",
    "AttachmentRecord",
    "AttachmentRecords",
    "AttachmentStatus",
    "ChannelQueue",
    "ChannelStore",
    "ConsoleLinks",
    "ConsoleSession",
    "ConsoleSessions",
    "ConsoleThreads",
    "Cursors",
    "Decision",
    "InboundLog",
    "Lease",
    "MessageIndex",
    "Outbox",
    "OutboxRow",
    "PairingRecord",
    "PairingStore",
    "QueuedMessage",
    "StoredBindings",
    "StoredEvent",
    "Thread",
    "ThreadLeaseLost",
    "ThreadLeases",
    "ThreadSessions",
    "ThreadState",
    "ThreadStops",
    "Tx",
    "WebChatRecords",
]
