"""Attachments in, on Telegram: downloaded by the layer (getFile + the file endpoint) into the
thread's folder of the binding's workspace, named (and, for text, given inline) in the prompt;
over the binding's limit refused with a reply and never downloaded."""

from __future__ import annotations

import base64

from geode.messages import ImageBlock
from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, binding, finals, last_user_text

LOG = b"2026-12-04 boot ok\n2026-12-04 ERROR disk full on /var\n"


def document(fake, content: bytes, name: str, mime: str) -> dict:
    fid = fake.add_file(content, file_path=f"documents/{name}")
    return {"document": {"file_id": fid, "file_unique_id": f"u{fid}", "file_name": name,
                         "mime_type": mime, "file_size": len(content)}}


async def test_a_text_file_is_saved_in_the_thread_folder_and_given_inline(make_stack, fake,
                                                                          home):
    provider = ScriptedProvider(["read it"], repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding()])
    await stack.start()
    upd = fake.user_says(CHAT, "", from_user=42, extra={
        **document(fake, LOG, "boot.log", "text/plain"), "caption": "@geode_bot why?",
        "caption_entities": [{"type": "mention", "offset": 0, "length": 10}]})
    mid = fake.message_id_for(upd)
    await fake.wait_until(lambda: finals(fake, "read it"), within=10)
    folder = home / "workspaces" / f"telegram-{CHAT}" / "threads" / str(mid)
    [saved] = list(folder.iterdir())
    assert saved.read_bytes() == LOG and saved.name.endswith("boot.log")
    prompt = last_user_text(provider.calls[0])
    assert f"threads/{mid}/{saved.name}" in prompt
    assert "ERROR disk full on /var" in prompt  # inline
    assert fake.downloads == ["documents/boot.log"]


async def test_an_oversized_file_is_refused_with_a_reply_and_not_downloaded(make_stack, fake,
                                                                            home):
    provider = ScriptedProvider(["ok"], repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding(max_attachment_mb=0.001)])
    await stack.start()
    fake.user_says(CHAT, "", from_user=42, extra={
        **document(fake, b"x" * 5000, "big.csv", "text/csv"), "caption": "@geode_bot sum",
        "caption_entities": [{"type": "mention", "offset": 0, "length": 10}]})
    await fake.wait_until(lambda: [s for s in fake.sent if "big.csv" in s.plain_text],
                          within=10)
    [reply] = [s.plain_text for s in fake.sent if "big.csv" in s.plain_text]
    assert "did not read big.csv" in reply and "limit" in reply and reply.endswith("ok")
    assert fake.downloads == []  # refused before any byte
    assert "big.csv not read" in last_user_text(provider.calls[0])
    assert not list((home / "workspaces").rglob("*big.csv*"))


async def test_a_type_outside_the_bindings_list_is_refused(make_stack, fake):
    provider = ScriptedProvider(["ok"], repeat_last=True)
    stack = make_stack(provider=provider,
                       bindings=[binding(attachment_types=["text/*", ".log"])])
    await stack.start()
    fake.user_says(CHAT, "", from_user=42, extra={
        **document(fake, b"MZ\x90\x00", "tool.exe", "application/x-msdownload"),
        "caption": "@geode_bot run",
        "caption_entities": [{"type": "mention", "offset": 0, "length": 10}]})
    await fake.wait_until(lambda: [s for s in fake.sent if "tool.exe" in s.plain_text],
                          within=10)
    assert fake.downloads == []


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF showing ``text`` (hand-built: no PDF writer needed)."""
    stream = f"BT /F1 12 Tf 10 50 Td ({text}) Tj ET".encode()
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 100] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, o in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + o + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1,
                                                                            xref)
    return bytes(out)


async def test_a_pdfs_text_is_given_inline(make_stack, fake):
    provider = ScriptedProvider(["ok"], repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding()])
    await stack.start()
    fake.user_says(CHAT, "", from_user=42, extra={
        **document(fake, minimal_pdf("quarterly revenue 42"), "q4.pdf", "application/pdf"),
        "caption": "@geode_bot summary",
        "caption_entities": [{"type": "mention", "offset": 0, "length": 10}]})
    await fake.wait_until(lambda: finals(fake, "ok"), within=10)
    assert "quarterly revenue 42" in last_user_text(provider.calls[0])


PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d4944415478da63f8cfc0f01f0005000201a0e3f5d80000000049454e44ae426082")


def photo(fake, content: bytes) -> dict:
    fid = fake.add_file(content, file_path="photos/p1.jpg")
    return {"photo": [{"file_id": fid, "file_unique_id": "up1", "width": 1, "height": 1,
                       "file_size": len(content)}],
            "caption": "@geode_bot what is this?",
            "caption_entities": [{"type": "mention", "offset": 0, "length": 10}]}


async def test_an_image_reaches_a_vision_model_as_image_content(make_stack, fake, home):
    provider = ScriptedProvider(["a pixel"], repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding(model="claude-sonnet-5")])
    await stack.start()
    fake.user_says(CHAT, "", from_user=42, extra=photo(fake, PNG))
    await fake.wait_until(lambda: finals(fake, "a pixel"), within=10)
    user = [m for m in provider.calls[0].messages if m.role == "user"][-1]
    [image] = [b for b in user.content if isinstance(b, ImageBlock)]
    assert base64.b64decode(image.data) == PNG and image.media_type == "image/jpeg"
    assert list((home / "workspaces").rglob("*photo*"))  # and it is a file in the thread


async def test_an_image_is_only_described_to_a_model_without_vision(make_stack, fake):
    provider = ScriptedProvider(["no eyes"], repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding(model="glm-5.3")])
    await stack.start()
    fake.user_says(CHAT, "", from_user=42, extra=photo(fake, PNG))
    await fake.wait_until(lambda: finals(fake, "no eyes"), within=10)
    user = [m for m in provider.calls[0].messages if m.role == "user"][-1]
    assert not [b for b in user.content if isinstance(b, ImageBlock)]
    assert "not shown: glm-5.3 does not take images" in user.text
    assert "attachment saved: threads/" in user.text
