"""Retries jobs through an x-delayed-message dead-letter exchange with pika.

usage: pika_delayed_retry.py PUBLISH_URL CONSUME_URL
Declares pika-jobs (client-local, dead-lettering into pika-retry-dx, an
x-delayed-message exchange that routes back to it), publishes five jobs
with an x-delay of 300 ms and confirms, rejects each job's first
delivery, and exits 0 when every job came back once, no sooner than its
delay, with x-death count 1 and the x-delay the delayed exchange writes
on release (-300).
"""
import sys
import time

import pika

DELAY = 300
JOBS = 5


def main():
    pub_url, cons_url = sys.argv[1], sys.argv[2]
    pub = pika.BlockingConnection(pika.URLParameters(pub_url))
    ch = pub.channel()
    ch.exchange_declare("pika-retry-dx", "x-delayed-message", durable=True,
                        arguments={"x-delayed-type": "direct"})
    ch.queue_declare("pika-jobs", durable=True, arguments={
        "x-queue-leader-locator": "client-local",
        "x-dead-letter-exchange": "pika-retry-dx",
        "x-dead-letter-routing-key": "pika-jobs"})
    ch.queue_bind("pika-jobs", "pika-retry-dx", "pika-jobs")
    ch.confirm_delivery()
    for i in range(JOBS):
        ch.basic_publish("", "pika-jobs", f"job-{i}".encode(),
                         pika.BasicProperties(delivery_mode=2, headers={"x-delay": DELAY}))

    cons = pika.BlockingConnection(pika.URLParameters(cons_url))
    cch = cons.channel()
    cch.basic_qos(prefetch_count=20)
    rejected = {}
    back = {}
    deadline = time.time() + 30
    for method, props, body in cch.consume("pika-jobs", inactivity_timeout=1):
        if time.time() > deadline:
            print(f"not every job back within 30 s: rejected {sorted(rejected)}, back {sorted(back)}", file=sys.stderr)
            return 1
        if method is None:
            continue
        job = body.decode()
        headers = props.headers or {}
        if job not in rejected:
            rejected[job] = time.time()
            cch.basic_reject(method.delivery_tag, requeue=False)
            continue
        cch.basic_ack(method.delivery_tag)
        if job in back:
            print(f"{job} came back twice", file=sys.stderr)
            return 1
        waited = time.time() - rejected[job]
        deaths = headers.get("x-death") or []
        if waited < DELAY / 1000 * 0.8 or headers.get("x-delay") != -DELAY or len(deaths) != 1 or deaths[0].get("count") != 1:
            print(f"{job} back after {waited:.3f} s with x-delay {headers.get('x-delay')} and x-death {deaths}", file=sys.stderr)
            return 1
        back[job] = waited
        print(f"{job} back after {waited:.3f} s")
        if len(back) == JOBS:
            break
    cons.close()
    pub.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
