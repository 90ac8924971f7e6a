"""One session's memory: the entries its prompt shows and the writes its ``memory`` tool
makes, for the user and the binding the host named (:class:`MemoryScope`).

What a turn with memory on costs (see the memory docs for the figures): one query for
both scopes' rows, run in the transaction that creates or finds the session's row
(:class:`MemoryRead`), and one UPDATE of the shown entries' use counts, run in the turn's
first checkpoint save (:meth:`SessionMemory.count_use`): no transaction of its own for
either, the same number of transactions as a turn without memory. The block is rendered
again only when the rows' content changed: the last block rendered for a (user, channel,
budget) is kept in this process with the content it was rendered from, and reused when a
later read returns the same content. That check is made against what the store holds at
every turn, so a write by another replica (or the CLI) is seen at the next turn as before;
nothing here assumes this process made every write.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from geode.errors import RunError
from geode.memory._render import MAX_ENTRY_CHARS, RenderedMemory, clean_text, render_memory
from geode.memory._scope import MemoryScope
from geode.store.memory import (
    MemoryAudit,
    MemoryEntry,
    MemoryRows,
    MemoryScopeName,
    count_use,
    read_rows,
)

if TYPE_CHECKING:
    from geode.store.memory import MemoryStore

__all__ = ["MAX_ENTRIES_PER_OWNER", "MemoryRead", "MemoryWriteError", "SessionMemory"]

#: entries one person (or one channel) may have; past it an entry must be replaced or removed
MAX_ENTRIES_PER_OWNER = 100

#: blocks kept for reuse (one per user and channel memory pair lately seen), least recently
#: used dropped first
_KEPT_BLOCKS = 1024


@dataclass(frozen=True, kw_only=True)
class _Kept:
    content: tuple[tuple[Any, ...], ...]
    rendered: RenderedMemory


_BlockKey = tuple[str, str, int, bool]
_blocks: OrderedDict[_BlockKey, _Kept] = OrderedDict()


def _kept(key: _BlockKey, content: tuple[tuple[Any, ...], ...]) -> _Kept | None:
    found = _blocks.get(key)
    if found is None or found.content != content:
        return None
    _blocks.move_to_end(key)
    return found


def _keep(key: _BlockKey, kept: _Kept) -> None:
    _blocks[key] = kept
    _blocks.move_to_end(key)
    while len(_blocks) > _KEPT_BLOCKS:
        _blocks.popitem(last=False)


class MemoryWriteError(RunError):
    """A memory write refused (the tool turns it into its failure text)."""


class MemoryRead:
    """The read of one turn's memory, made before its session is opened: :meth:`read` runs
    in the transaction that creates or finds the session row (``Records.load_or_create``'s
    ``read_with``), so memory costs that turn no transaction of its own; :meth:`open` makes
    the session's view from what it read (or reads now, when the load did not run it)."""

    def __init__(self, *, store: MemoryStore, scope: MemoryScope, budget_tokens: int
                 ) -> None:
        self.store = store
        self.scope = scope
        self.budget_tokens = budget_tokens
        owners: list[tuple[MemoryScopeName, str]] = []
        if scope.user_enabled:
            owners.append(("user", scope.user))
        if scope.channel_enabled:
            owners.append(("channel", scope.channel))
        self._owners = owners
        self._rows: MemoryRows | None = None

    def read(self, tx: Any) -> None:
        """Read both owners' rows in the caller's transaction (one query; ``tx`` is the
        store's handle of it, opaque outside the store)."""
        self._rows = read_rows(tx, self._owners)

    async def open(self, session_id: str) -> SessionMemory:
        """The session's memory from the rows :meth:`read` got (read now if it did not
        run). Counts no use: see :meth:`SessionMemory.count_use`."""
        rows = self._rows
        if rows is None:
            rows = await self.store.rows_for_owners(self._owners)
        return SessionMemory._from_rows(store=self.store, scope=self.scope,
                                        session_id=session_id,
                                        budget_tokens=self.budget_tokens, rows=rows)


