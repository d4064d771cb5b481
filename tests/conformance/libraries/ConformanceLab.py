"""Starts and stops what the conformance suites talk to: the real gateway binary with a configuration
generated from gateway.toml, the reference server in TCP mode (an `upstream`), and a classic XML-RPC
server (classic_server.py). Everything runs on free loopback ports; files go to ${OUTPUT DIR}/lab.

The binaries come from RJG_BIN_DIR (deploy/conformance.sh sets it to BUILD/bin). Every process the
lab starts, and every process those start (the gateway's workers, the stock client's stdio gateways),
inherits a marker variable; `Stop Lab` ends the lab's own processes and then any process still
carrying the marker, so a run leaves nothing behind even when the gateway is killed mid-way.
"""
import json
import os
import re
import shlex
import signal
import socket
import string
import subprocess
import sys
import time
import uuid
from pathlib import Path

from robot.api import logger
from robot.libraries.BuiltIn import BuiltIn

HERE = Path(__file__).resolve().parent
SUITES = HERE.parent
WORKER_LIBRARIES = SUITES / "worker_libraries"
MARKER = "RJG_CONFORMANCE_LAB"
# Start-ups are bounded generously: on a loaded 2-core machine Python plus Robot Framework takes
# seconds; nothing here asserts how fast anything is.
START_TIMEOUT = 60.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def can_connect(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def toml_string(text):
    # A JSON string is a valid TOML basic string (same escapes, \uXXXX included).
    return json.dumps(str(text))


def tail(path, lines=30):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class ConformanceLab:
    """Starts the lab in the top-level suite setup, stops it in its teardown."""

    ROBOT_LIBRARY_SCOPE = "GLOBAL"

    def __init__(self):
        self._processes = []  # (name, Popen, log path), in start order
        self._dir = None

    def start_lab(self):
        """Starts the classic server, the reference server, and the gateway; sets the global variables
        ${GATEWAY} (tcp:// URI), ${GATEWAY_STDIO} (stdio: URI starting `robot-jsonrpc-gateway --stdio`),
        ${CLASSIC} (the gateway's classic front), ${CLASSIC_SERVER} (the classic server itself),
        ${REFERENCE_SERVER} (the reference server itself), ${MCP_SERVER} (empty without one) and
        ${LAB_DIR}."""
        builtin = BuiltIn()
        bin_dir = os.environ.get("RJG_BIN_DIR")
        if not bin_dir:
            raise RuntimeError("RJG_BIN_DIR is not set: set it to the directory of robot-jsonrpc-gateway "
                               "and its workers (deploy/conformance.sh sets BUILD/bin)")
        bin_dir = Path(bin_dir).resolve()
        gateway = bin_dir / "robot-jsonrpc-gateway"
        if not os.access(gateway, os.X_OK):
            raise RuntimeError(f"{gateway} is not an executable: build the project first (deploy/build.sh), "
                               "or point RJG_BIN_DIR at a build's bin directory")
        self._dir = Path(builtin.get_variable_value("${OUTPUT DIR}")) / "lab"
        self._dir.mkdir(parents=True, exist_ok=True)
        # Inherited by everything started from now on, by this process and by its children
        # (deploy/conformance.sh sets it for the whole run, and looks for leftovers after it).
        os.environ.setdefault(MARKER, f"{os.getpid()}-{uuid.uuid4().hex}")

        classic_port = self._start_classic_server()
        reference_port = self._start_reference_server()
        mcp_server = os.environ.get("RJG_MCP_SERVER", "")
        port = free_port()
        front_port = free_port()
        while front_port == port:
            front_port = free_port()
        values = {
            "python": toml_string(sys.executable),
            "pythonpath": toml_string(os.environ.get("PYTHONPATH", "")),
            "worker_libraries": toml_string(WORKER_LIBRARIES),
            "lab_dir": toml_string(self._dir),
            "test_worker": toml_string(bin_dir / "robot-test-worker"),
            "mcp_worker": toml_string(bin_dir / "robot-mcp-worker"),
            "ansible_worker": toml_string(bin_dir / "robot-ansible-worker"),
            # A command that cannot start: the MCP suite skips before importing when there is no server.
            "mcp_server": toml_string(mcp_server or "/nonexistent/mcp-server-everything"),
            "reference_server": toml_string(f"tcp://127.0.0.1:{reference_port}"),
            "classic_server": toml_string(f"http://127.0.0.1:{classic_port}/"),
            # The same server as one older than Robot 4 (no get_library_information; classic_server.py).
            "classic_server_old": toml_string(f"http://127.0.0.1:{classic_port}/old"),
            # deploy/conformance.sh runs the reference server's suites a second time with its workers
            # forked from a template (fork_server = true).
            "fork_server": "true" if os.environ.get("RJG_CONFORMANCE_FORK_SERVER") == "1" else "false",
        }
        template = string.Template((SUITES / "gateway.toml").read_text())
        tcp_config = self._dir / "gateway.toml"
        tcp_config.write_text(
            template.substitute(values, listen=toml_string(f"tcp://127.0.0.1:{port}"), log_level='"info"',
                                classic=f"[classic]\nlisten = [{toml_string(f'tcp://127.0.0.1:{front_port}')}]\n"
                                        'default_library = "Values"\n'))
        # The stdio front's gateway is started by the stock client, once per import: no [classic] table
        # there (its port is the TCP gateway's), and its [gateway] listen is ignored. It logs to robot's
        # stderr, so warnings only.
        stdio_config = self._dir / "gateway-stdio.toml"
        stdio_config.write_text(template.substitute(values, listen=toml_string("tcp://127.0.0.1:1"),
                                                    log_level='"warn"', classic=""))

        log = self._dir / "gateway.log"
        process = self._start("gateway", [str(gateway), "--config", str(tcp_config)], log)
        deadline = time.monotonic() + START_TIMEOUT
        while not (can_connect(port) and can_connect(front_port)):
            if process.poll() is not None:
                raise RuntimeError(f"the gateway exited ({process.returncode}) at start; its log:\n{tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gateway did not accept connections within {START_TIMEOUT:.0f} s; "
                                   f"its log:\n{tail(log)}")
            time.sleep(0.05)

        stdio = " ".join(shlex.quote(str(a)) for a in [gateway, "--stdio", "--config", stdio_config])
        for name, value in [("GATEWAY", f"tcp://127.0.0.1:{port}"), ("GATEWAY_STDIO", f"stdio:{stdio}"),
                            ("CLASSIC", f"http://127.0.0.1:{front_port}"),
                            ("CLASSIC_SERVER", f"http://127.0.0.1:{classic_port}"),
                            ("REFERENCE_SERVER", f"tcp://127.0.0.1:{reference_port}"),
                            ("MCP_SERVER", mcp_server), ("LAB_DIR", str(self._dir))]:
            builtin.set_global_variable("${%s}" % name, value)
        logger.info(f"gateway on port {port} (classic front {front_port}); config {tcp_config}; log {log}")

    def _start(self, name, argv, log, read_stdout=False):
        with open(log, "wb") as output:
            # A process group of its own: Stop Lab signals the group, so nothing it started is missed.
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE if read_stdout else output, stderr=output,
                                       cwd=self._dir, start_new_session=True)
        self._processes.append((name, process, log))
        return process

    def _start_classic_server(self):
        log = self._dir / "classic-server.log"
        process = self._start("classic server", [sys.executable, str(HERE / "classic_server.py")], log,
                              read_stdout=True)
        line = process.stdout.readline().decode()  # "listening on 127.0.0.1:PORT", once it accepts
        match = re.search(r"listening on [\d.]+:(\d+)", line)
        if not match:
            raise RuntimeError(f"classic_server.py did not say where it listens; its log:\n{tail(log)}")
        return int(match.group(1))

    def _start_reference_server(self):
        log = self._dir / "reference-server.log"
        # The library of the upstream route, and the standard libraries the gateway's workers serve, for
        # the suite that compares the two.
        process = self._start("reference server", [sys.executable, "-m", "robot_jsonrpcremote_server", "--port", "0",
                                                   "--pythonpath", str(WORKER_LIBRARIES), "ConformanceLibrary",
                                                   "String", "Collections", "DateTime", "XML", "OperatingSystem"],
                              log)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and process.poll() is None:
            match = re.search(r"listening on \('127\.0\.0\.1', (\d+)\)", tail(log))
            if match:
                return int(match.group(1))
            time.sleep(0.05)
        raise RuntimeError(f"the reference server did not start listening; its log:\n{tail(log)}")

    def stop_lab(self):
        """Stops the gateway (SIGTERM: it drains and ends its workers), then the servers, then whatever
        still carries the lab's marker."""
        for name, process, log in reversed(self._processes):
            self._stop(name, process, log)
        self._processes.clear()
        if MARKER in os.environ:
            self._sweep(os.environ[MARKER])

    def _stop(self, name, process, log):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                logger.warn(f"the {name} (pid {process.pid}) did not exit within 15 s of SIGTERM: killed; "
                            f"its log: {log}")
        # The process group: whatever the process started and left behind.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        if process.stdout:
            process.stdout.close()

    def _sweep(self, marker):
        needle = f"{MARKER}={marker}".encode()
        left = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    left.append(int(entry.name))
            except OSError:
                continue
        for pid in left:
            try:
                cmdline = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                os.kill(pid, signal.SIGKILL)
                logger.warn(f"process {pid} ({cmdline.strip()}), started by the lab, was still running: killed")
            except (OSError, ProcessLookupError):
                pass
