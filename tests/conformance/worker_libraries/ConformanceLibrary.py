"""The library the conformance suites import through the gateway: the reference server
(robot_jsonrpcremote_server) serves it, as a worker of the gateway or as an upstream in TCP mode."""
import builtins
import collections
import datetime
import decimal
import hashlib
import os
import pathlib
import signal
import time

import robot.utils
from robot.api import logger

# What `Make` may use to build a value: the modules the suites' expressions name.
NAMESPACE = {"datetime": datetime, "decimal": decimal, "collections": collections, "robot": robot, "pathlib": pathlib}


class ConformanceLibrary:
    """Values, logs, failures and faults for the conformance suites."""

    def __init__(self, *args, **kwargs):
        self._import_args = [list(args), kwargs]
        self._calls = 0

    def echo(self, value):
        """Returns `value` unchanged."""
        return value

    def describe(self, value):
        """The type name and repr of what arrived: `TYPE:REPR`."""
        return "%s:%r" % (type(value).__name__, value)

    def describe_large(self, value):
        """The type name, length and SHA-256 of what arrived (for strings and bytes of megabytes)."""
        data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return "%s:%d:%s" % (type(value).__name__, len(value), hashlib.sha256(data).hexdigest())

    def make(self, expression):
        """Builds a value from a Python expression and returns it."""
        return eval(expression, dict(NAMESPACE))

    def get_import_arguments(self):
        """The positional and named arguments this instance was imported with."""
        return self._import_args

    def count_calls(self):
        """How many times this keyword ran on this instance: 1 on a fresh one."""
        self._calls += 1
        return self._calls

    def library_name(self):
        """The name of the module this instance comes from."""
        return type(self).__name__

    def log_at_each_level(self):
        """Logs one message at each level Robot's logger has, and one as HTML."""
        logger.trace("a trace message")
        logger.debug("a debug message")
        logger.info("an info message")
        logger.info("<b>an html message</b>", html=True)
        logger.warn("a warning")
        logger.error("an error message")
        return "logged"

    def fail_with(self, message, kind="AssertionError"):
        """Raises the built-in exception `kind` with `message`."""
        raise getattr(builtins, kind)(message)

    def sleep_for(self, seconds):
        """Sleeps `seconds` seconds, then returns them."""
        time.sleep(float(seconds))
        return float(seconds)

    def crash(self):
        """Ends the worker process at once (SIGKILL), as a crashing native extension would."""
        os.kill(os.getpid(), signal.SIGKILL)
