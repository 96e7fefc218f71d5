"""Drives a three-node raftmq cluster with kombu (py-amqp) as its users do.

usage: kombu_cluster.py URL_PUBLISH URL_CONSUME URL_FAILOVER

Most checks publish with publisher confirms through URL_PUBLISH and
consume through URL_CONSUME. The last one opens a failover Connection
listing all three URLs, URL_FAILOVER first; once it is connected there it
prints "KILL <port>" and reads "KILLED" from stdin, which the caller writes
after it has killed the node on that AMQP port with SIGKILL. Publishing
then has to carry on through another node with no confirmed message lost.

Every check runs even when an earlier one failed; each prints "ok NAME"
or "FAIL NAME: ..." with the traceback, and the exit status is 1 when any
failed.
"""
import datetime
import decimal
import json
import socket
import sys
import time

import amqp.exceptions
from kombu import Connection, Consumer, Exchange, Producer, Queue, binding

from clientchecks import WAIT, Failure, expect, run_check

# pickle stays out of every accept list: a consumer that accepts it runs
# whatever a publisher sends.
ACCEPT = ["json", "yaml", "application/octet-stream", "text/plain"]


def connect(url, **kw):
    # confirm_publish makes py-amqp wait for basic.ack after every
    # basic.publish and raise on basic.nack: a publish that returns is
    # one the cluster confirmed.
    opts = {"confirm_publish": True}
    opts.update(kw.pop("transport_options", {}))
    conn = Connection(url, transport="pyamqp", transport_options=opts,
                      connect_timeout=10, **kw)
    conn.ensure_connection(max_retries=3)
    return conn


def collect(conn, queues, n, timeout=WAIT, on_message=None):
    """Consumes from queues until n messages arrived; returns them.

    on_message decides what to do with each (the default acks it).
    """
    got = []

    def handle(body, message):
        got.append(message)
        if on_message:
            on_message(message)
        else:
            message.ack()

    with Consumer(conn, queues, callbacks=[handle], accept=ACCEPT,
                  prefetch_count=50):
        deadline = time.monotonic() + timeout
        while len(got) < n:
            left = deadline - time.monotonic()
            expect(left > 0, "%d of %d messages arrived from %s within %d s: %r",
                   len(got), n, [q.name for q in queues], timeout,
                   [m.payload for m in got])
            try:
                conn.drain_events(timeout=min(left, 1))
            except socket.timeout:
                pass
    return got


def left_over(conn, queue):
    """A message still in queue (fetched with basic.get and acked), or None."""
    m = queue(conn.default_channel).get(accept=ACCEPT)
    if m is not None:
        m.ack()
        return m.payload
    return None


def queue_exists(conn, name):
    ch = conn.channel()
    try:
        ch.queue_declare(queue=name, passive=True)
        return True
    except amqp.exceptions.NotFound:
        return False
    finally:
        try:
            ch.close()
        except Exception:
            pass


def message_count(conn, name):
    ch = conn.channel()
    try:
        return ch.queue_declare(queue=name, passive=True).message_count
    finally:
        ch.close()


def await_count(conn, name, want):
    deadline = time.monotonic() + WAIT
    while True:
        n = message_count(conn, name)
        if n == want:
            return
        expect(time.monotonic() < deadline, "%s holds %d messages after %d s, want %d",
               name, n, WAIT, want)
        time.sleep(0.1)


