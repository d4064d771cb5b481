#!/usr/bin/env python3
"""A classic Robot Framework remote server, written with Python's standard xmlrpc.server only, as the
Robot Framework User Guide describes the remote library interface (PythonRemoteServer's behaviour:
get_library_information plus the older per-keyword methods, run_keyword answering status, return,
output, error, traceback, continuable and fatal). A test fixture: the gateway reaches it through
`upstream = "http://..."`.

    classic_server.py PORT_FILE [--no-library-information]

Listens on 127.0.0.1 on a free port and writes the port to PORT_FILE once it accepts. With
--no-library-information it serves only the per-keyword methods, like servers older than Robot 4.
"""
import datetime
import socket
import sys
import traceback
from xmlrpc.server import SimpleXMLRPCRequestHandler, SimpleXMLRPCServer


class TestLibrary:
    """A library for the gateway's tests of classic upstreams."""

    def echo(self, value):
        """Returns `value` unchanged."""
        return value

    def add(self, a, b=2, *rest, **named):
        """Adds numbers."""
        return int(a) + int(b) + sum(int(r) for r in rest) + sum(int(v) for v in named.values())

    def log_lines(self, count):
        """Prints `count` lines at levels INFO, WARN and DEBUG in turn, and one HTML line."""
        levels = ["INFO", "WARN", "DEBUG"]
        for i in range(int(count)):
            print("*%s* line %d" % (levels[i % 3], i))
        print("*HTML* <b>bold</b>")
        return int(count)

    def fail_with(self, message, continuable=False, fatal=False):
        """Fails with `message`."""
        error = ValueError(message)
        error.ROBOT_CONTINUE_ON_FAILURE = continuable
        error.ROBOT_EXIT_ON_FAILURE = fatal
        raise error

    def get_bytes(self):
        """Returns bytes that are not text."""
        return b"\x00\x01\xfe\xff"

    def get_structure(self):
        """Returns a nested structure with every XML-RPC type."""
        return {"list": [1, "two", 3.5, True], "nested": {"empty": [], "bytes": b"xy"},
                "when": datetime.datetime(2024, 2, 29, 23, 59, 58)}

    def get_none(self):
        """Returns None (a classic server answers it as an empty string)."""
        return None

    def big_text(self, size):
        """Returns a string of `size` x's."""
        return "x" * int(size)

    def describe(self, value):
        """Returns the type name and repr of what arrived."""
        return "%s:%r" % (type(value).__name__, value)

    def named_only(self, first, *, second=2, third):
        """Keyword-only arguments, one with a default before one without."""
        return "%s %s %s" % (first, second, third)

    def get_dicts(self):
        """A list holding a struct that holds a struct."""
        return [{"outer": {"inner": 1}}]

    def no_return(self):
        """The server answers it without a 'return' member."""

    def no_status(self):
        """The server answers it with a result that has no 'status'."""

    def fail_binary(self):
        """Fails with a message XML cannot carry: the server sends it as binary."""

    def drop_connection(self):
        """The server closes the connection without an answer."""

    def nested(self, depth):
        """Returns lists nested `depth` deep."""
        value = []
        for _ in range(int(depth)):
            value = [value]
        return value


def keyword_names(library):
    return [name for name in dir(library) if not name.startswith("_") and callable(getattr(library, name))]


class RemoteServer:
    def __init__(self, library):
        self._library = library

    def get_keyword_names(self):
        return keyword_names(self._library)

    def get_keyword_arguments(self, name):
        import inspect
        spec = inspect.getfullargspec(getattr(self._library, name))
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

    def get_keyword_types(self, name):
        return {"a": "int"} if name == "add" else {}

    def get_keyword_tags(self, name):
        return ["math"] if name == "add" else []

    def get_keyword_documentation(self, name):
        if name == "__intro__":
            return TestLibrary.__doc__
        if name == "__init__":
            return ""
        return getattr(self._library, name).__doc__ or ""

    def get_library_information(self):
        info = {name: {"args": self.get_keyword_arguments(name), "types": self.get_keyword_types(name),
                       "tags": self.get_keyword_tags(name), "doc": self.get_keyword_documentation(name)}
                for name in self.get_keyword_names()}
        info["__intro__"] = {"doc": self.get_keyword_documentation("__intro__")}
        info["__init__"] = {"doc": ""}
        return info

    def run_keyword(self, name, args, kwargs=None):
        # Broken servers, as Robot's Remote library meets them.
        if name == "no_status":
            return {}
        if name == "no_return":
            return {"status": "PASS"}
        if name == "fail_binary":
            return {"status": "FAIL", "error": b"nul\x00bell\x07"}
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
            result["return"] = "" if value is None else value
        except Exception as error:
            result["error"] = str(error) if isinstance(error, (AssertionError, RuntimeError)) else \
                "%s: %s" % (type(error).__name__, error)
            result["traceback"] = traceback.format_exc()
            result["continuable"] = bool(getattr(error, "ROBOT_CONTINUE_ON_FAILURE", False))
            result["fatal"] = bool(getattr(error, "ROBOT_EXIT_ON_FAILURE", False))
        finally:
            sys.stdout = stdout
        result["output"] = "".join(captured)
        return result


class RequestHandler(SimpleXMLRPCRequestHandler):
    def do_POST(self):
        # The keyword drop_connection: the connection closes without an answer.
        length = int(self.headers.get("content-length", 0))
        body = self.rfile.read(length)
        if b">run_keyword<" in body and b">drop_connection<" in body:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        response = self.server._marshaled_dispatch(body, getattr(self, "_dispatch", None), self.path)
        self.send_response(200)
        self.send_header("Content-type", "text/xml")
        self.send_header("Content-length", str(len(response)))
        self.end_headers()
        self.wfile.write(response)


def main():
    port_file = sys.argv[1]
    with_information = "--no-library-information" not in sys.argv[2:]
    server = SimpleXMLRPCServer(("127.0.0.1", 0), requestHandler=RequestHandler, logRequests=False, allow_none=True,
                                use_builtin_types=True)
    remote = RemoteServer(TestLibrary())
    for method in ["get_keyword_names", "get_keyword_arguments", "get_keyword_types", "get_keyword_tags",
                   "get_keyword_documentation", "run_keyword"]:
        server.register_function(getattr(remote, method), method)
    if with_information:
        server.register_function(remote.get_library_information, "get_library_information")
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
