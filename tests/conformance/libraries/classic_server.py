#!/usr/bin/env python3
"""A classic Robot Framework remote server (XML-RPC), written with Python's xmlrpc.server only, as the
User Guide's remote library interface describes it and PythonRemoteServer behaves: the per-keyword
methods and get_library_information, run_keyword answering status, return, output, error,
traceback, continuable and fatal, return values converted as PythonRemoteServer converts them. The
conformance suites reach it with Robot's own `Remote` directly, and through the gateway (an
`upstream = "http://..."` route, from JsonRpcRemote and from the classic front), and expect the same.

    classic_server.py      prints "listening on 127.0.0.1:PORT" once it accepts, then serves
"""
import datetime
import inspect
import socket
import sys
import traceback
import xmlrpc.client
from collections.abc import Mapping
from xmlrpc.server import SimpleXMLRPCRequestHandler, SimpleXMLRPCServer

# Exceptions whose name PythonRemoteServer leaves out of the message, as Robot does for its own.
GENERIC_EXCEPTIONS = ("AssertionError", "AssertionFailedError", "Exception", "Error", "RuntimeError",
                      "RuntimeException")


class ClassicLibrary:
    """A library served by a classic remote server."""

    def __init__(self):
        self._calls = 0

    def echo(self, value):
        """Returns `value` as the server received it."""
        return value

    def describe(self, value):
        """Returns the type name and repr of what arrived."""
        return "%s:%r" % (type(value).__name__, value)

    def count_calls(self):
        """Counts the calls of this keyword on this server."""
        self._calls += 1
        return self._calls

    def add(self, a, b=2, *rest, **named):
        """Adds numbers: a positional, a default, varargs and kwargs."""
        return int(a) + int(b) + sum(int(r) for r in rest) + sum(int(v) for v in named.values())

    def named_only(self, first, *, second=2, third):
        """Keyword-only arguments, one with a default before one without."""
        return "%s %s %s" % (first, second, third)

    def get_dict(self):
        """A struct holding a struct and an array."""
        return {"name": "value", "inner": {"number": 1}, "items": [1, "two"]}

    def get_flat_dict(self):
        """A struct of scalars."""
        return {"name": "value", "number": 1}

    def get_none(self):
        """Returns None, which a classic server answers as an empty string."""
        return None

    def get_bytes(self):
        """Bytes that are not text."""
        return b"\x00\x01\xfe\xff"

    def get_text_with_control_characters(self):
        """A string XML cannot carry: the server sends it as binary."""
        return "nul\x00bell\x07"

    def get_date_time(self):
        """An XML-RPC dateTime."""
        return datetime.datetime(2024, 2, 29, 23, 59, 58)

    def get_list(self):
        """A tuple: an array."""
        return (1, "two", 3.5, True)

    def log_lines(self):
        """Prints at each level Robot's log splitter reads, and HTML."""
        print("first line, INFO by default")
        print("*WARN* a warning")
        print("*DEBUG* a debug line")
        print("*HTML* <b>bold</b>")
        print("*INFO* back to info")
        return "logged"

    def fail_with(self, message):
        """Fails with a ValueError (its name is in the message)."""
        raise ValueError(message)

    def fail_assertion(self, message):
        """Fails with an AssertionError (a generic name: the message alone)."""
        raise AssertionError(message)

    def fail_continuable(self, message):
        """Fails so that Robot goes on with the keywords after it (continuable)."""
        error = AssertionError(message)
        error.ROBOT_CONTINUE_ON_FAILURE = True
        raise error

    def fail_fatal(self, message):
        """Fails so that Robot stops the whole run (fatal)."""
        error = AssertionError(message)
        error.ROBOT_EXIT_ON_FAILURE = True
        raise error

    def fail_with_control_characters(self):
        """Fails with a message XML cannot carry: the server sends it as binary."""
        raise AssertionError("nul\x00bell\x07")

    def invalid_result(self):
        """The server answers it with a result that has no 'status' (RemoteServer.run_keyword)."""

    def drop_connection(self):
        """The server closes the connection without an answer (RequestHandler.do_POST)."""


def keyword_names(library):
    return [name for name, _ in inspect.getmembers(library, inspect.ismethod) if not name.startswith("_")]


def argument_spec(method):
    spec = inspect.getfullargspec(method)
    args = spec.args[1:]
    defaults = list(spec.defaults or ())
    out = args[:len(args) - len(defaults)]
    out += ["%s=%s" % (a, d) for a, d in zip(args[len(args) - len(defaults):], defaults)]
    if spec.varargs:
        out.append("*" + spec.varargs)
    elif spec.kwonlyargs:
        out.append("*")
    for name in spec.kwonlyargs:
        default = (spec.kwonlydefaults or {}).get(name, inspect.Parameter.empty)
        out.append(name if default is inspect.Parameter.empty else "%s=%s" % (name, default))
    if spec.varkw:
        out.append("**" + spec.varkw)
    return out


