"""Who may use the console, and what each identity sees.

The console's identity is the chat identity: a platform and a user id on it (``telegram:42``)
— the same id that approves in the thread, so the audit names one person whichever side
they decided on. ``[console] operators`` see every binding; a binding's ``approvers`` may
sign in too and see the bindings they approve for, nothing else. Nobody else may sign in.
The rights are read from the configuration on every request: an approver removed from a
binding loses its pages at once, whatever session they hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bots.store import ApprovalRecord
    from geode.settings import BindingSettings

__all__ = ["Access", "Identity", "binding_key"]


@dataclass(frozen=True, slots=True)
class Identity:
    """A chat identity: a user id is unique within its platform only."""

    platform: str
    user_id: str

    @classmethod
    def parse(cls, text: str) -> Identity:
        """``PLATFORM:USER_ID``; a ValueError says what is wrong."""
        platform, sep, user = text.strip().partition(":")
        if not sep or not platform or not user:
            raise ValueError(f"{text!r} is not PLATFORM:USER_ID (e.g. telegram:42)")
        return cls(platform=platform, user_id=user)

    def __str__(self) -> str:
        return f"{self.platform}:{self.user_id}"


def binding_key(b: BindingSettings) -> str:
    """The binding's id in the console's URLs: ``platform:channel`` (``platform:team:channel``
    for a binding limited to one team)."""
    return f"{b.platform}:{b.team}:{b.channel}" if b.team else f"{b.platform}:{b.channel}"


@dataclass(frozen=True, kw_only=True)
class Access:
    """The rights of every identity under one configuration (operators and bindings)."""

    operators: frozenset[Identity]
    bindings: Sequence[BindingSettings]

    @classmethod
    def build(cls, operators: Iterable[str], bindings: Sequence[BindingSettings]) -> Access:
        return cls(operators=frozenset(Identity.parse(o) for o in operators),
                   bindings=list(bindings))

    def is_operator(self, who: Identity) -> bool:
        return who in self.operators

    def bindings_of(self, who: Identity) -> list[BindingSettings]:
        """The bindings ``who`` sees: all for an operator, else those it approves for."""
        if self.is_operator(who):
            return list(self.bindings)
        return [b for b in self.bindings
                if b.platform == who.platform and who.user_id in b.approvers]

    def may_sign_in(self, who: Identity) -> bool:
        return self.is_operator(who) or bool(self.bindings_of(who))

    def sees_channel(self, who: Identity, platform: str, workspace: str, channel: str) -> bool:
        """Whether a thread of this channel is on one of ``who``'s bindings."""
        return any(b.platform == platform and b.channel == channel
                   and (not b.team or b.team == workspace) for b in self.bindings_of(who))

    def sees_request(self, who: Identity, rec: ApprovalRecord) -> bool:
        return self.sees_channel(who, rec.platform, rec.workspace, rec.channel)

    def may_decide(self, who: Identity, rec: ApprovalRecord) -> bool:
        """Only one of the request's own approvers, on its platform, decides it (an
        operator who is not one sees it but cannot)."""
        return rec.platform == who.platform and who.user_id in rec.approvers
