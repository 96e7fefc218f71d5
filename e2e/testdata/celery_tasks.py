"""The Celery app of the e2e tests: `celery -A celery_tasks worker` runs it.

RAFTMQ_BROKER_URLS is the broker_url: the cluster's AMQP URLs separated by
semicolons, which Celery tries in turn (failover).
"""
import os

from celery import Celery

app = Celery("celery_tasks")
app.conf.update(
    broker_url=os.environ["RAFTMQ_BROKER_URLS"],
    # py-amqp waits for the broker's basic.ack after every publish: a task
    # sent (or a result stored) is one the cluster confirmed.
    broker_transport_options={"confirm_publish": True},
    # Results travel back over reply queues on the broker itself.
    result_backend="rpc://",
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    enable_utc=True,
)


@app.task
def add(x, y):
    return x + y


@app.task
def echo(value):
    return value


class Flaky(Exception):
    pass


@app.task(bind=True, max_retries=5)
def flaky(self, fails):
    """Fails its first `fails` runs; Celery retries it 1 s later each time."""
    if self.request.retries < fails:
        raise self.retry(exc=Flaky("run %d fails" % self.request.retries), countdown=1)
    return {"retries": self.request.retries, "eta": self.request.eta}


@app.task
def boom(msg):
    raise ValueError(msg)