def to_xmlrpc(value):
    # PythonRemoteServer's conversion of return values.
    if isinstance(value, str):
        return to_binary_if_needed(value)
    if isinstance(value, (bytes, int, float, datetime.datetime)):
        return value
    if isinstance(value, Mapping):
        return {str(k): to_xmlrpc(v) for k, v in value.items()}
    if value is None:
        return ""
    try:
        return [to_xmlrpc(item) for item in value]
    except TypeError:
        return str(value)


def to_binary_if_needed(text):
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        try:
            return text.encode("latin-1")
        except UnicodeError:
            return text
    return text


class RemoteServer:
    def __init__(self, library):
        self._library = library

    def get_keyword_names(self):
        return keyword_names(self._library)

    def get_keyword_arguments(self, name):
        return argument_spec(getattr(self._library, name))

    def get_keyword_types(self, name):
        return {"a": "int"} if name == "add" else {}

    def get_keyword_tags(self, name):
        return ["math"] if name == "add" else []

    def get_keyword_documentation(self, name):
        if name == "__intro__":
            return ClassicLibrary.__doc__
        if name == "__init__":
            return ""
        return inspect.getdoc(getattr(self._library, name)) or ""

    def get_library_information(self):
        info = {name: {"args": self.get_keyword_arguments(name), "types": self.get_keyword_types(name),
                       "tags": self.get_keyword_tags(name), "doc": self.get_keyword_documentation(name)}
                for name in self.get_keyword_names()}
        info["__intro__"] = {"doc": self.get_keyword_documentation("__intro__")}
        info["__init__"] = {"doc": ""}
        return info

    def run_keyword(self, name, args, kwargs=None):
        if name == "invalid_result":  # a broken server: an answer without 'status'
            return {}
        result = {"status": "FAIL", "return": "", "output": "", "error": "", "traceback": "",
                  "continuable": False, "fatal": False}
        captured = []

        class Capture:
            def write(self, text):
                captured.append(text)

            def flush(self):
                pass

        stdout, sys.stdout = sys.stdout, Capture()
        try:
            value = getattr(self._library, name)(*args, **(kwargs or {}))
            result["status"] = "PASS"
            result["return"] = to_xmlrpc(value)
        except Exception as error:
            name = type(error).__name__
            message = str(error) if name in GENERIC_EXCEPTIONS else "%s: %s" % (name, error)
            result["error"] = to_binary_if_needed(message)
            result["traceback"] = to_binary_if_needed(traceback.format_exc())
            result["continuable"] = bool(getattr(error, "ROBOT_CONTINUE_ON_FAILURE", False))
            result["fatal"] = bool(getattr(error, "ROBOT_EXIT_ON_FAILURE", False))
        finally:
            sys.stdout = stdout
        result["output"] = to_binary_if_needed("".join(captured))
        return result


class RequestHandler(SimpleXMLRPCRequestHandler):
    """At the path /old the server is one older than Robot 4: get_library_information is not there (a
    fault), so that clients ask keyword by keyword (get_keyword_names, get_keyword_arguments, ...)."""

    def do_POST(self):
        # A broken server: the keyword "drop_connection" closes the connection without an answer.
        # The body is read here and handed on, as xmlrpc.server's own do_POST would read it.
        length = int(self.headers.get("content-length", 0))
        body = self.rfile.read(length)
        if b">run_keyword<" in body and b">drop_connection<" in body:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if self.path.rstrip("/") == "/old" and b">get_library_information<" in body:
            response = xmlrpc.client.dumps(xmlrpc.client.Fault(1, 'method "get_library_information" is not '
                                                                  'supported'), methodresponse=True).encode()
        else:
            response = self.server._marshaled_dispatch(body, getattr(self, "_dispatch", None), self.path)
        self.send_response(200)
        self.send_header("Content-type", "text/xml")
        self.send_header("Content-length", str(len(response)))
        self.end_headers()
        self.wfile.write(response)


def main():
    server = SimpleXMLRPCServer(("127.0.0.1", 0), requestHandler=RequestHandler, logRequests=False,
                                allow_none=True, use_builtin_types=True)
    remote = RemoteServer(ClassicLibrary())
    for method in ["get_keyword_names", "get_keyword_arguments", "get_keyword_types", "get_keyword_tags",
                   "get_keyword_documentation", "get_library_information", "run_keyword"]:
        server.register_function(getattr(remote, method), method)
    print("listening on 127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