def check_topology(pub, cons):
    """Direct, topic and exchange-to-exchange routing, unbinding, mandatory returns."""
    direct = Exchange("kombu-direct", "direct", durable=True)
    topic = Exchange("kombu-topic", "topic", durable=True)
    # An exchange bound to an exchange: only "audit.*" keys reach it.
    audit = Exchange("kombu-audit", "fanout", durable=True)
    audit(pub.default_channel).declare()
    topic(pub.default_channel).declare()
    audit(pub.default_channel).bind_to(topic, routing_key="audit.*")
    queues = {
        "images": Queue("kombu-images", direct, routing_key="images"),
        "video": Queue("kombu-video", direct, routing_key="video"),
        "eu": Queue("kombu-eu", topic, routing_key="eu.#"),
        "orders": Queue("kombu-orders", topic, routing_key="*.orders"),
        # One queue bound to both exchanges.
        "multi": Queue("kombu-multi", bindings=[
            binding(direct, routing_key="images"),
            binding(topic, routing_key="us.*")]),
        "audit": Queue("kombu-audit", audit),
    }
    for q in queues.values():
        q(pub.default_channel).declare()
    sends = [
        (direct, "images", ["images", "multi"]),
        (direct, "video", ["video"]),
        (direct, "audio", []),
        (topic, "eu.de.orders", ["eu"]),
        (topic, "us.orders", ["orders", "multi"]),
        (topic, "eu.orders", ["eu", "orders"]),
        (topic, "us.invoices.x", []),
        (topic, "eu", ["eu"]),
        (topic, "audit.login", ["audit"]),
        (topic, "audit.orders", ["audit", "orders"]),
        (topic, "audit.login.failed", []),
    ]
    producer = Producer(pub)
    want = {k: [] for k in queues}
    for i, (ex, key, dests) in enumerate(sends):
        body = {"i": i, "exchange": ex.name, "key": key}
        producer.publish(body, exchange=ex, routing_key=key, serializer="json")
        for d in dests:
            want[d].append(body)
    for name, q in queues.items():
        got = collect(cons, [q], len(want[name]))
        bodies = [m.payload for m in got]
        expect(bodies == want[name], "%s received %r, want %r", q.name, bodies, want[name])
        for m in got:
            info = m.delivery_info
            expect(info["exchange"] == m.payload["exchange"] and info["routing_key"] == m.payload["key"],
                   "%s: delivery_info %r for %r", q.name, info, m.payload)
        extra = left_over(cons, q)
        expect(extra is None, "%s received %r beyond %r", q.name, extra, want[name])

    # Unbound, kombu-multi no longer gets "us.*".
    queues["multi"](pub.default_channel).unbind_from(topic, routing_key="us.*")
    body = {"i": "after-unbind", "exchange": "kombu-topic", "key": "us.orders"}
    producer.publish(body, exchange=topic, routing_key="us.orders", serializer="json")
    got = [m.payload for m in collect(cons, [queues["orders"]], 1)]
    expect(got == [body], "kombu-orders received %r after the unbind, want %r", got, [body])
    extra = left_over(cons, queues["multi"])
    expect(extra is None, "kombu-multi received %r after its unbind from us.*", extra)

    # A mandatory message no queue takes comes back in basic.return, which
    # RabbitMQ sends before the confirm: it has arrived when publish returns.
    returned = []

    def on_return(exc, exchange, routing_key, message):
        returned.append((getattr(exc, "reply_code", exc), exchange, routing_key, json.loads(message.body)))

    mandatory = Producer(pub, on_return=on_return)
    mandatory.publish({"routed": True}, exchange=direct, routing_key="video", mandatory=True,
                      serializer="json")
    mandatory.publish({"routed": False}, exchange=direct, routing_key="audio", mandatory=True,
                      serializer="json")
    want_ret = [(312, "kombu-direct", "audio", {"routed": False})]
    expect(returned == want_ret, "returned %r, want %r", returned, want_ret)
    got = [m.payload for m in collect(cons, [queues["video"]], 1)]
    expect(got == [{"routed": True}], "kombu-video received %r for the routed mandatory message", got)


