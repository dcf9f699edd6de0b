"""Reads notifications with the official CloudEvents Python SDK (`cloudevents`, pinned in
python-clients.lock), as a receiver errand did not write would.

    python3 python_clients.py cloudevents_read.py MESSAGES.json

MESSAGES.json is a list of HTTP messages, `{"headers": {...}, "body": "..."}` (a local sink's
line is a message with the structured-mode Content-Type). Prints a JSON list with, per message,
either the CloudEvent 1.0 the SDK read (its attributes, extensions and data) or the SDK's
`error`. The SDK fills in a missing `specversion`, so its absence is an error here too.
"""

import json
import sys

from cloudevents.core.bindings.http import HTTPMessage, from_http
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent


def read(message):
    body = message["body"].encode("utf-8")
    try:
        event = from_http(HTTPMessage(headers=message["headers"], body=body), JSONFormat(), CloudEvent)
    except Exception as error:  # the SDK's validation errors name each attribute
        return {"error": f"{type(error).__name__}: {error}"}
    if "specversion" not in json.loads(body):
        return {"error": "no specversion: not a CloudEvent"}
    attributes = dict(event.get_attributes())
    attributes["time"] = attributes["time"].isoformat() if attributes.get("time") else None
    return {"attributes": attributes, "data": event.get_data()}


def main():
    with open(sys.argv[1], encoding="utf-8") as plan:
        messages = json.load(plan)
    json.dump([read(m) for m in messages], sys.stdout)


if __name__ == "__main__":
    main()
