"""The fork server's template on its own (workers/fork_server), with the real reference server.

The test plays the gateway: it makes the control socketpair, starts the template, sends fork requests
with pipes for the worker's stdin, stdout and stderr, and talks the reference server's protocol to the
workers. They hold the template to its wire format (robot_jsonrpc_fork_control.py) and to a plain
start's behaviour on its own; the gateway's side (fork_server = true) is tested with it by the
conformance stage's second pass over the reference server's suites.

    python3 -m unittest discover -s tests/fork_server -v     # deploy/conformance.sh runs it

Needs Linux and an interpreter that can import robot and robot_jsonrpcremote_server; without them the
tests are skipped (with RJG_REQUIRE_CONFORMANCE=1 they fail instead, as the conformance stage does).
Nothing is timed: WAIT only keeps a hung peer from hanging the run.
"""

import ctypes
import importlib.util
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import unittest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = os.path.join(TOP, "workers", "fork_server", "robot_jsonrpc_fork_server.py")
WORKER_LIBRARIES = os.path.join(TOP, "tests", "conformance", "worker_libraries")
SERVER_ARGS = ["--stdio", "--pythonpath", WORKER_LIBRARIES, "ConformanceLibrary"]
PR_SET_CHILD_SUBREAPER = 36
WAIT = 120  # seconds


def setUpModule():
    problem = None
    if not sys.platform.startswith("linux"):
        problem = "the fork server needs Linux (SOCK_SEQPACKET, PR_SET_CHILD_SUBREAPER)"
    else:
        missing = [name for name in ("robot", "robot_jsonrpcremote_server") if importlib.util.find_spec(name) is None]
        if missing:
            problem = (f"{sys.executable} cannot import {', '.join(missing)}: pip install robotframework "
                       "robotframework-jsonrpcremote-server")
    if problem:
        if os.environ.get("RJG_REQUIRE_CONFORMANCE") == "1":
            raise RuntimeError(f"fork server tests: {problem} (and RJG_REQUIRE_CONFORMANCE=1)")
        raise unittest.SkipTest(f"fork server tests skipped: {problem}")
    # The gateway's part: workers are double-forked, so only a subreaper gets them as children.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def read_some(fd, who):
    ready, _, _ = select.select([fd], [], [], WAIT)
    if not ready:
        raise AssertionError(f"{who} wrote nothing for {WAIT} s: hung")
    return os.read(fd, 65536)


def read_to_end(fd, who):
    data = b""
    while chunk := read_some(fd, who):
        data += chunk
    return data


def parse_frame(data):
    """(the first whole message, the rest), or () when none is whole yet."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return ()
    length = int(data[:end].split(b":")[1])
    if len(data) < end + 4 + length:
        return ()
    return json.loads(data[end + 4:end + 4 + length]), data[end + 4 + length:]


def parse_frames(data):
    messages = []
    while data:
        message, data = parse_frame(data)
        messages.append(message)
    return messages


class Worker:
    """One worker's pipes and the reference server's protocol over them."""

    def __init__(self):
        self.stdin_r, self.stdin_w = os.pipe()
        self.stdout_r, self.stdout_w = os.pipe()
        self.stderr_r, self.stderr_w = os.pipe()
        self.pid = None
        self.reap = None  # returns the exit status; by default waitpid, the worker being our child
        self.buffer = b""
        self.next_id = 0

    def child_fds(self):
        return [self.stdin_r, self.stdout_w, self.stderr_w]

    def started(self, pid, reap=None):
        self.pid = pid
        self.reap = reap
        for fd in self.child_fds():  # the worker has its copies: EOF must reach it and us
            os.close(fd)
        return self

    def send(self, message):
        body = (json.dumps(message) + "\r\n").encode()
        os.write(self.stdin_w, b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def read_message(self):
        while not (parsed := parse_frame(self.buffer)):
            chunk = read_some(self.stdout_r, f"worker {self.pid}")
            if not chunk:
                raise AssertionError(f"worker {self.pid} closed its stdout")
            self.buffer += chunk
        message, self.buffer = parsed
        return message

    def call(self, method, params):
        """The answer's result; the messages that came before it (logs) are dropped."""
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "method": method, "id": str(self.next_id), "params": params})
        while (message := self.read_message()).get("id") != str(self.next_id):
            pass
        if "error" in message:
            raise AssertionError(f"worker {self.pid} answered {method} with {message}")
        return message["result"]

    def start_session(self):
        self.call("robot/initialize", {"capabilities": {}, "client_info": {"name": "test", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "robot/initialized", "params": {}})
        return self.call("robot/import_library", {"name": "", "args": []})["token"]

    def finish(self):
        """Closes stdin and reaps the worker: (its exit status, what was left on stdout, its stderr)."""
        if self.stdin_w is not None:
            os.close(self.stdin_w)
            self.stdin_w = None
        rest = self.buffer + read_to_end(self.stdout_r, f"worker {self.pid}")
        stderr = read_to_end(self.stderr_r, f"worker {self.pid}").decode()
        status = self.reap() if self.reap else os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        os.close(self.stdout_r)
        os.close(self.stderr_r)
        self.pid = None
        return status, rest, stderr

    def kill(self):
        if self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)
            self.finish()