def check_serializers_and_properties(pub, cons):
    """Bodies of each pickle-free serializer, headers and properties arrive as sent."""
    ex = Exchange("kombu-props", "direct", durable=True)
    q = Queue("kombu-props", ex, routing_key="props")
    q(pub.default_channel).declare()
    stamp = datetime.datetime(2024, 2, 29, 12, 30, 45)
    headers = {
        "x-str": "wörd",
        "x-int": 42,
        "x-neg": -7,
        "x-long": 2 ** 40,
        "x-float": 1.5,
        "x-true": True,
        "x-false": False,
        "x-none": None,
        "x-decimal": decimal.Decimal("12.34"),
        "x-time": stamp,
        "x-list": [1, "a", [2, "b"], {"k": "v"}],
        "x-table": {"k": "v", "n": 1, "inner": {"deep": True}},
    }
    props = {
        "correlation_id": "corr-1",
        "reply_to": "kombu-replies",
        "message_id": "msg-1",
        "timestamp": 1700000000,
        "type": "kombu.test",
        "app_id": "kombu-e2e",
        "user_id": "guest",
        "priority": 5,
    }
    # (kind, body, publish options, content type and encoding on arrival)
    sends = [
        ("json", {"n": 1, "text": "ünïcode", "list": [1, 2.5, None, True], "nested": {"a": "b"}},
         {"serializer": "json"}, ("application/json", "utf-8")),
        ("raw", b"\x00\x01\xfe\xffbinary",
         {"content_type": "application/octet-stream", "content_encoding": "binary"},
         ("application/octet-stream", "binary")),
        ("text", "plain text ✓", {"content_type": "text/plain", "content_encoding": "utf-8"},
         ("text/plain", "utf-8")),
    ]
    try:
        import yaml  # noqa: F401  (python3-yaml is only recommended by python3-kombu)
        sends.append(("yaml", {"when": "yaml", "items": [1, 2]}, {"serializer": "yaml"},
                      ("application/x-yaml", "utf-8")))
    except ImportError:
        print("note: no yaml module, the yaml body is not sent")
    producer = Producer(pub, exchange=ex, routing_key="props")
    for i, (kind, body, opts, _) in enumerate(sends):
        # Both delivery modes must come back as sent.
        mode = 2 if i % 2 == 0 else 1
        producer.publish(body, headers=dict(headers, kind=kind), delivery_mode=mode,
                         expiration=600, **opts, **props)
    got = collect(cons, [q], len(sends))
    for i, ((kind, body, _, ctype), m) in enumerate(zip(sends, got)):
        expect(m.headers.get("kind") == kind, "messages out of order: %r for %s", m.headers, kind)
        expect(m.payload == body, "%s body: got %r, want %r", kind, m.payload, body)
        expect((m.content_type, m.content_encoding) == ctype, "%s content type and encoding %r, want %r",
               kind, (m.content_type, m.content_encoding), ctype)
        h = dict(m.headers)
        h.pop("kind")
        expect(h == headers, "%s headers: got %r, want %r", kind, h, headers)
        for k, v in props.items():
            expect(m.properties.get(k) == v, "%s property %s: got %r, want %r (all: %r)",
                   kind, k, m.properties.get(k), v, m.properties)
        expect(m.properties.get("expiration") == "600000", "%s expiration %r",
               kind, m.properties.get("expiration"))
        mode = 2 if i % 2 == 0 else 1
        expect(m.properties.get("delivery_mode") == mode, "%s delivery_mode %r, want %d",
               kind, m.properties.get("delivery_mode"), mode)


def check_simple_queue(pub, cons):
    """SimpleQueue: put on one node, qsize, get and ack on another, clear."""
    with pub.SimpleQueue("kombu-simple") as sq:
        for i in range(3):
            sq.put({"n": i}, serializer="json")
    with cons.SimpleQueue("kombu-simple", accept=ACCEPT) as sq:
        # qsize is a passive declare's message count, here on another node.
        deadline = time.monotonic() + WAIT
        while sq.qsize() != 3:
            expect(time.monotonic() < deadline, "qsize %d, want 3", sq.qsize())
            time.sleep(0.1)
        got = []
        for _ in range(3):
            m = sq.get(timeout=WAIT)
            got.append(m.payload)
            m.ack()
        expect(got == [{"n": 0}, {"n": 1}, {"n": 2}], "SimpleQueue got %r", got)
        try:
            m = sq.get_nowait()
            raise Failure("SimpleQueue had a 4th message: %r" % (m.payload,))
        except sq.Empty:
            pass
    with pub.SimpleQueue("kombu-simple") as sq:
        for i in range(4):
            sq.put({"n": i}, serializer="json")
        n = sq.clear()
        expect(n == 4, "SimpleQueue.clear() purged %r, want 4", n)
        expect(sq.qsize() == 0, "qsize after clear %d", sq.qsize())


