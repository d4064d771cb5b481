"""robot_jsonrpc_fork_server: a preloaded template that forks reference-server workers for the gateway.

A plain worker (`PYTHON -m robot_jsonrpcremote_server --stdio ARGS...`) pays, per session, for starting
the interpreter, importing Robot Framework, the reference server and the library, and building Robot's
execution context; and each one holds its own private copy of all of it. This program does that work
once, in one process (the template), stops exactly where the reference server would start serving, and
from there forks one child per session. A child shares the template's pages until it writes to them, so
it costs only what its own session touches.

Usage (the gateway starts it for a library with fork_server = true; see doc/workers.md):

    PYTHON robot_jsonrpc_fork_server.py [--name LIBRARY] [--control-fd N] [--preload MODULE]... \\
        -- SERVER_ARGS...

SERVER_ARGS are the library's command after `-m robot_jsonrpcremote_server` (they must include
`--stdio`); they are parsed by the reference server's own parser, so every child runs with exactly the
options a plain start of the command would have. --preload names the modules to import ahead (library
names as Robot resolves them); the libraries named in SERVER_ARGS are always preloaded.

The program is three files in one folder, run as this one: robot_jsonrpc_fork_control.py holds the
control socket's wire format (described at its top) and the double fork; robot_jsonrpc_fork_startup.py
holds the reference server's start-up, split where the template forks (why there: at its top), and the
preloading and warm-up. This file runs the template: it gets ready, then answers fork requests.

The template never starts a thread or an event loop (it checks before every fork: forking a process
with threads leaves the child with locks nobody will release), and never imports a library through
Robot for a session or runs a keyword. When the gateway closes its end of the control socket, the
template exits; workers it forked live on.

Exit statuses: 0 the control socket was closed; 2 bad command line; 3 the template could not get
ready (its stderr says why; the gateway then starts the library's workers the plain way).
"""

import argparse
import gc
import os
import sys

# The two other files sit next to this one; whether Python put this folder on sys.path depends on -P
# and PYTHONSAFEPATH, so it is added for these imports only.
HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, HERE)
from robot_jsonrpc_fork_control import PROTOCOL_VERSION, BadRequest, ControlSocket, ForkError, Forker, \
    thread_count  # noqa: E402
from robot_jsonrpc_fork_startup import NotReady, ServerStart, preload, warm_up_protocol, warm_up_robot  # noqa: E402

del sys.path[0]

EXIT_NOT_READY = 3


def log(name, level, text):
    # The gateway reads the template's stderr line by line, as it reads a worker's.
    sys.stderr.write(f"[{level}] fork server for library '{name}' (pid {os.getpid()}): {text}\n")
    sys.stderr.flush()


def parse_command_line(argv):
    parser = argparse.ArgumentParser(
        prog="robot_jsonrpc_fork_server",
        description="Preloads the reference server and a library once, then forks one worker per request.",
    )
    parser.add_argument("--name", help="the gateway's name of the library, for messages")
    parser.add_argument("--control-fd", type=int, default=0, help="the SOCK_SEQPACKET control socket (default 0)")
    parser.add_argument("--preload", action="append", default=[], metavar="MODULE",
                        help="a module to import ahead (repeatable); the libraries in SERVER_ARGS always are")
    parser.add_argument("server_args", nargs=argparse.REMAINDER,
                        help="-- then the reference server's arguments, as in the library's command")
    args = parser.parse_args(argv)
    if args.server_args and args.server_args[0] == "--":
        args.server_args = args.server_args[1:]
    if not args.server_args:
        parser.error("no reference server arguments: give them after --, e.g. -- --stdio MyLibrary")
    return args


def path_as_with_dash_m():
    # Running a file puts its folder first on sys.path; `python -m robot_jsonrpcremote_server` puts the
    # working directory there instead (unless -P or PYTHONSAFEPATH), and a forked worker must find a
    # library in the working directory exactly as a plain start does.
    if sys.flags.safe_path or not sys.path:
        return
    if os.path.realpath(sys.path[0] or os.curdir) == HERE:
        sys.path[0] = os.getcwd()


