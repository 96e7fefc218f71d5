"""Uses an x-delayed-message exchange through pika as the delayed-message
plugin's clients do: declare it with x-delayed-type, publish with an
x-delay header and publisher confirms on one node, consume on another.

usage: pika_delayed.py PUBLISH_URL CONSUME_URL
Exits 0 when every check holds; prints what failed otherwise.
"""
import sys
import time

import pika


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


def main():
    pub_url, cons_url = sys.argv[1], sys.argv[2]
    pub = pika.BlockingConnection(pika.URLParameters(pub_url))

    # Without x-delayed-type the declare fails as the plugin's does.
    bad = pub.channel()
    try:
        bad.exchange_declare("pika-bad-delayed", "x-delayed-message")
        fail("a delayed exchange without x-delayed-type was declared")
    except pika.exceptions.ChannelClosedByBroker as e:
        want = "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"
        if e.reply_code != 406 or e.reply_text != want:
            fail("declare without x-delayed-type: %d %r" % (e.reply_code, e.reply_text))

    ch = pub.channel()
    ch.exchange_declare("pika-delayed", "x-delayed-message", durable=True,
                        arguments={"x-delayed-type": "direct"})
    ch.queue_declare("pika-delayed-q", durable=True)
    ch.queue_bind("pika-delayed-q", "pika-delayed", routing_key="jobs")
    ch.confirm_delivery()

    start = time.time()
    # With confirms on, basic_publish raises unless the broker acks; a
    # mandatory publish that could not be routed would raise too.
    sent = [("int", 1200), ("string", "900"), ("bytes", b"700"), ("none", None)]
    for name, delay in sent:
        headers = {} if delay is None else {"x-delay": delay}
        ch.basic_publish("pika-delayed", "jobs", name.encode(),
                         pika.BasicProperties(headers=headers, delivery_mode=2),
                         mandatory=True)
    confirmed = time.time() - start
    if confirmed > 0.6:
        print("note: confirms took %.3f s" % confirmed)

    cons = pika.BlockingConnection(pika.URLParameters(cons_url))
    cch = cons.channel()
    got = []
    deadline = time.time() + 30
    for method, props, body in cch.consume("pika-delayed-q", inactivity_timeout=0.2):
        if method is None:
            if time.time() > deadline:
                fail("only %r arrived within 30 s" % got)
            if len(got) == len(sent):
                break
            continue
        cch.basic_ack(method.delivery_tag)
        elapsed = time.time() - start
        name = body.decode()
        got.append(name)
        delay = dict(sent)[name]
        header = (props.headers or {}).get("x-delay")
        if delay is None:
            if header is not None:
                fail("undelayed message carries x-delay %r" % header)
            continue
        ms = int(float(delay))
        if elapsed * 1000 < ms:
            fail("%s arrived after %.3f s, before its delay of %d ms" % (name, elapsed, ms))
        if header != -ms:
            fail("%s: released with x-delay %r, want %d" % (name, header, -ms))
    if got != ["none", "bytes", "string", "int"]:
        fail("arrival order %r" % got)
    print("delivered in order %r" % got)
    cch.cancel()
    cons.close()
    pub.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
