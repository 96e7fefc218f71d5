"""Sends tasks to a running Celery worker and checks what comes back.

usage: celery_client.py WORKER_NAME
The app (celery_tasks) reads the broker URLs from RAFTMQ_BROKER_URLS;
results come back over the rpc:// backend. Every check runs even when an
earlier one failed; each prints "ok NAME" or "FAIL NAME: ..." with the
traceback, and the exit status is 1 when any failed.
"""
import sys
import time

from celery import group
from celery.exceptions import TaskRevokedError

from celery_tasks import add, app, boom, echo, flaky
from clientchecks import WAIT, Failure, expect, run_check


def check_ping(worker):
    """app.control.ping: the pidbox fanout exchange and a reply queue."""
    deadline = time.monotonic() + WAIT
    while True:
        replies = app.control.ping(destination=[worker], timeout=2)
        if replies:
            break
        expect(time.monotonic() < deadline, "no pong from %s within %d s", worker, WAIT)
    expect(replies == [{worker: {"ok": "pong"}}], "ping replies %r", replies)


def check_results(worker):
    """Results of plain tasks and a group come back right."""
    rs = [add.delay(i, 10 * i) for i in range(10)]
    got = [r.get(timeout=WAIT) for r in rs]
    expect(got == [11 * i for i in range(10)], "add results %r", got)
    value = {"s": "ünïcode", "n": [1, 2.5, None, True], "d": {"k": "v"}}
    got = echo.delay(value).get(timeout=WAIT)
    expect(got == value, "echo returned %r, want %r", got, value)
    got = group(add.s(i, 1) for i in range(5))().get(timeout=WAIT)
    expect(got == [1, 2, 3, 4, 5], "group results %r", got)


def check_error(worker):
    """A task's exception reaches the caller."""
    r = boom.delay("bad input")
    try:
        got = r.get(timeout=WAIT)
        raise Failure("boom returned %r" % (got,))
    except ValueError as e:
        expect(str(e) == "bad input", "boom raised %r", e)
    expect(r.state == "FAILURE", "boom's state %s", r.state)


def check_retry(worker):
    """self.retry(countdown=1) twice, then success (the retries are ETA messages)."""
    start = time.monotonic()
    got = flaky.delay(2).get(timeout=WAIT * 2)
    took = time.monotonic() - start
    expect(got.get("retries") == 2, "flaky returned %r, want 2 retries", got)
    expect(got.get("eta"), "the last run of flaky had no ETA: %r", got)
    expect(took >= 2, "two retries with a 1 s countdown each took %.3f s", took)


def check_expires(worker):
    """A task whose ETA is past its expiry is revoked; one that is not runs."""
    late = add.apply_async((1, 1), countdown=3, expires=1)
    ontime = add.apply_async((2, 2), countdown=1, expires=WAIT * 2)
    expect(ontime.get(timeout=WAIT) == 4, "the unexpired ETA task returned %r", ontime.result)
    try:
        got = late.get(timeout=WAIT)
        raise Failure("the expired task ran and returned %r" % (got,))
    except TaskRevokedError:
        pass
    expect(late.state == "REVOKED", "the expired task's state %s", late.state)


def check_active_queues(worker):
    """inspect().active_queues() answers with the worker's queue."""
    deadline = time.monotonic() + WAIT
    while True:
        replies = app.control.inspect(destination=[worker], timeout=2).active_queues()
        if replies:
            break
        expect(time.monotonic() < deadline, "no active_queues reply from %s within %d s", worker, WAIT)
    expect(list(replies) == [worker], "active_queues replies from %r", list(replies))
    names = [q["name"] for q in replies[worker]]
    expect(names == ["celery"], "%s consumes from %r, want ['celery']", worker, names)


def check_eta_beyond_prefetch(worker):
    """A task sent behind more countdown tasks than the worker's prefetch runs at once.

    The worker holds each ETA message unacked until it is due and raises
    its channel's prefetch with basic.qos for each one (global=True on
    RabbitMQ 3.3+, global=False on brokers that do not call themselves
    RabbitMQ), so that it goes on receiving other tasks. Where basic.qos
    does not reach the consumer already running, the worker receives
    nothing more until the ETA tasks come due.
    """
    stats = app.control.inspect(destination=[worker], timeout=5).stats()
    expect(stats and worker in stats, "no stats from %s: %r", worker, stats)
    prefetch = stats[worker]["prefetch_count"]
    expect(prefetch > 0, "the worker's prefetch_count is %r", prefetch)
    held = [add.apply_async((i, 0), countdown=WAIT * 2) for i in range(prefetch + 2)]
    start = time.monotonic()
    now = add.delay(40, 2)
    try:
        got = now.get(timeout=WAIT / 2)
    except Exception as e:
        raise Failure("a task sent behind %d countdown tasks (the worker's prefetch_count is %d) "
                      "got no result within %d s (%r): did the basic.qos by which the worker raises "
                      "its prefetch for each ETA task it holds not reach its running consumer?"
                      % (len(held), prefetch, WAIT / 2, e))
    finally:
        app.control.revoke([r.id for r in held])
    expect(got == 42, "the task returned %r", got)
    print("the task behind %d countdown tasks returned after %.3f s" % (len(held), time.monotonic() - start))


def main():
    worker = sys.argv[1]
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=3)
        print("client connected to port %d" % conn.connection.sock.getpeername()[1])
    failed = []
    # eta_beyond_prefetch goes last: when it fails, the worker holds its
    # countdown tasks and receives no other task for a while.
    for fn in [check_ping, check_results, check_error, check_retry, check_expires,
               check_active_queues, check_eta_beyond_prefetch]:
        name = fn.__name__[len("check_"):]
        if not run_check(name, fn, worker):
            failed.append(name)
    if failed:
        print("failed: %s" % ", ".join(failed), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