def check_ack_reject_requeue(pub, cons):
    """A Consumer acks, rejects and requeues; the requeued one comes back redelivered."""
    q = Queue("kombu-acks", Exchange("kombu-acks", "direct"), routing_key="acks")
    q(pub.default_channel).declare()
    producer = Producer(pub, exchange=q.exchange, routing_key="acks")
    for body in ["ack-me", "reject-me", "requeue-me"]:
        producer.publish(body, serializer="json")
    seen = []

    def decide(m):
        seen.append((m.payload, m.delivery_info["redelivered"]))
        if m.payload == "reject-me":
            m.reject()
        elif m.payload == "requeue-me" and not m.delivery_info["redelivered"]:
            m.requeue()
        else:
            m.ack()

    collect(cons, [q], 4, on_message=decide)
    want = [("ack-me", False), ("reject-me", False), ("requeue-me", False), ("requeue-me", True)]
    expect(seen == want, "deliveries %r, want %r", seen, want)
    extra = left_over(cons, q)
    expect(extra is None, "%r is still in the queue after ack, reject and ack of the requeued", extra)
    await_count(cons, q.name, 0)


def check_ttl_dead_letter(pub, cons):
    """Queue TTL, per-message TTL and reject dead-letter with x-death."""
    dlx = Exchange("kombu-dlx", "direct", durable=True)
    dead = Queue("kombu-dead", dlx, routing_key="dead")
    work = Exchange("kombu-work", "direct", durable=True)
    dl_args = {"x-dead-letter-exchange": "kombu-dlx", "x-dead-letter-routing-key": "dead"}
    ttl_q = Queue("kombu-ttl", work, routing_key="ttl", message_ttl=0.3, queue_arguments=dl_args)
    plain_q = Queue("kombu-dl", work, routing_key="dl", queue_arguments=dl_args)
    for q in (dead, ttl_q, plain_q):
        q(pub.default_channel).declare()
    producer = Producer(pub, exchange=work)
    start = time.monotonic()
    producer.publish({"why": "queue-ttl"}, routing_key="ttl", serializer="json")
    # The message to reject goes first: it is kombu-dl's head, which
    # basic.get takes, while the one behind it expires.
    producer.publish({"why": "rejected"}, routing_key="dl", serializer="json")
    producer.publish({"why": "message-ttl"}, routing_key="dl", serializer="json", expiration=0.2)

    def get_rejectable():
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            m = plain_q(cons.default_channel).get(accept=ACCEPT)
            if m is None:
                time.sleep(0.05)
                continue
            if m.payload == {"why": "rejected"}:
                return m
            m.ack()
            raise Failure("kombu-dl's head is %r, want the message to reject" % (m.payload,))
        raise Failure("the message to reject never reached kombu-dl")

    get_rejectable().reject()
    got = {m.payload["why"]: m for m in collect(cons, [dead], 3)}
    took = time.monotonic() - start
    expect(set(got) == {"queue-ttl", "message-ttl", "rejected"}, "dead-lettered %r", sorted(got))
    expect(took >= 0.3, "expired messages dead-lettered after %.3f s, before the 0.3 s TTL", took)
    want = {
        "queue-ttl": ("expired", "kombu-ttl", ["ttl"], None),
        "message-ttl": ("expired", "kombu-dl", ["dl"], "200"),
        "rejected": ("rejected", "kombu-dl", ["dl"], None),
    }
    for why, (reason, queue, keys, orig_exp) in want.items():
        m = got[why]
        h = m.headers or {}
        deaths = h.get("x-death")
        expect(isinstance(deaths, list) and len(deaths) == 1, "%s: x-death %r", why, deaths)
        d = deaths[0]
        expect(d.get("count") == 1 and d.get("reason") == reason and d.get("queue") == queue
               and d.get("exchange") == "kombu-work" and d.get("routing-keys") == keys,
               "%s: x-death %r, want count 1, reason %s, queue %s, exchange kombu-work, routing-keys %r",
               why, d, reason, queue, keys)
        expect(isinstance(d.get("time"), datetime.datetime), "%s: x-death time %r", why, d.get("time"))
        expect(d.get("original-expiration") == orig_exp, "%s: original-expiration %r, want %r",
               why, d.get("original-expiration"), orig_exp)
        expect(h.get("x-first-death-reason") == reason and h.get("x-first-death-queue") == queue
               and h.get("x-first-death-exchange") == "kombu-work",
               "%s: x-first-death-* %r", why, {k: v for k, v in h.items() if k.startswith("x-first")})
        expect(m.delivery_info["exchange"] == "kombu-dlx" and m.delivery_info["routing_key"] == "dead",
               "%s: dead letter arrived as %r", why, m.delivery_info)
        if orig_exp:
            expect("expiration" not in m.properties, "%s: the dead letter still has expiration %r",
                   why, m.properties.get("expiration"))