class Template:
    def __init__(self, args):
        self.args = args
        self.name = args.name or "?"
        self.start = None  # ServerStart
        self.control = None  # ControlSocket
        self.forker = None
        self.in_worker = False

    def run(self):
        """Returns in a worker after its session, or raises NotReady; the template itself ends in serve()."""
        self.start = ServerStart(self.args.server_args)
        libraries = self.start.libraries
        self.name = self.args.name or (libraries[0] if libraries else "robot_jsonrpcremote_server")
        self.start.configure()
        try:
            self.control = ControlSocket(self.args.control_fd)
        except ValueError as error:
            raise NotReady(f"{error}: start this program with one end of a SOCK_SEQPACKET socketpair as "
                           "--control-fd (the gateway's fork server side will pass one)") from None
        self.forker = Forker(self.name, self.control)
        # The listener calls the context's hook loop when Robot starts the internal keyword: the
        # template's own loop goes there instead, so that it forks from inside Robot's execution.
        self.start.run_context(self.serve)
        if not self.in_worker:
            # Robot returned without calling the hook: the internal suite did not run (a bad
            # --variablefile, an unwritable --outputdir...). Robot has said why on stderr.
            raise NotReady("Robot Framework ended its internal suite before it was ready to serve; the "
                           "reference server fails the same way with this command: run it by hand to see why")
        self.start.finish()

    # ---- the template's loop, inside Robot's execution context on the main thread ----

    def serve(self):
        try:
            self.get_ready()
        except NotReady as error:
            log(self.name, "ERROR", f"{error}; the gateway starts this library's workers the plain way")
            os._exit(EXIT_NOT_READY)
        try:
            while True:
                try:
                    request = self.control.receive()
                except BadRequest as error:
                    self.control.answer(error.request_id, error=str(error))
                    continue
                if request is None:  # the gateway closed its end (it stopped, or retired this template)
                    break
                if self.handle(request):
                    break
        except (ConnectionError, BrokenPipeError):
            pass  # the gateway went away: so does the template
        except BaseException as error:
            if not self.in_worker:
                # Robot would swallow an exception from its listener and end the suite: say why, and end.
                log(self.name, "ERROR", f"stopped by an unexpected error: {type(error).__name__}: {error}; the "
                    "gateway starts a new fork server after a back-off, and meanwhile plain workers")
                os._exit(1)
            raise
        if not self.in_worker:
            os._exit(0)
        # In the new worker: the template's loop is left for good, and the session runs in this hook.
        self.start.give_back_stop_signals()
        commands = self.learn_after_first_commands()
        self.start.serve()
        # The session is over. If it ended before its second command, it learns now, from its import at
        # least (Robot's end of the suite and the server's stop, which come next, write to pages no session
        # needs ahead); with no command at all there is nothing to learn from, and the next worker learns.
        if commands():
            self.forker.plan.learn()
        else:
            self.forker.plan.give_up()

    def learn_after_first_commands(self, commands=2):
        """In the worker that learns the page plan: learns once its import and first keyword have run.

        The runner thread takes each command from the context's queue when the one before has ended; the
        plan is learned there, between two commands, once (a few milliseconds). Returns a function that
        tells how many commands have been taken.
        """
        plan = self.forker.plan
        queue = getattr(self.start.context, "_command_queue", None)
        take = getattr(queue, "get", None)
        done = 0
        if not plan.is_learner:
            return lambda: done
        if take is None:
            return lambda: 1  # another version of the server: learned when the session ends

        def get(*args, **kwargs):
            nonlocal done
            if done >= commands:
                del queue.get  # the queue's own method again
                plan.learn()  # (never raises: an exception here would end the server's hook loop)
            item = take(*args, **kwargs)
            done += 1
            return item

        queue.get = get
        return lambda: done

    def get_ready(self):
        self.start.take_stop_signals()
        modules = []
        for module in self.start.libraries + list(self.args.preload):
            if module not in modules:
                modules.append(module)
        loaded, failed = preload(modules)
        for module, reason in failed.items():
            log(self.name, "WARN", f"could not preload module '{module}': {reason}. Each session imports it "
                "itself (slower) and gets the same error if it fails again; check `preload` and the "
                "library's PYTHONPATH")
        for problem in (warm_up_robot(), warm_up_protocol(self.start.libraries)):
            if problem:
                log(self.name, "INFO", f"skipped part of the warm-up ({problem}); sessions start a little slower, "
                    "nothing else changes")
        if thread_count() > 1:
            raise NotReady(f"importing {', '.join(modules)} started {thread_count() - 1} thread(s); a process "
                           "with threads cannot be forked safely. Remove the module that starts them from "
                           "`preload`, or set fork_server = false for this library")
        # What the template holds now is never freed: freezing it keeps every child's garbage collector
        # from writing into (and so copying) the template's pages. Collect first, so that the frozen
        # heap holds no garbage.
        gc.collect()
        gc.freeze()
        from robot.version import VERSION as robot_version
        from robot_jsonrpcremote_server.__version__ import __version__ as server_version

        self.control.send({"v": PROTOCOL_VERSION, "ready": True, "pid": os.getpid(), "preloaded": loaded,
                           "not_preloaded": failed, "python": sys.version.split()[0], "robot": robot_version,
                           "server": server_version})

    def handle(self, request):
        """Answers one request. True only in a new worker, which must then leave the template's loop."""
        learned = self.forker.plan.before_fork()
        if learned:
            log(self.name, "INFO", learned)
        try:
            pid = self.forker.fork(request)
        except ForkError as error:
            pid, problem = None, str(error)
        else:
            problem = None
        if pid == 0:
            self.in_worker = True
            return True
        for fd in request.fds:  # the worker has its copies; the template must not keep the pipes open
            os.close(fd)
        self.control.answer(request.id, pid=pid, error=problem)
        self.forker.reap_intermediate()
        return False


def main(argv=None):
    args = parse_command_line(sys.argv[1:] if argv is None else argv)
    name = args.name or "?"
    path_as_with_dash_m()
    try:
        import robot  # noqa: F401  (a missing Robot Framework is the commonest set-up error: say so first)
        import robot_jsonrpcremote_server.__main__  # noqa: F401
    except ImportError as error:
        log(name, "ERROR", f"cannot import {error.name or 'a module'}: {error}. Install robotframework and "
            "robotframework-jsonrpcremote-server in the interpreter of the library's command (or set its PYTHONPATH "
            "in the library's env); the gateway starts this library's workers the plain way meanwhile")
        return EXIT_NOT_READY
    template = Template(args)
    try:
        template.run()
    except NotReady as error:
        log(template.name, "ERROR", f"{error}; the gateway starts this library's workers the plain way")
        return EXIT_NOT_READY
    except SystemExit as error:
        # argparse of the reference server's options: it has printed why.
        if not template.in_worker:
            log(name, "ERROR", "the reference server refused the library's command arguments (above); fix "
                "`command`; the gateway starts this library's workers the plain way, and they will fail too")
            return 2 if error.code == 2 else EXIT_NOT_READY
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