class SessionMemory:
    """The memory of one session's turn (``ctx.deps.memory``).

    Built by :meth:`open` with the entries as they are when the turn starts; the tool's
    writes update them here too, so the next model call's prompt shows them.
    """

    def __init__(self, *, store: MemoryStore, scope: MemoryScope, session_id: str,
                 budget_tokens: int, rows: MemoryRows) -> None:
        self.store = store
        self.scope = scope
        self.session_id = session_id
        self.budget_tokens = budget_tokens
        self._rows = rows
        #: the user's and the channel's entries, made from the rows when first needed (a
        #: turn whose block is reused and that writes nothing never needs them)
        self._lists: tuple[list[MemoryEntry], list[MemoryEntry]] | None = None
        #: the block as last rendered (the loop asks before every model call); a write
        #: drops it
        self._rendered: RenderedMemory | None = None
        #: the entries the turn's first prompt shows (their use is counted once)
        self.shown_at_open: tuple[str, ...] = ()

    @classmethod
    async def open(cls, *, store: MemoryStore, scope: MemoryScope, session_id: str,
                   budget_tokens: int) -> SessionMemory:
        """Read the entries now and count a use of those its prompt will show, each in a
        transaction of the store's (a turn reads with its session's load and counts with
        its checkpoint instead: :class:`MemoryRead`, :meth:`count_use`)."""
        memory = await MemoryRead(store=store, scope=scope,
                                  budget_tokens=budget_tokens).open(session_id)
        await store.touch(memory.shown_at_open)
        return memory

    @classmethod
    def _from_rows(cls, *, store: MemoryStore, scope: MemoryScope, session_id: str,
                   budget_tokens: int, rows: MemoryRows) -> SessionMemory:
        """The turn's memory from its rows. The rows are read every time (a write elsewhere
        is seen); the block is rendered again only when their content differs from the
        last block's for the same user, channel and budget. A block that left entries out
        is not reused: which ones are left out depends on the use counts, which every turn
        changes."""
        key: _BlockKey = (scope.user if scope.user_enabled else "",
                          scope.channel if scope.channel_enabled else "", budget_tokens,
                          scope.channel_enabled)
        memory = cls(store=store, scope=scope, session_id=session_id,
                     budget_tokens=budget_tokens, rows=rows)
        content = rows.content
        kept = _kept(key, content)
        if kept is not None:
            memory._rendered = kept.rendered
        elif not memory.rendered().left_out:
            _keep(key, _Kept(content=content, rendered=memory.rendered()))
        memory.shown_at_open = memory.rendered().shown
        return memory

    def count_use(self, tx: Any) -> None:
        """Count a use of each entry the turn's first prompt shows, in the caller's
        transaction (a rider of the turn's first checkpoint save: no transaction of its
        own). A count lost with a turn that never saved costs nothing but the order in
        which entries are left out over the budget."""
        count_use(tx, self.shown_at_open)

    def rendered(self) -> RenderedMemory:
        """The ``<memory>`` block now, and the entries it shows."""
        if self._rendered is None:
            user, channel = self._split()
            self._rendered = render_memory(
                user=user, channel=channel, user_label=self.scope.user,
                budget_tokens=self.budget_tokens, channel_on=self.scope.channel_enabled)
        return self._rendered

    def prompt(self) -> str:
        """The system prompt's ``<memory>`` block now (the loop asks before each call)."""
        return self.rendered().text

    # -- writes ---------------------------------------------------------------------------

    def owner(self, scope: MemoryScopeName) -> str:
        """Whose ``scope`` memory this session writes ("" when that memory is off)."""
        if scope == "channel":
            return self.scope.channel if self.scope.channel_enabled else ""
        return self.scope.user if self.scope.user_enabled else ""

    def _owner(self, scope: MemoryScopeName) -> str:
        if scope == "channel":
            if not self.scope.channel_enabled:
                raise MemoryWriteError(
                    "channel memory is off here (the binding's memory is "
                    f"{self.scope.mode!r}); save facts about the person you answer with "
                    'scope "user"')
            return self.scope.channel
        if not self.scope.user_enabled:
            raise MemoryWriteError("user memory is off here")
        return self.scope.user

    def _split(self) -> tuple[list[MemoryEntry], list[MemoryEntry]]:
        if self._lists is None:
            # with their use counts as the turn read them (a later write re-renders)
            entries = self._rows.entries()
            self._lists = ([e for e in entries if e.scope == "user"],
                           [e for e in entries if e.scope == "channel"])
        return self._lists

    def _entries(self, scope: MemoryScopeName) -> list[MemoryEntry]:
        user, channel = self._split()
        return channel if scope == "channel" else user

    def _audit(self, turn_id: str) -> MemoryAudit:
        return MemoryAudit(by=self.scope.user or "unknown", session_id=self.session_id,
                           turn_id=turn_id, via="tool")

    @staticmethod
    def _text(text: str | None) -> str:
        cleaned = clean_text(text or "")
        if not cleaned:
            raise MemoryWriteError("give the text to remember")
        if len(cleaned) > MAX_ENTRY_CHARS:
            raise MemoryWriteError(f"an entry is at most {MAX_ENTRY_CHARS} characters "
                                   f"({len(cleaned)} given): save one short fact")
        return cleaned

    async def add(self, scope: MemoryScopeName, text: str | None, *, turn_id: str
                  ) -> MemoryEntry:
        owner = self._owner(scope)
        cleaned = self._text(text)
        if await self.store.count(scope, owner) >= MAX_ENTRIES_PER_OWNER:
            raise MemoryWriteError(f"this {scope} memory holds {MAX_ENTRIES_PER_OWNER} entries "
                                   "already: replace or remove one first")
        entry = await self.store.add(scope=scope, owner=owner, text=cleaned,
                                     audit=self._audit(turn_id))
        self._entries(scope).append(entry)
        self._rendered = None
        return entry

    async def replace(self, scope: MemoryScopeName, entry_id: str | None, text: str | None,
                      *, turn_id: str) -> MemoryEntry:
        owner = self._owner(scope)
        cleaned = self._text(text)
        entry = await self.store.replace(entry_id=entry_id or "", scope=scope, owner=owner,
                                         text=cleaned, audit=self._audit(turn_id))
        if entry is None:
            raise MemoryWriteError(f"no {scope} memory entry {entry_id!r} here")
        entries = self._entries(scope)
        entries[:] = [entry if e.id == entry.id else e for e in entries]
        self._rendered = None
        return entry

    async def remove(self, scope: MemoryScopeName, entry_id: str | None, *, turn_id: str
                     ) -> MemoryEntry:
        owner = self._owner(scope)
        gone = await self.store.remove(entry_ids=[entry_id or ""], scope=scope, owner=owner,
                                       audit=self._audit(turn_id))
        if not gone:
            raise MemoryWriteError(f"no {scope} memory entry {entry_id!r} here")
        entries = self._entries(scope)
        entries[:] = [e for e in entries if e.id != gone[0].id]
        self._rendered = None
        return gone[0]
