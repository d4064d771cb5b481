"""The reference server's start-up, split where a template can fork; and what the template loads ahead.

Why the start-up is split where it is. The reference server's run() does, in order:
  1. parse the arguments, configure logging, build a RobotRemoteContext;
  2. start a thread that runs an asyncio loop serving stdin/stdout;
  3. patch Robot's stop-signal handler;
  4. on the main thread, RobotRemoteContext.run(): add --pythonpath to sys.path, build RobotSettings,
     parse an internal one-test suite, and run it; when Robot starts that test's only keyword, a
     listener enters the hook loop, which runs the commands the asyncio thread queues (imports,
     keywords, finalizes) inside that live execution context;
  5. when the hook loop ends: stop the asyncio thread and join it.
Step 4 up to the hook is the expensive part and needs no thread; step 2 is the only thread. So the
template does 1 and 4 (its own hook waits for fork requests instead of commands), imports the preloaded
modules, warms Robot's and the protocol's code, freezes the heap, and forks from inside the hook. A
child then does 2, 3, the real hook loop and 5, on the three descriptors it was given: the same code, in
the same order relative to Robot's execution, as a plain start. Nothing here imports a library through
Robot for a session or runs a keyword: a library's constructor runs only in the session that imports it.

This module leans on the reference server's internals (its __main__ module's functions and events,
RobotRemoteContext and its _hook_loop); the versions it was written against are Robot Framework 7.4
and robotframework-jsonrpcremote-server 0.2.
"""

import os
import signal
import sys
import threading


class NotReady(Exception):
    """The template cannot serve forks; the message says why and what to do."""


def preload(modules):
    """Imports each module as Robot would resolve a library of that name, without instantiating it."""
    from robot.libraries import STDLIBS
    from robot.utils import Importer

    importer = Importer("library")
    loaded, failed = [], {}
    for module in modules:
        import_name = "robot.libraries." + module if module in STDLIBS else module
        try:
            importer.import_class_or_module(import_name)
            loaded.append(module)
        except (Exception, SystemExit) as error:  # DataError, ImportError, or whatever the module raised
            failed[module] = " ".join(str(error).split())[:500]
    return loaded, failed


class WarmUpLibrary:
    """A library of the fork server's own, imported once through Robot in the template.

    Importing a library runs much of Robot's code for the first time (keyword creation, argument
    specs, type information, documentation): done here on a library with no side effects, the
    specialised code and Robot's caches are shared by every child. Its keywords are never run.
    """

    ROBOT_LIBRARY_SCOPE = "GLOBAL"

    def __init__(self, *args, **kwargs):
        pass

    def keyword_with_types(self, text: str, number: int = 1, *rest, flag: bool = False, **named) -> str:
        """Documentation, as libraries have."""
        return text

    def keyword_without_types(self, value, other="default"):
        """More documentation.

        On two paragraphs.
        """
        return value


def warm_up_robot():
    """Imports WarmUpLibrary as the reference server imports a library, then forgets it."""
    try:
        from robot_jsonrpcremote_server._runner import _robot_finalize_library, _robot_import_library
        from jsonrpcpeer.json_helpers import as_json
        from jsonrpcpeer.peer import JsonRpcResponse
        import robot_jsonrpcremote_protocol as p

        token = "robot_jsonrpc_fork_server_warm_up"
        definition = _robot_import_library(token, f"{__name__}.WarmUpLibrary", [])
        as_json(JsonRpcResponse(id="1", result=p.ImportLibraryResult(token=token, definition=definition)), None, True)
        _robot_finalize_library(token)
        return None
    except Exception as error:
        return f"{type(error).__name__}: {error}"


