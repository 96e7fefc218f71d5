"""Uses a queue with delayed retry (RabbitMQ 4.3's x-delayed-retry-*)
through pika: declare and publish on one node, consume on another; a
rejected message comes back after min x delivery-count, a nacked one
after min without counting a failed attempt.

usage: pika_retry.py PUBLISH_URL CONSUME_URL
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

    bad = pub.channel()
    try:
        bad.queue_declare("pika-retry-bad", durable=True, arguments={"x-delayed-retry-type": "later"})
        fail("x-delayed-retry-type 'later' was accepted")
    except pika.exceptions.ChannelClosedByBroker as e:
        want = ("PRECONDITION_FAILED - invalid arg 'x-delayed-retry-type' for queue 'pika-retry-bad' "
                "in vhost '/': {unknown_delayed_retry_type,<<\"later\">>}")
        if e.reply_code != 406 or e.reply_text != want:
            fail("bad declare: %d %r" % (e.reply_code, e.reply_text))

    ch = pub.channel()
    ch.queue_declare("pika-retry-q", durable=True, arguments={
        "x-queue-type": "quorum", "x-delayed-retry-type": "all",
        "x-delayed-retry-min": 600, "x-delayed-retry-max": 5000})
    ch.confirm_delivery()
    ch.basic_publish("", "pika-retry-q", b"job", pika.BasicProperties(delivery_mode=2))

    cons = pika.BlockingConnection(pika.URLParameters(cons_url))
    cch = cons.channel()
    cch.basic_qos(prefetch_count=1)
    # (how it is handed back, the least wait after it, and the counts the
    # next delivery carries: x-acquired-count, x-delivery-count)
    steps = [("first", 0, 0, 0), ("reject", 0.6, 1, 1), ("reject", 1.2, 2, 2), ("nack", 1.2, 3, 2)]
    at = time.time()
    i = 0
    deadline = time.time() + 60
    for method, props, body in cch.consume("pika-retry-q", inactivity_timeout=0.1):
        if time.time() > deadline:
            fail("stuck at step %d" % i)
        if method is None:
            continue
        how, wait, acquired, delivery = steps[i]
        waited = time.time() - at
        if waited < wait:
            fail("step %d (%s): back after %.3f s, before %.1f s" % (i, how, waited, wait))
        headers = props.headers or {}
        got = (headers.get("x-acquired-count", 0), headers.get("x-delivery-count", 0))
        if got != (acquired, delivery):
            fail("step %d (%s): counts %r, want %r" % (i, how, got, (acquired, delivery)))
        if i == len(steps) - 1:
            cch.basic_ack(method.delivery_tag)
            break
        nxt = steps[i + 1][0]
        at = time.time()
        if nxt == "reject":
            cch.basic_reject(method.delivery_tag, requeue=True)
        else:
            cch.basic_nack(method.delivery_tag, requeue=True)
        # Waiting, so not ready: a passive declare counts none.
        if ch.queue_declare("pika-retry-q", passive=True).method.message_count != 0:
            fail("step %d: counted ready while it waits" % i)
        i += 1
    cch.cancel()
    print("delayed retry through pika: ok")


if __name__ == "__main__":
    main()
