#!/usr/bin/env python3
"""Calls a classic remote server the way Robot Framework's `Remote` library does, with Python's own
xmlrpc.client (use_builtin_types=True, a new connection per call), and prints what came back.

    classic_client.py URL CALLS_JSON

CALLS_JSON is a JSON list of calls, each [METHOD, PARAM, ...]. Values are JSON, plus these objects for
what JSON cannot say:  {"$bytes": "<base64>"}, {"$datetime": "2024-01-02T03:04:05"}, {"$float": "nan"},
{"$int": "12345678901234567890"} (an int beyond 64 bits), {"$repeat": ["x", 3]} ("xxx", for strings too
long for a command line). Prints one JSON line per call: the result
with the same encoding, or {"$fault": "<faultString>"}, or {"$error": "<what the client raised>"}.
Used by tests/integration/classic_test.cpp; the standard library only.
"""
import base64
import datetime
import json
import math
import sys
import xmlrpc.client


def decode(value):
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            (key, inner), = value.items()
            if key == "$bytes":
                return base64.b64decode(inner)
            if key == "$datetime":
                return datetime.datetime.fromisoformat(inner)
            if key == "$float":
                return float(inner)
            if key == "$int":
                return int(inner)
            if key == "$repeat":
                return inner[0] * inner[1]
        return {k: decode(v) for k, v in value.items()}
    return value


def encode(value):
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, datetime.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def main():
    url, calls = sys.argv[1], json.loads(sys.argv[2])
    for method, *params in calls:
        # A proxy per call, closed after it: Robot's Remote (4.0 and later) connects anew for every call.
        server = xmlrpc.client.ServerProxy(url, encoding="UTF-8", use_builtin_types=True, allow_none=False)
        try:
            result = encode(getattr(server, method)(*decode(params)))
        except xmlrpc.client.Fault as fault:
            result = {"$fault": fault.faultString}
        except Exception as error:  # what the client raised: a protocol error, a refused connection, ...
            result = {"$error": "%s: %s" % (type(error).__name__, error)}
        finally:
            server("close")()
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
