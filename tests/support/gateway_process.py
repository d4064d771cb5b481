"""The real gateway, started for the project's Python test programs (tests/browser, tests/monitoring).

    with running_gateway(gateway_binary, lambda port, admin: CONFIG_TEXT, "rjg-my-test.") as g:
        http_get(f"http://127.0.0.1:{g.admin}/status")

The configuration is written into a temporary directory (g.dir, removed afterwards) with a client port
and an admin port that were free a moment before; the gateway logs into g.dir/gateway.log. The block
runs once the gateway listens on its admin port and /readyz answers 200. When it raises, the gateway's log (or its last lines) goes to stderr
first; either way the gateway is stopped with SIGTERM (SIGKILL if it has not ended in stop_timeout).
"""
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

# Start-up is not a measurement: the same bound the integration harness gives the gateway.
STARTUP_SECONDS = 20


def free_ports(count):
    """Loopback ports that were free a moment ago, distinct (each socket stays bound until all are picked)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def listens_on(pid, port):
    """True if process pid holds a TCP socket listening on port (from /proc: an answer on the port alone
    may come from another process that has it, such as another test's gateway)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)  # the header
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            if os.readlink(os.path.join(fds, fd)) in inodes:
                return True
        except OSError:
            pass  # closed meanwhile
    return False


def http_get(url):
    """(status, headers, body text) of a GET; raises urllib's errors."""
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, dict(r.headers), r.read().decode("utf-8")


class Gateway:
    def __init__(self, directory, port, admin, proc):
        self.dir = directory
        self.port = port
        self.admin = admin
        self.proc = proc
        self.log_path = os.path.join(directory, "gateway.log")


@contextlib.contextmanager
def running_gateway(binary, config_text, prefix, log_tail_lines=None, stop_timeout=30):
    """config_text(port, admin) returns the configuration; log_tail_lines: how much log a failure shows
    (None: all of it)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        port, admin = free_ports(2)
        config = os.path.join(tmp, "gateway.toml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(config_text(port, admin))
        with open(os.path.join(tmp, "gateway.log"), "w") as log:
            proc = subprocess.Popen([binary, "--config", config], stdout=log, stderr=log)
        g = Gateway(tmp, port, admin, proc)
        try:
            deadline = time.monotonic() + STARTUP_SECONDS
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"the gateway exited during start-up ({proc.returncode})")
                try:
                    if listens_on(proc.pid, admin) and http_get(f"http://127.0.0.1:{admin}/readyz")[0] == 200:
                        break
                except (urllib.error.URLError, ConnectionError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway's admin endpoint 127.0.0.1:{admin} was not ready within "
                                       f"{STARTUP_SECONDS} s")
                time.sleep(0.05)
            yield g
        except BaseException:
            with open(g.log_path) as log:
                lines = log.readlines()
            if log_tail_lines is None:
                sys.stderr.write("gateway log:\n" + "".join(lines))
            else:
                sys.stderr.write("gateway log (tail):\n" + "".join(lines[-log_tail_lines:]))
            raise
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
