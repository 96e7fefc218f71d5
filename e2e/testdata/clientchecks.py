"""What the Python client programs of the e2e tests share: the wait bound,
a failed expectation, and running one check.

Each check prints "ok NAME (seconds)" or "FAIL NAME: why" with its
traceback, and the next check runs either way.
"""
import time
import traceback

# Generous: CI runs other clusters beside these on few cores.
WAIT = 30


class Failure(Exception):
    pass


def expect(cond, msg, *args):
    if not cond:
        raise Failure(msg % args if args else msg)


def run_check(name, fn, *args):
    """Runs fn(*args) as check name; reports whether it passed."""
    start = time.monotonic()
    try:
        fn(*args)
    except Exception as e:
        print("FAIL %s: %s\n%s" % (name, e, traceback.format_exc()), flush=True)
        return False
    print("ok %s (%.2f s)" % (name, time.monotonic() - start), flush=True)
    return True