def warm_up_protocol(library_names):
    """Runs, once, the pure (loop-free, thread-free) code every session would otherwise run first.

    What a child computes for the first time it writes into fresh memory, and the code it runs for the
    first time it rewrites (Python specialises a function's byte code in place after its first calls):
    both cost pages that the child must copy. Done here, the caches the protocol layer fills on first
    use (type hints, signatures, converters) and the specialised code are shared by every child. The
    messages are the ones the real client sends; nothing here touches a loop, a thread or a library.
    Returns an error text when the reference server's internals differ from what this expects (then
    the sessions are only a little slower), else None.
    """
    try:
        import types

        import robot_jsonrpcremote_protocol as p
        from jsonrpcpeer.json_helpers import as_json, from_dict, jsonable_to_value, value_to_jsonable
        from jsonrpcpeer.peer import JsonRpcErrorResponse, JsonRpcError, JsonRpcNotification, JsonRpcPeer, \
            JsonRpcResponse
        from robot_jsonrpcremote_server._endpoint import RobotServerEndpoint

        samples = {
            p.INITIALIZE_REQUEST: {"capabilities": {}, "client_info": {"name": "RobotFramework JsonRpcRemote Client",
                                                                      "version": "0.2.0"}},
            p.INITIALIZED_NOTIFICATION: {},
            p.IMPORT_LIBRARY_REQUEST: {"name": "", "args": [], "kw_args": {}},
            p.RUN_KEYWORD_REQUEST: {"library_token": "t", "name": "Keyword", "args": ["a", 1, None],
                                    "kwargs": {"k": "v"}},
            p.FINALIZE_LIBRARY_REQUEST: {"token": "t"},
            p.SHUTDOWN_REQUEST: {},
            p.EXIT_NOTIFICATION: {},
        }
        # The handlers as JsonRpcPeer.attach_endpoint registers them, on an endpoint built without its
        # __init__ (which asks for an event loop).
        endpoint = object.__new__(RobotServerEndpoint)
        for name in dir(RobotServerEndpoint):
            function = getattr(RobotServerEndpoint, name)
            method = getattr(function, "rpc_request_method", None) or getattr(function, "rpc_notification_method", None)
            if method is None:
                continue
            param_type, _ = JsonRpcPeer._get_and_check_handler_param_type(None, types.MethodType(function, endpoint))
            from_dict(samples.get(method, {}), param_type)
        argument = p.ArgumentDefinition(name="value", type="str", has_default=True, default="x",
                                        kind=p.ArgumentKind.POSITIONAL_OR_NAMED)
        keyword = p.KeywordDefinition(name="Keyword", args=[argument], doc="", tags=[], source="s", lineno=1)
        answers = [
            p.InitializeResult(capabilities=p.ServerCapabilities(support_exit=True, libraries=list(library_names)),
                               server_info=p.ServerInfo(name="n", version="v")),
            p.ImportLibraryResult(token="t", definition=p.LibraryDefinition(
                name="n", keywords=[keyword], doc="", doc_format="ROBOT", scope="GLOBAL", version="", source="s",
                lineno=1)),
            p.RunKeywordResult(result="x"),
            p.RunKeywordResult(error=p.RunKeywordError(message="x")),
            p.FinalizeLibraryResult(),
            p.ShutdownResult(),
        ]
        for answer in answers:
            as_json(JsonRpcResponse(id="1", result=answer), None, True)
        log_params = p.LogParams(message="m", level=p.LogLevel.INFO, html=False)
        as_json(JsonRpcNotification(method=p.LOG_NOTIFICATION, params=log_params), None, True)
        as_json(JsonRpcErrorResponse(id="1", error=JsonRpcError(code=-32603, message="m")), None, True)
        for value in ("text", 1, 1.5, True, None, [1, "a"], {"k": "v"}):
            value_to_jsonable(jsonable_to_value(value))
        return None
    except Exception as error:  # a newer or older reference server: warming is only an optimisation
        return f"{type(error).__name__}: {error}"


class ServerStart:
    """The reference server's run(), in the two parts that the fork puts in different processes."""

    def __init__(self, server_args):
        """Step 1 without the context. Raises SystemExit (the server's parser refused server_args,
        and has said why) or NotReady."""
        import robot_jsonrpcremote_server.__main__ as server_main

        self.main = server_main
        # sys.argv as `python -m robot_jsonrpcremote_server ARGS` leaves it, for libraries that look.
        sys.argv = [server_main.__file__] + list(server_args)
        self.options = server_main.build_arg_parser().parse_args(server_args)
        if self.options.mode != "stdio":
            raise NotReady(f"the command must serve stdio ('--stdio'), not '{self.options.mode}': a forked "
                           "worker talks to the gateway over its stdin and stdout")
        self.libraries = list(self.options.libraries)
        self.context = None
        self.thread = None
        self.stop_handlers = {}

    def configure(self):
        self.main.configure_logging(self.options.verbose)
        self.main.logger.debug("Verbose mode is enabled.")
        self.main.logger.info("Server will start in stdio mode.")
        self.main.logger.debug("Libraries to serve: %s", self.options.libraries)
        self.main.logger.debug("Python path additions: %s", self.options.pythonpath)

    def run_context(self, hook):
        """Step 4: runs Robot's internal suite; when it reaches the hook loop, calls hook() instead.

        Returns when Robot has ended the suite: in a worker, after its session; in the template, only
        when Robot ended the suite without reaching the hook (hook() never returns there).
        """
        from robot_jsonrpcremote_server._runner import RobotRemoteContext

        options = self.options
        self.context = RobotRemoteContext(
            variables=options.variable or (),
            variablefiles=options.variablefile or (),
            pythonpath=options.pythonpath or (),
            outputdir=options.outputdir,
            output=None,
            report=None,
            log=None,
        )
        self.context._hook_loop = hook
        self.context.run()

    def take_stop_signals(self):
        # Robot saw the suite start with its own stop-signal handlers; the template must die of
        # SIGTERM like any process, and each worker gets Robot's handlers back.
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.stop_handlers[signum] = signal.getsignal(signum)
            signal.signal(signum, signal.SIG_DFL)

    def give_back_stop_signals(self):
        for signum, handler in self.stop_handlers.items():
            signal.signal(signum, handler)

    def serve(self):
        """In a worker, inside the hook: steps 2 and 3, then the server's own hook loop."""
        server_main = self.main
        options = self.options
        addresses = options.addresses or server_main._parse_addresses(
            os.environ.get("ROBOT_JSONRPC_BIND")) or ["127.0.0.1"]
        self.thread = threading.Thread(
            target=server_main.run_server,
            args=(self.context, options.mode, addresses, options.port, options.pipe_name, options.libraries,
                  options.verbose),
            name="RobotJsonRpcRemoteServerThread",
        )
        self.thread.start()
        server_main._server_started_event.wait(5)
        server_main.logger.info("Server is up and running. Press Ctrl+C to stop.")
        if not server_main._server_started_event.is_set():
            server_main.logger.error("Server failed to start.")
            return
        server_main.patch_robot_signal_handling(self.context.stop)
        # The reference server's own hook loop, in the execution context the template built.
        type(self.context)._hook_loop(self.context)

    def finish(self):
        """In a worker, after Robot has ended the suite: step 5."""
        server_main = self.main
        server_main.stop_server()
        server_main.logger.info("Server is stopping...")
        server_main._server_stop_event.wait(5)
        if self.thread is not None:
            self.thread.join(5)
        server_main.logger.info("Server has stopped.")
