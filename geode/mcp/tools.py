"""MCP tool → :class:`ToolDef`: the name the model sees, the safety the executor checks.

Classification (first match wins, per field):

1. the server's resource policy names the tool (``policy.tools.NAME``): those values;
2. the server has a policy and trusts annotations: ``readOnlyHint`` ⇒ ``read_only`` and
   idempotent, ``idempotentHint`` ⇒ idempotent;
3. the server has a policy: its defaults (``policy.safety``, ``policy.idempotent``);
4. no policy at all: ``external``, not idempotent — the annotations are the server's own
   claims and are not believed until an operator wrote a policy for it.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types as mt

from geode.mcp.config import ServerConfig
from geode.messages import ImageBlock, TextBlock
from geode.tools.base import PersonalData, Safety, ToolContext, ToolDef, ToolOutput
from geode.tools.errors import ToolFailure

__all__ = [
    "Classification",
    "ToolCaller",
    "build_tooldef",
    "classify",
    "model_tool_name",
    "result_to_output",
]

_MAX_NAME = 64  # Anthropic and OpenAI both cap tool names at 64 characters
_BAD = re.compile(r"[^A-Za-z0-9_-]")

#: ``caller(server, tool, args, deadline_s=..., retry_safe=...)`` runs one call on the server
ToolCaller = Callable[..., Awaitable[mt.CallToolResult]]


@dataclass(frozen=True, kw_only=True)
class Classification:
    safety: Safety
    idempotent: bool
    resource_keys: tuple[str, ...]
    personal_data: PersonalData
    deadline_s: float


def model_tool_name(server: str, tool: str) -> str:
    """``SERVER__TOOL`` with characters providers reject replaced, at most 64 characters."""
    name = f"{server}__{_BAD.sub('_', tool)}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - 9]}_{digest}"


def classify(tool: mt.Tool, server: ServerConfig) -> Classification:
    policy = server.policy
    if policy is None:
        return Classification(
            safety="external", idempotent=False, resource_keys=(), personal_data="none",
            deadline_s=server.timeout_s,
        )
    override = policy.tools.get(tool.name)
    ann = tool.annotations if policy.trust_annotations else None
    read_only_hint = bool(ann and ann.read_only_hint)
    idem_hint = bool(ann and ann.idempotent_hint)

    safety: Safety = policy.safety
    idempotent = policy.idempotent
    if read_only_hint:
        safety, idempotent = "read_only", True
    elif idem_hint:
        idempotent = True
    resource_keys = policy.resource_keys
    personal = policy.personal_data
    deadline = server.timeout_s
    if override is not None:
        if override.safety is not None:
            safety = override.safety
            # The operator's level replaces the server's read-only claim, and with it the
            # idempotence that claim implied; a read-only tool has no effect to repeat.
            idempotent = safety == "read_only" or idem_hint or policy.idempotent
        if override.idempotent is not None:
            idempotent = override.idempotent
        if override.resource_keys is not None:
            resource_keys = override.resource_keys
        if override.personal_data is not None:
            personal = override.personal_data
        if override.deadline_s is not None:
            deadline = override.deadline_s
    return Classification(
        safety=safety, idempotent=idempotent, resource_keys=tuple(resource_keys),
        personal_data=personal, deadline_s=deadline,
    )


def _key_function(
    templates: Sequence[str],
) -> Callable[[dict[str, Any], ToolContext], Sequence[str]] | None:
    if not templates:
        return None
    formatter = string.Formatter()

    def keys(args: dict[str, Any], ctx: ToolContext) -> list[str]:
        out = []
        for tpl in templates:
            fields = [f for _, f, _, _ in formatter.parse(tpl) if f]
            if all(f in args for f in fields):
                out.append(tpl.format_map({f: args[f] for f in fields}))
            else:
                # a placeholder the call does not fill: lock the whole family instead
                out.append(tpl.split("{", 1)[0] + "*")
        return out

    return keys


def result_to_output(result: mt.CallToolResult) -> list[TextBlock | ImageBlock]:
    """MCP content → GEODE blocks; kinds the model cannot take become a text note."""
    blocks: list[TextBlock | ImageBlock] = []
    for item in result.content:
        if isinstance(item, mt.TextContent):
            blocks.append(TextBlock(text=item.text))
        elif isinstance(item, mt.ImageContent):
            blocks.append(ImageBlock(media_type=item.mime_type, data=item.data))
        elif isinstance(item, mt.EmbeddedResource):
            res = item.resource
            text = getattr(res, "text", None)
            if isinstance(text, str):
                blocks.append(TextBlock(text=text))
            else:
                mime = getattr(res, "mime_type", None) or "binary"
                blocks.append(TextBlock(text=f"[embedded resource {res.uri} ({mime})]"))
        elif isinstance(item, mt.ResourceLink):
            blocks.append(TextBlock(text=f"[resource link {item.uri}: {item.name}]"))
        elif isinstance(item, mt.AudioContent):
            blocks.append(TextBlock(text=f"[audio content ({item.mime_type}) omitted]"))
        else:
            blocks.append(TextBlock(text=f"[{getattr(item, 'type', 'unknown')} content omitted]"))
    if not blocks and result.structured_content is not None:
        blocks.append(TextBlock(text=json.dumps(result.structured_content, ensure_ascii=False)))
    return blocks


def _error_text(result: mt.CallToolResult) -> str:
    texts = [b.text for b in result_to_output(result) if isinstance(b, TextBlock)]
    return "\n".join(texts) or "the MCP tool reported an error without a message"


def _input_schema(tool: mt.Tool) -> dict[str, Any]:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    return schema


def build_tooldef(server: ServerConfig, tool: mt.Tool, caller: ToolCaller) -> ToolDef:
    """The ToolDef the model sees for one MCP tool of ``server``."""
    cls = classify(tool, server)
    remote_name = tool.name
    server_name = server.name

    async def handler(ctx: ToolContext, **args: Any) -> ToolOutput:
        result = await caller(
            server_name, remote_name, args, deadline_s=cls.deadline_s, retry_safe=cls.idempotent
        )
        if result.is_error:
            raise ToolFailure(_error_text(result))
        return list(result_to_output(result))

    description = tool.description or tool.title or f"{remote_name} (MCP server {server_name})"
    return ToolDef(
        name=model_tool_name(server_name, remote_name),
        description=description,
        input_schema=_input_schema(tool),
        handler=handler,
        safety=cls.safety,
        personal_data=cls.personal_data,
        resource_keys=_key_function(cls.resource_keys),
        idempotent=cls.idempotent,
        deadline_s=cls.deadline_s,
        source=f"mcp:{server_name}",
    )
