"""Per-platform metrics of the channel layer: messages received, replies sent with their
latency, deliveries retried and rate-limit answers (429s from the fake Telegram)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.bots.conftest import CHAT, finals, settled

TG = (("platform", "telegram"),)


def _samples(stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = stack.daemon.metrics.render().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_a_429_the_sdk_sleeps_off_counts_as_rate_limited_not_as_a_retried_delivery(
    make_stack, fake
):
    stack = make_stack()
    await stack.start()
    # the final answer is delivered by editing the progress message: its first edit gets a 429
    fake.fail_next("editMessageText", status=429, retry_after=1, chat_id=CHAT)
    fake.user_says(CHAT, "@geode_bot count me", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: count me"), within=15)
    await settled(stack)
    got = _samples(stack)
    assert got[("geode_channel_messages_received_total", TG)] == 1
    assert got[("geode_channel_replies_sent_total", TG)] == 1
    assert got[("geode_channel_reply_latency_seconds_count", TG)] == 1
    assert got[("geode_channel_reply_latency_seconds_sum", TG)] >= 1.0  # the 429's second
    assert got[("geode_channel_rate_limited_total", TG)] == 1
    assert got.get(("geode_channel_deliveries_retried_total", TG), 0) == 0


async def test_a_429_longer_than_the_sdk_waits_is_a_retried_delivery(make_stack, fake):
    # a retry_after above max_retry_after_s is raised to the deliverer, which retries later
    stack = make_stack(options={"max_retry_after_s": 0.5})
    await stack.start()
    fake.fail_next("editMessageText", status=429, retry_after=1, chat_id=CHAT)
    fake.user_says(CHAT, "@geode_bot once more", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: once more"), within=15)
    await settled(stack)
    got = _samples(stack)
    assert got[("geode_channel_replies_sent_total", TG)] == 1
    assert got[("geode_channel_deliveries_retried_total", TG)] == 1
    assert got[("geode_channel_rate_limited_total", TG)] == 1


async def test_a_channel_turns_span_names_its_platform_channel_and_thread(make_stack, fake):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from geode.daemon.tracing import attach_tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    stack = make_stack()
    await stack.start()
    attach_tracing(stack.daemon.runtime.observers, provider)
    uid = fake.user_says(CHAT, "@geode_bot trace me", from_user=42)
    mid = fake.message_id_for(uid)
    await fake.wait_until(lambda: finals(fake, "answer to: trace me"), within=15)
    await settled(stack)
    (turn,) = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent geode"]
    assert turn.attributes["geode.platform"] == "telegram"
    assert turn.attributes["geode.channel"] == str(CHAT)
    assert turn.attributes["geode.thread"] == str(mid)
    assert turn.attributes["gen_ai.conversation.id"] == f"telegram:123456:{CHAT}:{mid}"
    provider.shutdown()


async def test_channel_events_reach_the_observers_typed_and_are_counted_inline(
    make_stack, fake
):
    from bots.observed import MessagesReceived, ReplySent

    stack = make_stack()
    await stack.start()
    # the typed events still reach the daemon's observers (hooks, plugins subscribe to
    # them); the counters are incremented where the thing happens, not from them
    seen: list[object] = []
    stack.daemon.runtime.observers.subscribe_events(seen.append,
                                                    only=(MessagesReceived, ReplySent))
    fake.user_says(CHAT, "@geode_bot typed please", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: typed please"), within=15)
    await settled(stack)
    assert MessagesReceived(platform="telegram", count=1) in seen
    sent = [e for e in seen if isinstance(e, ReplySent)]
    assert len(sent) == 1
    assert sent[0].platform == "telegram"
    assert isinstance(sent[0].latency_s, float)
    got = _samples(stack)
    assert got[("geode_channel_messages_received_total", TG)] == 1
    assert got[("geode_channel_replies_sent_total", TG)] == 1
    assert got[("geode_channel_reply_latency_seconds_count", TG)] == 1
    # one instance per daemon, the one its layer increments
    assert stack.connector is not None and stack.connector.layer is not None
    layer = stack.connector.layer
    assert stack.daemon.add_metrics(type(layer.metrics)) is layer.metrics