class Template:
    """The template process and the gateway's end of its control socket."""

    def __init__(self, cwd, server_args=SERVER_ARGS):
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.control_inode = os.fstat(theirs.fileno()).st_ino
        self.stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen([sys.executable, PROGRAM, "--name", "Conformance", "--"] + server_args,
                                        stdin=theirs, stderr=self.stderr, cwd=cwd, process_group=0)
        theirs.close()
        self.control.settimeout(WAIT)
        try:
            self.ready = json.loads(self.receive())
        except BaseException:
            self.process.kill()
            self.close()
            raise

    def receive(self):
        try:
            packet = self.control.recv(65536)
        except socket.timeout:
            raise AssertionError(f"the template sent nothing for {WAIT} s; its stderr: {self.log()}") from None
        if not packet:
            raise AssertionError(f"the template closed the control socket; its stderr: {self.log()}")
        return packet

    def ask(self, request, fds):
        data = request if isinstance(request, bytes) else json.dumps(request).encode()
        socket.send_fds(self.control, [data], fds)
        return json.loads(self.receive())

    def fork(self, rlimits=None):
        worker = Worker()
        answer = self.ask({"v": 1, "id": "w", "rlimits": rlimits or {}}, worker.child_fds())
        if "pid" not in answer:
            for fd in worker.child_fds() + [worker.stdin_w, worker.stdout_r, worker.stderr_r]:
                os.close(fd)
            raise AssertionError(f"the template made no worker: {answer}")
        self.sync()
        return worker.started(answer["pid"])

    def sync(self):
        # The template reaps a worker's intermediate before it reads the next request: once this
        # (refused) one is answered, the worker is this process's child.
        answer = self.ask({"v": 1, "id": "sync"}, [])
        assert "3 descriptors" in answer.get("error", ""), answer

    def close(self):
        """The template's exit status and stderr."""
        self.control.close()
        status = self.process.wait(WAIT)
        log = self.log()
        self.stderr.close()
        return status, log

    def log(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")


def conversation():
    """A session as the stock client holds it, with imports, logs, failures and the worker's own view."""
    keywords = [("Echo", ["x"]), ("Get Import Arguments", []), ("Count Calls", []), ("Count Calls", []),
                ("Log At Each Level", []), ("Fail With", ["boom"]), ("Fail With", ["bad", "ValueError"]),
                ("Describe", [{"__pickled__": "x"}]), ("No Such Keyword", []), ("Make", ["[1, 2.5, None]"]),
                # What a library sees of its process: a plain start's sys.path begins with the working
                # directory (python -m), sys.argv is the server's.
                ("Make", ["repr((__import__('sys').path, __import__('sys').argv, __import__('os').getcwd()))"])]
    messages = [
        {"method": "robot/initialize", "id": "1", "params": {"capabilities": {}, "client_info": {"name": "c",
                                                                                                  "version": "1"}}},
        {"method": "robot/initialized", "params": {}},
        {"method": "robot/import_library", "id": "2", "params": {"name": "", "args": ["a", 1], "kw_args": {"k": "v"}}},
    ]
    for number, (name, args) in enumerate(keywords):
        messages.append({"method": "robot/run_keyword", "id": str(10 + number),
                         "params": {"library_token": "TOKEN", "name": name, "args": args, "kwargs": {}}})
    messages += [{"method": "robot/finalize_library", "id": "90", "params": {"token": "TOKEN"}},
                 {"method": "robot/shutdown", "id": "91", "params": {}},
                 {"method": "robot/exit", "params": {}}]
    return [dict(message, jsonrpc="2.0") for message in messages]


def hold_conversation(worker):
    """Every message the worker sent, with its library token as TOKEN; its exit status; its stderr."""
    received, token = [], None
    for message in conversation():
        if token:
            message = json.loads(json.dumps(message).replace("TOKEN", token))
        worker.send(message)
        if "id" not in message:
            continue
        while True:
            received.append(worker.read_message())
            if received[-1].get("id") == message["id"]:
                break
        if message["method"] == "robot/import_library":
            token = received[-1]["result"]["token"]
    status, rest, stderr = worker.finish()
    received += parse_frames(rest)
    return [json.loads(json.dumps(message).replace(token, "TOKEN")) for message in received], status, stderr


class ForkedWorkerTest(unittest.TestCase):
    maxDiff = None
    @classmethod
    def setUpClass(cls):
        cls.cwd = tempfile.TemporaryDirectory()
        cls.template = Template(cls.cwd.name)

    @classmethod
    def tearDownClass(cls):
        status, log = cls.template.close()
        cls.cwd.cleanup()
        if status != 0:
            raise AssertionError(f"the template exited with {status}, not 0, when its control socket closed; "
                                 f"its stderr: {log}")

    def test_the_template_says_what_it_preloaded(self):
        ready = self.template.ready
        self.assertEqual(ready["v"], 1)
        self.assertTrue(ready["ready"])
        self.assertEqual(ready["pid"], self.template.process.pid)
        self.assertEqual(ready["preloaded"], ["ConformanceLibrary"])
        self.assertEqual(ready["not_preloaded"], {})

    def test_a_forked_worker_holds_the_same_conversation_as_a_plain_start(self):
        plain = Worker()
        process = subprocess.Popen([sys.executable, "-m", "robot_jsonrpcremote_server"] + SERVER_ARGS,
                                   stdin=plain.stdin_r, stdout=plain.stdout_w, stderr=plain.stderr_w,
                                   cwd=self.cwd.name, process_group=0)
        plain.started(process.pid, lambda: process.wait(WAIT))
        self.addCleanup(plain.kill)
        plain_messages, plain_status, plain_stderr = hold_conversation(plain)
        forked = self.template.fork()
        self.addCleanup(forked.kill)
        forked_messages, forked_status, forked_stderr = hold_conversation(forked)

        self.assertEqual(plain_status, 0, plain_stderr)
        self.assertEqual(forked_status, 0, forked_stderr)
        self.assertGreater(len(plain_messages), len(conversation()) - 2)  # answers and log notifications
        self.assertEqual(forked_messages, plain_messages)
        # The template logged the server's first line once, for every worker it forks.
        plain_lines = plain_stderr.splitlines()
        self.assertEqual(plain_lines[0], "[INFO] Server will start in stdio mode.")
        self.assertEqual(forked_stderr.splitlines(), plain_lines[1:])

    def test_a_worker_leads_its_group_is_the_gateways_child_and_has_its_limits(self):
        _, nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        nofile = 512 if nofile_hard == resource.RLIM_INFINITY else min(512, nofile_hard)
        worker = self.template.fork({"nofile": nofile, "core": 0})
        self.addCleanup(worker.kill)
        pid = worker.pid
        self.assertEqual(os.getpgid(pid), pid)
        with open(f"/proc/{pid}/stat") as stat:
            parent = int(stat.read().rpartition(")")[2].split()[1])
        self.assertEqual(parent, os.getpid())
        self.assertEqual(resource.prlimit(pid, resource.RLIMIT_NOFILE), (nofile, nofile))
        self.assertEqual(resource.prlimit(pid, resource.RLIMIT_CORE), (0, 0))
        inodes = [os.fstat(fd).st_ino for fd in (worker.stdin_w, worker.stdout_r, worker.stderr_r)]
        worker.start_session()  # by now it has set up its descriptors
        links = {fd: os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        self.assertEqual([links[str(fd)] for fd in range(3)], [f"pipe:[{inode}]" for inode in inodes])
        self.assertNotIn(f"socket:[{self.template.control_inode}]", links.values(),
                         "the worker holds the template's control socket open")
        status, _, stderr = worker.finish()
        self.assertEqual(status, 0, stderr)

    def test_bad_requests_are_answered_and_the_template_goes_on(self):
        def ask(request, fds_count=3):
            # Descriptors that are only ours once the template has closed its copies.
            pipes = [os.pipe() for _ in range(fds_count)]
            answer = self.template.ask(request, [write for _, write in pipes])
            if "pid" in answer:
                self.template.sync()
                Worker().started(answer["pid"]).kill()
                self.fail(f"the template forked a worker for a bad request: {answer}")
            for read, write in pipes:
                os.close(write)
                self.assertEqual(read_some(read, "a refused request's pipe"), b"",
                                 f"the template kept a descriptor of a refused request ({answer})")
                os.close(read)
            return answer

        cases = [
            (b"hello", 3, None, "bad request: Expecting value"),
            (b"[1]", 3, None, "a request is a JSON object"),
            (b"x" * 70000, 3, None, "longer than 65536 bytes"),
            ({"v": 2, "id": 1}, 3, 1, "version 1 of the request format, not 2"),
            ({"v": 1, "id": "two"}, 2, "two", "3 descriptors (stdin, stdout, stderr), not 2"),
            ({"v": 1, "id": 4, "rlimits": {"stack": 1}}, 3, 4, "unknown rlimit 'stack'"),
            ({"v": 1, "id": 5, "rlimits": {"core": -1}}, 3, 5, "rlimit 'core' must be a non-negative integer"),
            ({"v": 1, "id": 6, "rlimits": []}, 3, 6, "rlimits is a JSON object"),
            # Above the kernel's nr_open, which not even root may exceed: the worker is made and killed.
            ({"v": 1, "id": 7, "rlimits": {"nofile": 1 << 40}}, 3, 7, "cannot set rlimit 'nofile'"),
        ]
        for request, fds_count, request_id, text in cases:
            with self.subTest(request=request[:20] if isinstance(request, bytes) else request):
                answer = ask(request, fds_count)
                self.assertEqual(answer["id"], request_id)
                self.assertNotIn("pid", answer)
                self.assertIn(text, answer["error"])
        worker = self.template.fork()
        self.addCleanup(worker.kill)
        worker.start_session()
        status, _, stderr = worker.finish()
        self.assertEqual(status, 0, stderr)


class TemplateGoneTest(unittest.TestCase):
    def test_a_worker_keeps_serving_after_the_template_is_killed(self):
        with tempfile.TemporaryDirectory() as cwd:
            template = Template(cwd)
            worker = template.fork()
            self.addCleanup(worker.kill)
            token = worker.start_session()
            template.process.kill()
            self.assertEqual(template.close()[0], -signal.SIGKILL)
            self.assertEqual(worker.call("robot/run_keyword", {"library_token": token, "name": "Echo",
                                                               "args": ["after"], "kwargs": {}}), {"result": "after"})
            status, _, stderr = worker.finish()
            self.assertEqual(status, 0, stderr)


def private_pages(pid):
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        kib = sum(int(line.split()[1]) for line in rollup if line.startswith(("Private_Clean:", "Private_Dirty:")))
    return kib * 1024 // resource.getpagesize()


def page_plan_supported():
    sys.path.insert(0, os.path.dirname(PROGRAM))
    try:
        from robot_jsonrpc_fork_control import PagePlan
        return PagePlan().supported()
    finally:
        del sys.path[0]


@unittest.skipUnless(sys.platform.startswith("linux") and page_plan_supported(),
                     "no MADV_POPULATE_WRITE (Linux 5.14) or no /proc/self/pagemap: workers fault as before")
class PagePlanTest(unittest.TestCase):
    """The first worker learns which of the template's pages a session makes its own; later ones copy them
    ahead (robot_jsonrpc_fork_control.PagePlan)."""

    def setUp(self):
        cwd = tempfile.TemporaryDirectory()
        self.addCleanup(cwd.cleanup)
        self.template = Template(cwd.name)
        self.addCleanup(self.template.close)

    def fork(self):
        worker = self.template.fork()
        self.addCleanup(worker.kill)
        return worker

    @staticmethod
    def echo(worker, token, value):
        return worker.call("robot/run_keyword", {"library_token": token, "name": "Echo", "args": [value], "kwargs": {}})

    def learned_pages(self, learner):
        """The pages the template logged as learned from `learner`; fails if it logged none."""
        text = f"(learned from worker pid {learner.pid}'s session)"
        lines = [line for line in self.template.log().splitlines() if text in line]
        self.assertEqual(len(lines), 1, f"no plan learned from worker {learner.pid}: {self.template.log()}")
        return int(lines[0].split("copy ")[1].split(" pages")[0])

    def test_workers_forked_after_the_first_session_copy_its_pages_before_theirs_begins(self):
        first = self.fork()
        token = first.start_session()
        # Forked before the learner's first keyword: no plan yet, and not a second learner.
        early = self.fork()
        self.assertNotIn("learned from", self.template.log())
        for value in ("x", "y"):  # (it learns before it takes its third command)
            self.echo(first, token, value)
        second = self.fork()
        pages = self.learned_pages(first)
        self.assertGreater(pages, 200)
        # Before its session, its handshake only, it already holds the learned pages of its own: 1,458
        # private pages here without the copy, 2,371 with it.
        second.call("robot/initialize", {"capabilities": {}, "client_info": {"name": "test", "version": "0"}})
        self.assertGreaterEqual(private_pages(second.pid), pages)
        # And it serves exactly as the others do.
        for worker in (second, early):
            self.assertEqual(self.echo(worker, worker.start_session(), "v"), {"result": "v"})
        for worker in (first, second, early):
            status, _, stderr = worker.finish()
            self.assertEqual(status, 0, stderr)

    def test_a_learner_that_ends_before_it_has_learned_is_replaced_by_the_next_worker(self):
        first = self.fork()
        first.kill()  # before its first command
        second = self.fork()
        token = second.start_session()
        for value in ("x", "y"):  # (it learns before it takes its third command)
            self.echo(second, token, value)
        self.fork()
        self.assertGreater(self.learned_pages(second), 200)


class CommandLineTest(unittest.TestCase):
    def run_template(self, arguments, cwd=None):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.addCleanup(ours.close)
        with theirs:
            return subprocess.Popen([sys.executable, PROGRAM] + arguments, stdin=theirs, stderr=subprocess.PIPE,
                                    text=True, cwd=cwd)

    def assert_exits(self, process, status, text):
        _, stderr = process.communicate(timeout=WAIT)
        self.assertEqual(process.returncode, status, stderr)
        self.assertIn(text, stderr)

    def test_a_bad_command_line_exits_2_and_says_why(self):
        self.assert_exits(self.run_template(["--name", "X"]), 2, "no reference server arguments: give them after --")
        self.assert_exits(self.run_template(["--", "--stdio", "--bogus", "X"]), 2,
                          "the reference server refused the library's command arguments")

    def test_a_template_that_cannot_get_ready_exits_3_and_says_why(self):
        with tempfile.TemporaryDirectory() as libraries:
            with open(os.path.join(libraries, "Threaded.py"), "w") as library:
                library.write("import threading\nthreading.Thread(target=threading.Event().wait, daemon=True).start()\n"
                              "class Threaded:\n    pass\n")
            # Started together: each one imports Robot and the server first.
            cases = [
                (self.run_template(["--", "--tcp", "X"]), "the command must serve stdio"),
                (subprocess.Popen([sys.executable, PROGRAM, "--", "--stdio", "X"], stdin=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True), "descriptor 0 is not a socket"),
                (self.run_template(["--", "--stdio", "--pythonpath", libraries, "Threaded"]),
                 "importing Threaded started 1 thread(s)"),
            ]
            for process, text in cases:
                with self.subTest(text=text):
                    self.assert_exits(process, 3, text)


if __name__ == "__main__":
    unittest.main()
