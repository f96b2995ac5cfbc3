"""Sends track, identify, page, screen, group and alias through a real
Python SDK, unmodified, pointed at inlet by its host setting alone.

    driver.py segment|rudder

Environment: INLET_URL (inlet's base URL), WRITE_KEY, RUN (a prefix of the
messageIds), ROUNDS (messages of each type, default 3).

It prints one JSON line: {"sdk", "sent": [the messages as given to the SDK],
"errors": [what the SDK reported]}, and exits 1 if the SDK reported an
error.
"""
import json
import logging
import os
import sys

sdk = sys.argv[1]
if sdk == "segment":
    from segment.analytics import Client
elif sdk == "rudder":
    from rudderstack.analytics import Client
else:
    sys.exit("driver.py: segment or rudder, not %r" % sdk)

logging.basicConfig(level=logging.CRITICAL)
name = "python-" + sdk
run = os.environ["RUN"]
rounds = int(os.environ.get("ROUNDS", "3"))
errors = []


def on_error(e, batch):
    # segment: APIError(status, code, message); rudder: the same shape.
    errors.append({"error": str(e), "status": getattr(e, "status", None),
                   "code": getattr(e, "code", None), "messages": len(batch)})


# gzip: the Segment SDK has it off by default, RudderStack's on: both on.
client = Client(os.environ["WRITE_KEY"], host=os.environ["INLET_URL"], gzip=True,
                on_error=on_error, upload_size=10, max_retries=10)
sent = []
for i in range(rounds):
    uid = "u-%s-%d" % (name, i)
    mid = lambda t: "%s-%s-%s-%d" % (run, name, t, i)
    calls = [
        ("track", dict(user_id=uid, event="Order Completed", properties={"order_id": "o%d" % i, "revenue": 12.5, "n": i})),
        ("identify", dict(user_id=uid, traits={"email": "%s@example.com" % uid, "plan": "pro"})),
        ("page", dict(user_id=uid, name="Docs", properties={"path": "/docs/%d" % i})),
        ("screen", dict(user_id=uid, name="Home", properties={"tab": "t%d" % i})),
        ("group", dict(user_id=uid, group_id="g-%d" % i, traits={"name": "Acme %d" % i})),
        ("alias", dict(previous_id="anon-%s-%d" % (name, i), user_id=uid)),
    ]
    for typ, kw in calls:
        kw["message_id"] = mid(typ)
        getattr(client, typ)(**kw)
        msg = {"type": typ, "messageId": kw["message_id"], "userId": uid}
        # rudder-sdk-python sends identify's traits as context.traits (its
        # choice; RudderStack reads them there), the Segment SDK at the top.
        traits_at = "context.traits" if sdk == "rudder" and typ == "identify" else "traits"
        for k, f in (("event", "event"), ("properties", "properties"), ("traits", traits_at),
                     ("name", "name"), ("group_id", "groupId"), ("previous_id", "previousId")):
            if k in kw:
                msg[f] = kw[k]
        sent.append(msg)

client.flush()  # blocks until the queue is empty: sent, or given up on
client.join()
print(json.dumps({"sdk": name, "sent": sent, "errors": errors}))
sys.exit(1 if errors else 0)
