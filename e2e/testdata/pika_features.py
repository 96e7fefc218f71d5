"""Drives priorities, the delivery limit, a single active consumer and
direct reply-to through pika, each with its publisher, consumer and
observer on different URLs (nodes).

usage: pika_features.py URL0 URL1 URL2
Exits 0 when every check holds; prints what failed otherwise.
"""
import sys
import time

import pika


def conn(url):
    return pika.BlockingConnection(pika.URLParameters(url))


def fresh(ch, name, arguments=None):
    ch.queue_delete(name)
    ch.queue_declare(name, durable=True, arguments=arguments)


def pump(connection, cond, timeout=30):
    """Processes the connection's events until cond() holds or timeout."""
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)


def check(cond, what):
    if not cond:
        sys.exit("FAILED: " + what)


def priorities(pub, obs):
    fresh(pub, "pika-prio", {"x-max-priority": 5})
    pub.confirm_delivery()
    sent = [(1, "a"), (5, "b"), (None, "c"), (9, "d"), (1, "e"), (3, "f")]
    for prio, body in sent:
        pub.basic_publish("", "pika-prio", body.encode(), pika.BasicProperties(priority=prio))
    got = []
    while True:
        method, _, body = obs.basic_get("pika-prio", auto_ack=True)
        if method is None:
            break
        got.append(body.decode())
    # 9 counts as the maximum 5; no priority counts as 0.
    check(got == ["b", "d", "f", "a", "e", "c"], "priority order %r" % got)
    pub.queue_delete("pika-prio")


def delivery_limit(pub, cons, obs):
    pub.exchange_declare("pika-limit-dlx", "fanout", durable=True)
    fresh(pub, "pika-limit-dead")
    pub.queue_bind("pika-limit-dead", "pika-limit-dlx")
    fresh(pub, "pika-limit", {"x-queue-type": "quorum", "x-delivery-limit": 2,
                              "x-dead-letter-exchange": "pika-limit-dlx"})
    pub.basic_publish("", "pika-limit", b"poison")
    cons.basic_qos(prefetch_count=1)
    counts = []
    for method, props, body in cons.consume("pika-limit", inactivity_timeout=2):
        if method is None:
            break
        counts.append((props.headers or {}).get("x-delivery-count", 0))
        # A reject: from protocol level 8, as in RabbitMQ 4.3, a nack
        # counts no failed attempt and never reaches the limit.
        cons.basic_reject(method.delivery_tag, requeue=True)
    cons.cancel()
    check(counts == [0, 1, 2], "x-delivery-count of the deliveries %r" % counts)
    method, props, body = obs.basic_get("pika-limit-dead", auto_ack=True)
    check(method is not None and body == b"poison", "nothing dead-lettered")
    reason = props.headers["x-death"][0]["reason"]
    check(reason == "delivery_limit", "x-death reason %r" % reason)
    pub.queue_delete("pika-limit")
    pub.queue_delete("pika-limit-dead")


def single_active(pub, first, second):
    fresh(pub, "pika-sac", {"x-single-active-consumer": True})
    got = {"first": [], "second": []}

    def on(name, ch):
        def cb(c, method, props, body):
            got[name].append(body.decode())
            c.basic_ack(method.delivery_tag)
        return cb

    tag = first.basic_consume("pika-sac", on("first", first))
    second.basic_consume("pika-sac", on("second", second))
    pub.confirm_delivery()
    for i in range(10):
        pub.basic_publish("", "pika-sac", str(i).encode())
    pump(first.connection, lambda: len(got["first"]) == 10)
    # The first consumer got all ten, so none went to the waiting one.
    check(got["first"] == [str(i) for i in range(10)] and not got["second"],
          "before cancel %r" % got)
    first.basic_cancel(tag)
    for i in range(10, 15):
        pub.basic_publish("", "pika-sac", str(i).encode())
    pump(second.connection, lambda: len(got["second"]) == 5)
    check(got["second"] == [str(i) for i in range(10, 15)], "after cancel %r" % got)
    pub.queue_delete("pika-sac")


def direct_reply_to(requester, responder, observer):
    """An RPC through amq.rabbitmq.reply-to: requester, responder and
    observer each on their own node."""
    fresh(observer, "pika-rpc")
    replies = []
    requester.basic_consume("amq.rabbitmq.reply-to",
                            lambda c, m, p, b: replies.append((m, p, b)),
                            auto_ack=True)
    requests = []
    responder.basic_consume("pika-rpc",
                            lambda c, m, p, b: requests.append((m, p, b)))
    requester.basic_publish("", "pika-rpc", b"ping", pika.BasicProperties(
        reply_to="amq.rabbitmq.reply-to", correlation_id="rpc-1"))
    pump(responder.connection, lambda: requests)
    check(len(requests) == 1, "requests %r" % requests)
    method, props, body = requests[0]
    name = props.reply_to
    check(name.startswith("amq.rabbitmq.reply-to."), "reply_to %r" % name)
    # The observer checks that the requester is still there.
    ok = observer.queue_declare(name, passive=True).method
    check(ok.message_count == 0 and ok.consumer_count == 1,
          "passive declare of the reply name %r" % ok)
    responder.basic_publish("", name, b"pong:" + body, pika.BasicProperties(
        correlation_id=props.correlation_id))
    responder.basic_ack(method.delivery_tag)
    pump(requester.connection, lambda: replies)
    check(len(replies) == 1, "replies %r" % replies)
    method, props, body = replies[0]
    check(body == b"pong:ping" and props.correlation_id == "rpc-1"
          and method.routing_key == name and method.exchange == "",
          "reply %r %r %r" % (method, props, body))
    # A consumer that would acknowledge is refused.
    ch = observer.connection.channel()
    try:
        ch.basic_consume("amq.rabbitmq.reply-to", lambda *a: None)
        check(False, "an acknowledging reply consumer was accepted")
    except pika.exceptions.ChannelClosedByBroker as e:
        check(e.reply_code == 406 and "cannot acknowledge" in e.reply_text,
              "refusal %r" % e)
    # A forged name is not the requester's.
    try:
        observer.connection.channel().queue_declare(name[:-1] + "x", passive=True)
        check(False, "a forged reply name exists")
    except pika.exceptions.ChannelClosedByBroker as e:
        check(e.reply_code == 404, "forged name: %r" % e)
    observer.queue_delete("pika-rpc")


def main():
    # Fresh connections for each check: on Debian's pika, a connection
    # whose consume generator was cancelled dispatched no basic_consume
    # callbacks afterwards.
    def channels(n):
        return [conn(u).channel() for u in sys.argv[1:1 + n]]
    priorities(*channels(3)[0::2])
    delivery_limit(*channels(3))
    single_active(*channels(3))
    direct_reply_to(*channels(3))
    print("pika: priorities, delivery limit, single active consumer and "
          "direct reply-to hold")


main()
