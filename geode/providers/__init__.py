"""Model adapters, the model catalog, error mapping and the retry policy.

The vendor adapters (``AnthropicProvider``, ``OpenAICompatProvider``) are imported on first
use: each SDK takes about a second to import and most processes need at most one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from geode.providers.base import BaseProvider, ModelRequest
from geode.providers.catalog import (
    DEFAULT_MODEL,
    PROVIDERS,
    ModelRef,
    ProviderInfo,
    default_model_for,
    list_models,
    resolve_model,
)
from geode.providers.factory import build_provider
from geode.providers.retry import RetryPolicy, call_with_retry
from geode.providers.scripted import ScriptedProvider, ToolCall

if TYPE_CHECKING:
    from geode.providers.anthropic import AnthropicProvider
    from geode.providers.openai_compat import OpenAICompatProvider

__all__ = [
    "DEFAULT_MODEL",
    "PROVIDERS",
    "AnthropicProvider",
    "BaseProvider",
    "ModelRef",
    "ModelRequest",
    "OpenAICompatProvider",
    "ProviderInfo",
    "RetryPolicy",
    "ScriptedProvider",
    "ToolCall",
    "build_provider",
    "call_with_retry",
    "default_model_for",
    "list_models",
    "resolve_model",
]

_LAZY = {
    "AnthropicProvider": "geode.providers.anthropic",
    "OpenAICompatProvider": "geode.providers.openai_compat",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