def check_queue_expires(pub, cons):
    """A queue with x-expires goes away once unused, and not before."""
    q = Queue("kombu-expires", Exchange("kombu-expires", "direct"), routing_key="x", expires=1.0)
    # Taken before the declare: the broker's 1 s starts after it.
    before = time.monotonic()
    q(pub.default_channel).declare()
    # A passive declare on another node sees it. In RabbitMQ a passive
    # declare is a use that starts the expiry over: the polls after the
    # first look leave more than the 1 s between them.
    deadline = before + WAIT
    while not queue_exists(cons, q.name):
        expect(time.monotonic() < deadline, "%s not visible on the other node", q.name)
        time.sleep(0.1)
    time.sleep(max(0, before + 0.5 - time.monotonic()))
    there = queue_exists(cons, q.name)
    answered = time.monotonic() - before
    expect(there or answered >= 1.0, "%s gone %.3f s after its declare, before its 1 s x-expires",
           q.name, answered)
    while there:
        time.sleep(1.5)
        there = queue_exists(cons, q.name)
        expect(not there or time.monotonic() < deadline, "%s still there %d s after its declare",
               q.name, time.monotonic() - before)
    expect(not queue_exists(pub, q.name), "%s gone on one node but not on the other", q.name)


def check_auto_delete(pub, cons):
    """An auto_delete queue goes away when its last consumer cancels."""
    q = Queue("kombu-autodelete", Exchange("kombu-autodelete", "direct"), routing_key="ad",
              auto_delete=True)
    consumer = Consumer(pub, [q], callbacks=[lambda body, m: m.ack()], accept=ACCEPT)
    consumer.consume()
    deadline = time.monotonic() + WAIT
    while not queue_exists(cons, q.name):
        expect(time.monotonic() < deadline, "%s not visible on the other node", q.name)
        time.sleep(0.1)
    consumer.cancel()
    while queue_exists(cons, q.name):
        expect(time.monotonic() < deadline, "%s still there %d s after its consumer cancelled",
               q.name, WAIT)
        time.sleep(0.1)


def check_purge_delete(pub, cons):
    """queue.purge() and queue.delete() return the message counts."""
    q = Queue("kombu-purge", Exchange("kombu-purge", "direct", durable=True), routing_key="p")
    q(pub.default_channel).declare()
    producer = Producer(pub, exchange=q.exchange, routing_key="p")
    for i in range(5):
        producer.publish({"n": i}, serializer="json")
    n = q(cons.default_channel).purge()
    expect(n == 5, "purge() returned %r, want 5", n)
    for i in range(3):
        producer.publish({"n": i}, serializer="json")
    n = q(cons.default_channel).delete()
    expect(n == 3, "delete() returned %r, want 3", n)
    expect(not queue_exists(pub, q.name), "%s still there after delete()", q.name)


