"""Publishes with confirms and a per-message TTL through pika, and consumes
the dead-lettered message from a dead-letter queue.

usage: pika_ttl.py PUBLISH_URL CONSUME_URL
Exits 0 when the message came back through the dead-letter queue with an
x-death header naming the expired queue.
"""
import sys
import time

import pika


def main():
    pub_url, cons_url = sys.argv[1], sys.argv[2]
    pub = pika.BlockingConnection(pika.URLParameters(pub_url))
    ch = pub.channel()
    ch.exchange_declare("pika-dlx", "fanout", durable=True)
    ch.queue_declare("pika-dead", durable=True)
    ch.queue_bind("pika-dead", "pika-dlx")
    ch.queue_declare("pika-ttl", durable=True,
                     arguments={"x-dead-letter-exchange": "pika-dlx"})
    ch.confirm_delivery()
    # With confirms on, basic_publish raises unless the broker acks.
    ch.basic_publish("", "pika-ttl", b"hello from pika",
                     pika.BasicProperties(expiration="300", delivery_mode=2),
                     mandatory=True)

    cons = pika.BlockingConnection(pika.URLParameters(cons_url))
    cch = cons.channel()
    deadline = time.time() + 15
    for method, props, body in cch.consume("pika-dead", inactivity_timeout=1):
        if method is None:
            if time.time() > deadline:
                print("no dead-lettered message within 15 s", file=sys.stderr)
                return 1
            continue
        cch.basic_ack(method.delivery_tag)
        death = (props.headers or {}).get("x-death") or []
        if body != b"hello from pika":
            print("unexpected body %r" % body, file=sys.stderr)
            return 1
        if not death or death[0].get("queue") != "pika-ttl" or death[0].get("reason") != "expired":
            print("unexpected x-death %r" % death, file=sys.stderr)
            return 1
        print("dead-lettered with x-death %r" % death)
        break
    cch.cancel()
    cons.close()
    pub.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
