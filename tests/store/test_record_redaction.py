"""Redaction and bounding of observation payloads."""

from __future__ import annotations

import pytest

from geode.store.record_redaction import MASK, bound, redact


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "API-KEY",
        "x-api-key",
        "apikey",
        "Authorization",
        "token",
        "bot_token",
        "access_token",
        "client_secret",
        "password",
        "db_passwd",
        "refresh_token_value",
    ],
)
def test_credential_keys_are_masked(key: str) -> None:
    assert redact({key: "value-123"}) == {key: MASK}


def test_usage_counters_and_ordinary_keys_are_kept() -> None:
    usage = {"input_tokens": 12, "output_tokens": 3, "path": "/tmp/x", "keyboard": "qwerty"}
    assert redact(usage) == usage


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("key sk-ant-api03-abcdefghijklmnop end", "sk-ant-api03-abcdefghijklmnop"),
        ("key sk-proj-abcdefghijklmnopqrstu end", "sk-proj-abcdefghijklmnopqrstu"),
        ("xoxb-123456789012-abcdefABCDEF", "xoxb-123456789012-abcdefABCDEF"),
        ("xapp-1-A012345-99-abcdef", "xapp-1-A012345-99-abcdef"),
        ("Authorization: Bearer eyJhbGciOi.JIUzI1NiJ9", "eyJhbGciOi.JIUzI1NiJ9"),
        (
            "https://api.telegram.org/bot123456:ABCdefGHIjklMNOpqrSTUvwxYZ0123456789/getMe",
            "123456:ABCdefGHIjklMNOpqrSTUvwxYZ0123456789",
        ),
    ],
)
def test_key_shapes_are_masked_inside_text(text: str, secret: str) -> None:
    out = redact({"msg": text, "list": [text]})
    assert secret not in out["msg"] and MASK in out["msg"]
    assert secret not in out["list"][0]


def test_literal_secrets_and_structure() -> None:
    obj = {"a": ["say s3cr3t-value now", ("s3cr3t-value",)], "b": None, "n": 1.5, "ok": True}
    out = redact(obj, secrets=["s3cr3t-value", "ab"])  # "ab" is too short to mask
    assert out == {"a": [f"say {MASK} now", [MASK]], "b": None, "n": 1.5, "ok": True}
    assert obj["a"][0] == "say s3cr3t-value now"  # input untouched


def test_bound_limits_depth_items_and_strings() -> None:
    deep: dict[str, object] = {}
    cur = deep
    for _ in range(20):
        cur["d"] = {}
        cur = cur["d"]  # type: ignore[assignment]
    out = bound(
        {"deep": deep, "s": "x" * 50, "l": list(range(10)), "o": object()},
        max_depth=5,
        max_items=4,
        max_string=10,
    )
    assert out["s"].startswith("x" * 10) and "truncated 40" in out["s"]
    assert out["l"] == [0, 1, 2, 3, "[6 more items]"]
    assert isinstance(out["o"], str)
    node = out["deep"]
    for _ in range(3):
        node = node["d"]
    assert node == {"d": "[depth limit]"}