def check_failover(urls, failover_url):
    """kill -9 of the node a failover Connection is on: ensure/autoretry publish on."""
    ordered = [failover_url] + [u for u in urls if u != failover_url]
    errors = []

    def errback(exc, interval):
        errors.append(repr(exc))

    policy = {"max_retries": 20, "interval_start": 0.2, "interval_step": 0.5,
              "interval_max": 2, "errback": errback}
    conn = connect(ordered, failover_strategy="round-robin",
                   transport_options={"max_retries": 20, "interval_start": 0.2,
                                      "interval_step": 0.5, "interval_max": 2})
    ex = Exchange("kombu-failover", "direct", durable=True)
    # client-local places the queue in a group the connection's node is
    # meant to lead, so that the kill takes the queue's leader too.
    q = Queue("kombu-failover", ex, routing_key="fo",
              queue_arguments={"x-queue-leader-locator": "client-local"})
    q(conn.default_channel).declare()
    producer = Producer(conn, exchange=ex, routing_key="fo")
    confirmed = []

    def publish(n):
        # timeout bounds the wait for the confirm: a confirm that never
        # comes counts as a connection error and the publish is retried.
        producer.publish({"n": n}, serializer="json", retry=True, retry_policy=policy,
                         declare=[q], timeout=WAIT)
        confirmed.append(n)

    for n in range(10):
        publish(n)
    port = conn.connection.sock.getpeername()[1]
    expect(str(port) == failover_url.rstrip("/").rsplit(":", 1)[1],
           "the failover connection is on port %s, not on the first URL %s", port, failover_url)
    print("KILL %d" % port, flush=True)
    line = sys.stdin.readline()
    expect(line.strip() == "KILLED", "the caller answered %r to KILL" % line)
    for n in range(10, 20):
        publish(n)

    def publish_on(n, channel=None):
        Producer(channel, exchange=ex, routing_key="fo").publish(
            {"n": n}, serializer="json", declare=[q], timeout=WAIT)

    for n in range(20, 30):
        conn.autoretry(publish_on, **policy)(n)
        confirmed.append(n)
    moved = conn.connection.sock.getpeername()[1]
    expect(moved != port, "still connected to port %d after its node was killed", port)
    expect(errors, "no connection error reached the errback: the kill went unnoticed")
    print("failover: %d connection errors, moved from port %d to %d" % (len(errors), port, moved))
    conn.release()

    survivors = [u for u in urls if u != failover_url]
    cons = connect(survivors[-1])
    counts = {}
    with Consumer(cons, [q], accept=ACCEPT, prefetch_count=50,
                  callbacks=[lambda body, m: (counts.__setitem__(body["n"], counts.get(body["n"], 0) + 1), m.ack())]):
        deadline = time.monotonic() + WAIT
        while set(confirmed) - set(counts):
            expect(time.monotonic() < deadline, "confirmed messages lost: %r",
                   sorted(set(confirmed) - set(counts)))
            try:
                cons.drain_events(timeout=1)
            except socket.timeout:
                pass
    unexpected = sorted(set(counts) - set(confirmed))
    expect(not unexpected, "messages never published: %r", unexpected)
    dups = {n: c for n, c in counts.items() if c > 1}
    if dups:
        # A publish whose confirm the kill cut off is sent again: at least once.
        print("failover: published again after the kill: %r" % dups)
    cons.release()


def main():
    urls = sys.argv[1:4]
    if len(urls) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    pub = connect(urls[0])
    cons = connect(urls[1])
    checks = [check_topology, check_serializers_and_properties, check_simple_queue,
              check_ack_reject_requeue, check_ttl_dead_letter, check_queue_expires,
              check_auto_delete, check_purge_delete]
    failed = []
    for fn in checks:
        name = fn.__name__[len("check_"):]
        if not run_check(name, fn, pub, cons):
            failed.append(name)
            # A channel error closed the default channel; the next check
            # gets fresh connections.
            pub.release()
            cons.release()
            pub = connect(urls[0])
            cons = connect(urls[1])
    pub.release()
    cons.release()
    if not run_check("failover", check_failover, urls, urls[2]):
        failed.append("failover")
    if failed:
        print("failed: %s" % ", ".join(failed), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
