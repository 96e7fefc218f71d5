"""Consumer timeout as RabbitMQ 4.3 does it, through pika.

A client with consumer_cancel_notify (pika announces it) has two
consumers on one channel; one holds its message past the timeout: it
gets basic.cancel, its message goes back (a return, not a failed
attempt), the other consumer keeps receiving, and the late ack is
ignored. A client that leaves the capability out has its channel closed
with 406 instead, its connection stays.

usage: pika_timeout.py CONSUME_URL PUBLISH_URL TIMEOUT_MS
Exits 0 when every check holds; prints what failed otherwise.
"""
import sys
import time

import pika

QUORUM = {"x-queue-type": "quorum"}


def fail(msg):
    print("FAILED: " + msg, file=sys.stderr)
    sys.exit(1)


def pump(connection, cond, timeout):
    """Processes the connection's events until cond() holds or timeout."""
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    return cond()


def timeout_text(channel, ms):
    return ("PRECONDITION_FAILED - delivery acknowledgement on channel %d timed out. "
            "Timeout value used: %d ms. This timeout value can be configured, "
            "see consumers doc guide to learn more" % (channel, ms))


def fresh(ch, *names):
    for name in names:
        ch.queue_delete(name)
        ch.queue_declare(name, durable=True, arguments=QUORUM)


def with_capability(url, pub, timeout_ms):
    fresh(pub, "pika-ct-slow", "pika-ct-busy")
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    slow, busy, cancelled = [], [], []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    ch.basic_consume("pika-ct-slow", lambda c, m, p, b: slow.append(m), consumer_tag="slow")

    def on_busy(c, m, p, b):
        busy.append(b)
        c.basic_ack(m.delivery_tag)

    ch.basic_consume("pika-ct-busy", on_busy, consumer_tag="busy")
    since = time.monotonic()
    pub.basic_publish("", "pika-ct-slow", b"held")
    if not pump(conn, lambda: slow, 30):
        fail("the slow consumer got nothing")
    # The other consumer of the channel works on while the first waits.
    n = 0
    deadline = since + timeout_ms / 1000 + 90
    while not cancelled and not ch.is_closed and time.monotonic() < deadline:
        n += 1
        pub.basic_publish("", "pika-ct-busy", b"b%d" % n)
        conn.process_data_events(time_limit=0.1)
    if cancelled != ["slow"]:
        fail("basic.cancel for %r, want ['slow']" % cancelled)
    if time.monotonic() - since < timeout_ms / 1000:
        fail("cancelled before the timeout")
    if ch.is_closed:
        fail("the channel closed")
    pub.basic_publish("", "pika-ct-busy", b"after")
    if not pump(conn, lambda: b"after" in busy, 30):
        fail("after the timeout the channel's other consumer got nothing")
    # The late ack of the message taken back is ignored: the channel stays.
    ch.basic_ack(slow[0].delivery_tag)
    ch.queue_declare("pika-ct-slow", passive=True)
    if ch.is_closed or len(slow) != 1:
        fail("after the late ack: closed %r, slow got %d" % (ch.is_closed, len(slow)))
    method, props, body = pub.basic_get("pika-ct-slow", auto_ack=True)
    if method is None or body != b"held" or not method.redelivered:
        fail("the message taken back: %r %r" % (method, body))
    headers = props.headers or {}
    # A return, not a failed delivery attempt (RabbitMQ 4.3).
    if headers.get("x-acquired-count") != 1 or headers.get("x-delivery-count", 0) != 0:
        fail("headers of the returned message %r" % headers)
    conn.close()
    pub.queue_delete("pika-ct-slow")
    pub.queue_delete("pika-ct-busy")


def without_capability(url, pub, timeout_ms):
    fresh(pub, "pika-ct-nocap")
    params = pika.URLParameters(url)
    # Replaces pika's capabilities table: every one but
    # consumer_cancel_notify.
    params.client_properties = {"capabilities": {
        "publisher_confirms": True, "exchange_exchange_bindings": True, "basic.nack": True,
        "connection.blocked": True, "authentication_failure_close": True,
        "consumer_cancel_notify": False}}
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    got = []
    ch.basic_consume("pika-ct-nocap", lambda c, m, p, b: got.append(b), consumer_tag="slow")
    pub.basic_publish("", "pika-ct-nocap", b"held")
    conn.call_later(timeout_ms / 1000 + 90, ch.stop_consuming)
    try:
        ch.start_consuming()
        fail("the channel was not closed")
    except pika.exceptions.ChannelClosedByBroker as e:
        want = timeout_text(ch.channel_number, timeout_ms)
        if e.reply_code != 406 or e.reply_text != want:
            fail("closed with %d %r, want 406 %r" % (e.reply_code, e.reply_text, want))
    if got != [b"held"]:
        fail("the consumer got %r" % got)
    # Only the channel went.
    conn.channel().queue_declare("pika-ct-nocap", passive=True)
    conn.close()
    pub.queue_delete("pika-ct-nocap")


def main():
    url, pub_url, timeout_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pub_conn = pika.BlockingConnection(pika.URLParameters(pub_url))
    pub = pub_conn.channel()
    pub.confirm_delivery()
    with_capability(url, pub, timeout_ms)
    without_capability(url, pub, timeout_ms)
    pub_conn.close()
    print("ok")


if __name__ == "__main__":
    main()
