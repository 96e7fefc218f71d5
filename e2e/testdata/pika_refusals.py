"""Declares and binds that RabbitMQ refuses for what they say, through
pika, on every node given: each must be refused with the code and text RabbitMQ
3.10.8 gave for it (read from a real node with this same script's cases),
on its channel, and the connection must go on serving.

usage: pika_refusals.py URL...
"""
import sys

import pika

PRE = "PRECONDITION_FAILED - "
QQ = {"x-queue-type": "quorum"}


def qd(name, durable=False, exclusive=False, auto_delete=False, **args):
    return lambda ch: ch.queue_declare(name, durable=durable, exclusive=exclusive,
                                       auto_delete=auto_delete, arguments=args or None)


CASES = [
    ("x-max-length -1", qd("ml1", **{"x-max-length": -1}),
     "invalid arg 'x-max-length' for queue 'ml1' in vhost '/': {value_negative,-1}"),
    ("x-max-length a string", qd("ml2", **{"x-max-length": "abc"}),
     "invalid arg 'x-max-length' for queue 'ml2' in vhost '/': \"expected integer, got longstr\""),
    ("x-expires a string", qd("xe", **{"x-expires": "x"}),
     "invalid arg 'x-expires' for queue 'xe' in vhost '/': \"expected integer, got longstr\""),
    ("x-dead-letter-exchange an integer", qd("dlx1", **{"x-dead-letter-exchange": 5}),
     "invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'dlx1' in vhost '/'"),
    ("x-dead-letter-routing-key an integer",
     qd("dlrk1", **{"x-dead-letter-exchange": "dx", "x-dead-letter-routing-key": 5}),
     "invalid arg 'x-dead-letter-routing-key' for queue 'dlrk1' in vhost '/': {unacceptable_type,signedint}"),
    ("routing key without an exchange", qd("dlrk2", **{"x-dead-letter-routing-key": "k"}),
     "invalid arg 'x-dead-letter-routing-key' for queue 'dlrk2' in vhost '/': routing_key_but_no_dlx_defined"),
    ("x-overflow unknown", qd("ov1", **{"x-overflow": "bogus"}),
     "invalid arg 'x-overflow' for queue 'ov1' in vhost '/': invalid_overflow"),
    ("x-queue-mode unknown", qd("qm1", **{"x-queue-mode": "bogus"}),
     "invalid arg 'x-queue-mode' for queue 'qm1' in vhost '/': \"unsupported queue mode 'bogus'\""),
    ("quorum exclusive", qd("qex", durable=True, exclusive=True, **QQ),
     "invalid property 'exclusive-owner' for queue 'qex' in vhost '/'"),
    ("quorum not durable", qd("qnd", **QQ),
     "invalid property 'non-durable' for queue 'qnd' in vhost '/'"),
    ("quorum auto-delete", qd("qad", durable=True, auto_delete=True, **QQ),
     "invalid property 'auto-delete' for queue 'qad' in vhost '/'"),
    ("x-match unknown", lambda ch: ch.queue_bind(
        ch.queue_declare("", exclusive=True).method.queue, "amq.headers", arguments={"x-match": "bogus"}),
     "Invalid x-match field value <<\"bogus\">>; expected all, any, all-with-x, or any-with-x"),
    ("x-match an integer", lambda ch: ch.queue_bind(
        ch.queue_declare("", exclusive=True).method.queue, "amq.headers", arguments={"x-match": 1}),
     "Invalid x-match field type signedint (value 1); expected longstr"),
    ("alternate-exchange an integer",
     lambda ch: ch.exchange_declare("xae", "direct", arguments={"alternate-exchange": 5}),
     "invalid type 'signedint' for arg 'alternate-exchange' in exchange 'xae' in vhost '/'"),
]


def main(urls):
    failures = []
    for i, (what, declare, text) in enumerate(CASES):
        url = urls[i % len(urls)]
        conn = pika.BlockingConnection(pika.URLParameters(url))
        try:
            declare(conn.channel())
            failures.append("%s on %s: accepted" % (what, url))
        except pika.exceptions.ChannelClosedByBroker as e:
            if e.reply_code != 406 or e.reply_text != PRE + text:
                failures.append("%s on %s: %d %r, want 406 %r" % (what, url, e.reply_code, e.reply_text, PRE + text))
        # The channel error left the connection serving.
        conn.channel().queue_declare("", exclusive=True)
        conn.close()
    # An exchange type nobody knows closes the connection, as RabbitMQ does.
    # RabbitMQ says 'unknown' the first time it meets the name and
    # 'invalid' once the name is an atom of its VM; raftmq says 'unknown'.
    conn = pika.BlockingConnection(pika.URLParameters(urls[0]))
    try:
        conn.channel().exchange_declare("xb", "bogus")
        failures.append("exchange type 'bogus': accepted")
    except pika.exceptions.ConnectionClosedByBroker as e:
        if e.reply_code != 503 or e.reply_text not in (
                "COMMAND_INVALID - unknown exchange type 'bogus'", "COMMAND_INVALID - invalid exchange type 'bogus'"):
            failures.append("exchange type 'bogus': %d %r" % (e.reply_code, e.reply_text))
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("%d declares and binds refused as RabbitMQ refuses them" % (len(CASES) + 1))


if __name__ == "__main__":
    main(sys.argv[1:])
