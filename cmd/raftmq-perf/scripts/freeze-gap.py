#!/usr/bin/python3
"""The longest pause a consumer outside a queue's group sees when the
group's leader is stopped (SIGSTOP) for 6 s.

On a cluster of five started by three-nodes.sh with queue groups
(NODES=5 NODE_ARGS="--queue-groups 3 --place-queues"), it declares the
quorum queue "kq", asks raftmqctl for its group's leader and members,
consumes on a node outside the group and publishes with confirms, 50 a
second, on another; 3 s in it stops the leader's process for 6 s. It
prints one JSON line: published, confirmed, received, confirmed but
never received ("lost"), and the longest gap between two deliveries.
Needs Debian's python3-pika.

  freeze-gap.py DIR [PORTS] [RAFTMQCTL]
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pika

d = sys.argv[1]
ports = int(sys.argv[2]) if len(sys.argv) > 2 else 0
ctl = sys.argv[3] if len(sys.argv) > 3 else "raftmqctl"


def amqp(i):
    return pika.ConnectionParameters("127.0.0.1", 25671 + i + ports, heartbeat=0)


c = pika.BlockingConnection(amqp(1))
c.channel().queue_declare("kq", durable=True, arguments={"x-queue-type": "quorum"})
c.close()
# The group's leader and members, as node 1 shows them.
for _ in range(50):
    out = subprocess.run([ctl, "-n", "127.0.0.1:%d" % (25681 + ports), "--data-dir", d + "/n1",
                          "list_queues", "name", "leader", "members"], capture_output=True, text=True).stdout
    rows = [l.split(None, 2) for l in out.splitlines() if l.startswith("kq ")]
    if rows and len(rows[0]) == 3 and rows[0][1].startswith("n"):
        break
    time.sleep(0.2)
else:
    sys.exit("raftmqctl shows no leader for kq:\n" + out)
_, leader, members = rows[0]
members = json.loads(members)
outside = [i for i in range(1, 6) if "n%d" % i not in members]
if len(outside) < 2:
    sys.exit("kq's group %s leaves fewer than two nodes outside it" % members)
ci, pi = outside[0], outside[1]
print("kq: leader %s, members %s; consumer on n%d, publisher on n%d" % (leader, members, ci, pi))

got, times, stop = set(), [], threading.Event()


def consume():
    cc = pika.BlockingConnection(amqp(ci))
    ch = cc.channel()
    ch.basic_qos(prefetch_count=50)
    for m, _, body in ch.consume("kq", inactivity_timeout=0.05):
        if m is None:
            if stop.is_set():
                break
            continue
        got.add(body)
        times.append(time.monotonic())
        ch.basic_ack(m.delivery_tag)
    cc.close()


t = threading.Thread(target=consume)
t.start()
pc = pika.BlockingConnection(amqp(pi))
pch = pc.channel()
pch.confirm_delivery()
confirmed, n = set(), 0
pid = int(open(d + "/%s.pid" % leader).read())
t0 = time.monotonic()
stopped = None
try:
    while time.monotonic() - t0 < 14:
        if stopped is None and time.monotonic() - t0 > 3:
            os.kill(pid, signal.SIGSTOP)
            stopped = time.monotonic()
        if stopped is not None and time.monotonic() - stopped > 6:
            os.kill(pid, signal.SIGCONT)
        body = b"m%d" % n
        n += 1
        try:
            pch.basic_publish("", "kq", body)
            confirmed.add(body)
        except pika.exceptions.NackError:
            pass
        time.sleep(0.02)
finally:
    os.kill(pid, signal.SIGCONT)
deadline = time.monotonic() + 20
while not confirmed <= got and time.monotonic() < deadline:
    time.sleep(0.1)
stop.set()
t.join()
pc.close()
gaps = [b - a for a, b in zip(times, times[1:])]
print(json.dumps({"published": n, "confirmed": len(confirmed), "received": len(got),
                  "lost": len(confirmed - got), "max_gap_s": round(max(gaps), 3)}))
