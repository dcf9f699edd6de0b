"""Reads notifications with the official CloudEvents Python SDK (`cloudevents`, pinned in
python-clients.lock), as a receiver errand did not write would.

    python3 python_clients.py cloudevents_read.py MESSAGES.json

MESSAGES.json is a list of HTTP messages, `{"headers": {...}, "body": "..."}` (a local sink's
line is a message with the structured-mode Content-Type), each with an optional signing `key`.
Prints a JSON list with, per message, either the CloudEvent 1.0 the SDK read (its attributes,
extensions and data) or the SDK's `error`; with a `key`, also `signature`: whether the
`X-Errand-Signature` header is `sha256=<hex>` of the HMAC-SHA256 of the body with that key, as
a receiver checks it with Python's own `hmac` (`valid`, `invalid` or `missing`). The SDK fills in
a missing `specversion`, so its absence is an error here too.
"""

import hashlib
import hmac
import json
import sys

from cloudevents.core.bindings.http import HTTPMessage, from_http
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent


def signature(message, body):
    headers = {k.lower(): v for k, v in message["headers"].items()}
    given = headers.get("x-errand-signature")
    if given is None:
        return "missing"
    expected = "sha256=" + hmac.new(message["key"].encode("utf-8"), body, hashlib.sha256).hexdigest()
    return "valid" if hmac.compare_digest(given, expected) else "invalid"


def read(message):
    body = message["body"].encode("utf-8")
    if "key" in message:
        return {**read({k: v for k, v in message.items() if k != "key"}), "signature": signature(message, body)}
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
