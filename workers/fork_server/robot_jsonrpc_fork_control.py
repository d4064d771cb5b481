"""The fork server's control socket: its wire format, and how a request becomes a worker.

Wire format (version 1). The control socket is an AF_UNIX SOCK_SEQPACKET socket (one end of a
socketpair the gateway made; its descriptor is --control-fd, 0 by default, so a launcher that passes
only stdin, stdout and stderr can pass it as stdin). Every message is one packet holding one JSON
object in UTF-8, at most 65536 bytes; packets keep their boundaries, so no length prefix is needed.

  template -> gateway, once, when the template is ready to fork:
      {"v": 1, "ready": true, "pid": TEMPLATE_PID, "preloaded": ["MODULE", ...],
       "not_preloaded": {"MODULE": "REASON", ...}, "python": "3.11.2", "robot": "7.4.2", "server": "0.2.0"}
      (a template that cannot get ready sends nothing: it says why on stderr and exits with status 3)
  gateway -> template, one per worker, with exactly three descriptors attached (SCM_RIGHTS):
      the worker's stdin (read end), stdout (write end) and stderr (write end), in that order:
      {"v": 1, "id": ID, "rlimits": {"as": N, "nofile": N, "cpu": N, "nproc": N, "core": N}, "cpu": C}
      (ID: any JSON number or string, echoed; every rlimit is optional, each sets soft = hard = N,
      as a plain start does; "cpu", optional: the worker is bound to CPU C, as cpu_affinity = "one"
      binds a plain start)
  template -> gateway, one per request, in request order:
      {"v": 1, "id": ID, "pid": WORKER_PID}         the worker runs; it is the gateway's child
      {"v": 1, "id": ID, "error": "TEXT"}           no worker was made; TEXT says why and what to do
                                                    (ID is null when the request could not be read)

A worker is forked twice (template -> intermediate -> worker) and the intermediate exits at once, so the
worker is reparented to the gateway, which must be a child subreaper (PR_SET_CHILD_SUBREAPER) and then
reaps it like any worker. When WORKER_PID is answered, the worker already leads its own process group
and has its limits; it runs nothing of the library before both are in place. The intermediate is reaped
before the template answers the next request, so by then the worker is the gateway's child. A request
the template cannot read (bad JSON, wrong version, not three descriptors) is answered with an error,
its descriptors are closed, and the template goes on.

Pre-faulting (PagePlan). A worker writes to a few thousand of the template's pages (reference counts,
the allocator, Robot's state for its import and keywords), and each first write is a copy-on-write
fault. With the server's second thread running, each such fault also shoots down the TLB of the other
CPUs: tens of microseconds apiece on a virtual machine, most of a forked session's set-up. So the first
worker a template forks learns, once its import and first keyword have run (or when its session ends,
if sooner), which of the template's pages it made its own (present and exclusive in
/proc/self/pagemap), and writes them into a small memory area it shares with the template. Every worker forked after that copies those pages in one madvise(MADV_POPULATE_WRITE)
per range, before its threads start and, for a prewarmed worker, before its session: the same pages it
would have copied one fault at a time. Where the kernel has no MADV_POPULATE_WRITE (before Linux 5.14),
workers fault as before.
"""

import ctypes
import fcntl
import json
import mmap
import os
import resource
import select
import signal
import socket
import struct
import sys
import threading

PROTOCOL_VERSION = 1
MAX_PACKET = 65536

# rlimit names on the wire -> the resource module's constants (their numbers differ between
# architectures, so the wire carries names).
RLIMITS = {
    "as": resource.RLIMIT_AS,
    "nofile": resource.RLIMIT_NOFILE,
    "cpu": resource.RLIMIT_CPU,
    "nproc": resource.RLIMIT_NPROC,
    "core": resource.RLIMIT_CORE,
}


class BadRequest(ValueError):
    """A request the template cannot act on; request_id is what to echo (None if unknown)."""

    def __init__(self, request_id, text):
        super().__init__(text)
        self.request_id = request_id


class Request:
    def __init__(self, request_id, fds, limits, cpu=None):
        self.id = request_id
        self.fds = fds  # stdin, stdout, stderr, received; the template closes them once it has forked
        self.limits = limits  # [(wire name, resource constant, value)]
        self.cpu = cpu  # None, or the one CPU the worker runs on


class ControlSocket:
    """The template's end of the control socketpair."""

    def __init__(self, fd):
        """Raises ValueError saying what is wrong with the descriptor."""
        try:
            self.socket = socket.socket(fileno=fd)
        except OSError as error:
            raise ValueError(f"descriptor {fd} is not a socket ({error.strerror})") from None
        if self.socket.family != socket.AF_UNIX or self.socket.type != socket.SOCK_SEQPACKET:
            raise ValueError(f"descriptor {fd} is not a Unix SOCK_SEQPACKET socket")

    def send(self, message):
        self.socket.send(json.dumps(message, separators=(",", ":")).encode())

    def answer(self, request_id, pid=None, error=None):
        message = {"v": PROTOCOL_VERSION, "id": request_id}
        if error is None:
            message["pid"] = pid
        else:
            message["error"] = error
        self.send(message)

    def receive(self):
        """The next Request; None when the gateway closed its end. Raises BadRequest (descriptors closed)."""
        fd_size = socket.CMSG_SPACE(16 * 4)  # room for more than three, so extra ones are seen and closed
        data, ancillary, flags, _ = self.socket.recvmsg(MAX_PACKET, fd_size, socket.MSG_CMSG_CLOEXEC)
        fds = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                fds.extend(int.from_bytes(payload[i:i + 4], sys.byteorder, signed=True)
                           for i in range(0, usable, 4))
        if not data and not fds:
            return None
        try:
            return parse_request(data, fds, flags)
        except BadRequest:
            for fd in fds:
                os.close(fd)
            raise

    def detach(self):
        # In a worker: it must not hold the gateway's end open, nor let the socket object close some
        # later descriptor that reuses its number.
        self.socket.detach()
        self.socket = None


def parse_request(data, fds, flags):
    request_id = None
    try:
        # The id first, when the text can be read: the answer then names the request it refuses.
        if not flags & socket.MSG_TRUNC:
            try:
                request = json.loads(data)
                request_id = request.get("id") if isinstance(request, dict) else None
            except ValueError:
                pass
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            raise ValueError(f"the request was longer than {MAX_PACKET} bytes or carried too many descriptors")
        request = json.loads(data)
        if not isinstance(request, dict):
            raise ValueError("a request is a JSON object")
        if request.get("v") != PROTOCOL_VERSION:
            raise ValueError(f"this fork server speaks version {PROTOCOL_VERSION} of the request format, "
                             f"not {request.get('v')!r}: the gateway and this program come from different "
                             "releases; install them together")
        if len(fds) != 3:
            raise ValueError(f"a request carries 3 descriptors (stdin, stdout, stderr), not {len(fds)}")
        rlimits = request.get("rlimits")
        cpu = request.get("cpu")
        if cpu is not None and (not isinstance(cpu, int) or isinstance(cpu, bool) or cpu < 0):
            raise ValueError(f"cpu must be a non-negative integer, not {cpu!r}")
        return Request(request_id, fds, limits_of({} if rlimits is None else rlimits), cpu)
    except ValueError as error:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors too
        raise BadRequest(request_id, f"bad request: {error}") from None


def limits_of(rlimits):
    if not isinstance(rlimits, dict):
        raise ValueError("rlimits is a JSON object")
    limits = []
    for key, value in rlimits.items():
        if key not in RLIMITS:
            raise ValueError(f"unknown rlimit '{key}' (known: {', '.join(RLIMITS)})")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"rlimit '{key}' must be a non-negative integer, not {value!r}")
        limits.append((key, RLIMITS[key], value))
    return limits


def thread_count():
    # threading.active_count() misses threads started by C extensions (a BLAS pool, a gRPC core): the
    # kernel's list of the process's tasks does not.
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


class PagePlan:
    """Which of the template's pages its workers make their own, learned from one worker's session.

    Everything here is an optimisation: whatever fails (no /proc, an old kernel, a learner that dies),
    workers fault their pages one by one as before, and nothing of it reaches a session.
    """

    PAGE = mmap.PAGESIZE
    MAX_RANGES = 8192  # 16 bytes each in the shared area
    MAX_PAGES = 8192  # 32 MiB of 4 KiB pages: the most a worker copies ahead (a session copies about 2,400)
    MAX_SCAN = 1 << 30  # bytes of mappings the learner looks at; larger reservations are left out
    CHUNK = 8192  # pagemap entries read at once
    COUNT, STATE = 0, 4  # offsets in the shared area: number of ranges, then the state, written last
    RANGES = 8
    RANGE = struct.Struct("=QQ")  # first address, pages
    WRITTEN = 1
    MADV_POPULATE_WRITE = 23  # Linux 5.14
    PRESENT, EXCLUSIVE = 1 << 63, 1 << 56  # /proc/PID/pagemap bits

    def __init__(self):
        self.ranges = ()  # learned: (address, pages), used by the workers forked from now on
        self.pages = 0
        self.learner = None  # (pid, pidfd or None) of the worker asked to learn, until it has written
        self.is_learner = False  # in that worker
        self.layout = ()  # in that worker: the template's writable mappings when it was forked
        self.shared = None
        self.madvise = None
        try:
            with open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
                os.pread(pagemap.fileno(), 8, 0)
            _writable_mappings()
            libc = ctypes.CDLL(None, use_errno=True)
            madvise = libc.madvise
            madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
            madvise.restype = ctypes.c_int
            probe = mmap.mmap(-1, self.PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            supported = madvise(ctypes.addressof(ctypes.c_char.from_buffer(probe)), self.PAGE,
                                self.MADV_POPULATE_WRITE) == 0
            probe.close()
            if supported:
                # MAP_SHARED: written by the learning worker, read by the template.
                self.shared = mmap.mmap(-1, self.RANGES + self.MAX_RANGES * self.RANGE.size)
                self.madvise = madvise
        except (OSError, AttributeError, TypeError, ValueError, BufferError):
            pass

    def supported(self):
        return self.madvise is not None

    # ---- in the template ----

    def before_fork(self):
        """Takes a plan a worker has written (returns what to log, once), or notices its learner is gone."""
        if self.shared is None:
            return None
        if memoryview(self.shared)[self.STATE:self.STATE + 4].cast("I")[0] == self.WRITTEN:
            count = min(memoryview(self.shared)[self.COUNT:self.COUNT + 4].cast("I")[0], self.MAX_RANGES)
            learned = [self.RANGE.unpack_from(self.shared, self.RANGES + i * self.RANGE.size) for i in range(count)]
            # Only what the template still maps privately and writably: an area unmapped since, or mapped
            # again as something else, is not copied.
            ranges, pages = [], 0
            for start, end in _writable_mappings():
                for address, length in learned:
                    first = max(start, address)
                    last = min(end, address + length * self.PAGE)
                    if first < last and address % self.PAGE == 0 and pages + (last - first) // self.PAGE <= self.MAX_PAGES:
                        ranges.append((first, (last - first) // self.PAGE))
                        pages += (last - first) // self.PAGE
            self.ranges, self.pages = tuple(sorted(ranges)), pages
            learner = self.learner[0] if self.learner else "?"
            self._forget_learner()
            # Workers forked from now on get the plan in the template's own (copy-on-write) memory; the
            # shared area, which any worker could write, is not theirs any more.
            self.shared.close()
            self.shared = None
            return f"workers forked from now on copy {pages} pages in {len(self.ranges)} ranges ahead (learned " \
                   f"from worker pid {learner}'s session)"
        if self.learner and not self._learner_alive():
            self._forget_learner()  # it ended without writing (killed, crashed, too short): the next one learns
        return None

    def wants_learner(self):
        return self.shared is not None and not self.learner

    def after_fork_in_template(self, worker_pid, learning):
        if learning:
            try:
                pidfd = os.pidfd_open(worker_pid)  # unlike the pid, never taken for a later process
            except (OSError, AttributeError):
                pidfd = None
            self.learner = (worker_pid, pidfd)

    def _learner_alive(self):
        pid, pidfd = self.learner
        if pidfd is not None:
            return not select.select([pidfd], [], [], 0)[0]  # readable once the process has ended
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

    def _forget_learner(self):
        if self.learner and self.learner[1] is not None:
            os.close(self.learner[1])
        self.learner = None

    # ---- in a worker ----

    def in_worker(self, learning):
        """In a new worker, before anything of the session runs. Never raises."""
        self.learner = None  # the template's pidfd was closed with the other descriptors
        try:
            if learning:
                self.layout = _writable_mappings()
                self.is_learner = True
                return
            if self.shared is not None:  # a plan another worker is learning: not this one's to touch
                self.shared.close()
                self.shared = None
            for address, pages in self.ranges:
                self.madvise(address, pages * self.PAGE, self.MADV_POPULATE_WRITE)  # (failures: faults as before)
        except Exception:  # noqa: BLE001 (an optimisation must not cost a session)
            self.is_learner = False

    def learn(self):
        """In the learning worker, once: writes the pages it has made its own so far. Never raises."""
        if not self.is_learner or self.shared is None:
            return
        self.is_learner = False
        try:
            written, pages = [], 0
            scanned = 0
            with open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
                for start, end in self.layout:
                    if scanned + (end - start) > self.MAX_SCAN:
                        continue  # a large reservation (an allocator's arena): rarely written, costly to read
                    scanned += end - start
                    page, last = start // self.PAGE, end // self.PAGE
                    while page < last and len(written) < self.MAX_RANGES and pages < self.MAX_PAGES:
                        count = min(self.CHUNK, last - page)
                        entries = memoryview(os.pread(pagemap.fileno(), count * 8, page * 8)).cast("Q")
                        for i, entry in enumerate(entries):
                            if not (entry & self.PRESENT and entry & self.EXCLUSIVE):
                                continue
                            address = (page + i) * self.PAGE
                            if written and written[-1][0] + written[-1][1] * self.PAGE == address:
                                written[-1][1] += 1
                            elif len(written) < self.MAX_RANGES:
                                written.append([address, 1])
                            else:
                                break
                            pages += 1
                            if pages == self.MAX_PAGES:
                                break
                        page += count
            for i, (address, length) in enumerate(written):
                self.RANGE.pack_into(self.shared, self.RANGES + i * self.RANGE.size, address, length)
            memoryview(self.shared)[self.COUNT:self.COUNT + 4].cast("I")[0] = len(written)
            # Last, in one aligned store: the template reads the ranges only once it sees this.
            memoryview(self.shared)[self.STATE:self.STATE + 4].cast("I")[0] = self.WRITTEN
        except Exception:  # noqa: BLE001 (nothing learned: the template asks another worker)
            pass

    def give_up(self):
        """In the learning worker, when its session ran nothing worth learning from."""
        self.is_learner = False


def _writable_mappings():
    """(start, end) of this process's private writable mappings."""
    out = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 2 and fields[1].startswith("rw") and fields[1][3] == "p":
                if len(fields) >= 6 and fields[5] in ("[vsyscall]", "[vvar]", "[vdso]"):
                    continue
                start, end = fields[0].split("-")
                out.append((int(start, 16), int(end, 16)))
    return tuple(out)


class ForkError(Exception):
    """No worker was made; the message says why and what to do."""


class Forker:
    """Forks workers: template -> intermediate -> worker."""

    def __init__(self, name, control):
        self.name = name
        self.control = control
        self.intermediate_pid = 0  # forked, reported, not yet reaped
        self.plan = PagePlan()

    def fork(self, request):
        """Like os.fork(): the worker's pid in the template, 0 in the worker. Raises ForkError.

        In the worker, descriptors 0, 1 and 2 are the request's and no other is open, the control
        socket is detached, and the worker leads its own process group with the request's limits.
        """
        threads = thread_count()
        if threads > 1:
            raise ForkError(f"the fork server for library '{self.name}' has {threads - 1} thread(s) besides its "
                            "main one and cannot fork safely: something it imported started them; set "
                            "fork_server = false for this library or remove that module from `preload`")
        # The intermediate reports the worker's pid (or why there is none) through this pipe; the worker
        # waits on the other one until the intermediate has placed it in its group and set its limits.
        report_r, report_w = os.pipe2(os.O_CLOEXEC)
        go_r, go_w = os.pipe2(os.O_CLOEXEC)
        learning = self.plan.wants_learner()
        sys.stdout.flush()  # nothing buffered may be written twice
        sys.stderr.flush()
        try:
            intermediate = os.fork()
        except OSError as error:
            for fd in (report_r, report_w, go_r, go_w):
                os.close(fd)
            raise ForkError(f"cannot fork a worker: {error.strerror}; the machine is short of processes or "
                            "memory") from None
        if intermediate == 0:
            os.close(report_r)
            self._intermediate(report_w, go_r, go_w, request)  # returns only in the worker
            self.plan.in_worker(learning)
            return 0
        os.close(report_w)
        os.close(go_r)
        os.close(go_w)
        try:
            # One read: the intermediate writes its whole report at once (below PIPE_BUF, so atomically).
            # Reading on to the end of the pipe would wait for the worker, which holds a copy of the
            # write end until it first runs.
            report = os.read(report_r, 4096)
        finally:
            os.close(report_r)
        text = report.decode(errors="replace")
        if not text:
            _, status = os.waitpid(intermediate, 0)
            raise ForkError(f"cannot fork a worker: the intermediate process ended with status {status} "
                            "before reporting")
        # Reaped by reap_intermediate(), once the answer has gone: its exit is slow (it tears down its
        # copy of the template's memory) and tells nothing the report did not.
        self.intermediate_pid = intermediate
        if text.startswith("pid "):
            pid = int(text[4:])
            self.plan.after_fork_in_template(pid, learning)
            return pid
        raise ForkError(text)

    def reap_intermediate(self):
        if self.intermediate_pid:
            os.waitpid(self.intermediate_pid, 0)
            self.intermediate_pid = 0

    def _intermediate(self, report_w, go_r, go_w, request):
        # This process lives only to be the worker's parent for a moment: it forks, sets the worker up,
        # reports and leaves by os._exit, so none of the template's exit handlers or buffers run twice.
        worker = 0
        try:
            try:
                worker = os.fork()
            except OSError as error:
                os.write(report_w, f"cannot fork a worker: {error.strerror}; the machine is short of "
                         "processes or memory".encode())
                os._exit(1)
            if worker == 0:
                os.close(go_w)
                os.close(report_w)
                self._become_worker(go_r, request.fds)
                return
            os.close(go_r)
            # Both sides set the group, so it is in place whichever runs first: the gateway may signal
            # the group as soon as it has the pid.
            try:
                os.setpgid(worker, worker)
            except OSError:
                pass  # it died already: the gateway hears of that when it reaps it
            for key, number, value in request.limits:
                try:
                    resource.prlimit(worker, number, (value, value))
                except (OSError, ValueError) as error:
                    os.kill(worker, signal.SIGKILL)
                    os.waitpid(worker, 0)
                    os.write(report_w, f"cannot set rlimit '{key}' to {value} on the new worker: "
                             f"{getattr(error, 'strerror', None) or error}; lower it in the library's rlimits "
                             "(a limit cannot be raised above the gateway's own hard limit)".encode())
                    os._exit(1)
            if request.cpu is not None:
                try:
                    os.sched_setaffinity(worker, {request.cpu})
                except OSError as error:
                    os.kill(worker, signal.SIGKILL)
                    os.waitpid(worker, 0)
                    os.write(report_w, f"cannot bind the new worker to CPU {request.cpu} (cpu_affinity = \"one\"): "
                             f"{error.strerror}".encode())
                    os._exit(1)
            os.write(report_w, f"pid {worker}".encode())
            # The go-ahead, then closed before exiting: tearing down this process's copy of the template's
            # memory takes longer than everything else it did, and the worker need not wait for that.
            os.write(go_w, b"g")
            os.close(go_w)
            os._exit(0)
        except BaseException:
            if worker > 0:  # never a worker without its group and limits
                try:
                    os.kill(worker, signal.SIGKILL)
                except OSError:
                    pass
            os._exit(1)

    def _become_worker(self, go_r, fds):
        os.setpgid(0, 0)
        self.control.detach()
        # Above 2 first: a received descriptor may itself be 0, 1 or 2 when the template's own were closed.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3) for fd in fds]
        for target, fd in enumerate(high):
            os.dup2(fd, target, inheritable=True)
        # Until the intermediate says go: group and limits are in place. Its end without a go-ahead (it
        # failed, or was killed) leaves a worker without them: it must not run.
        if os.read(go_r, 1) != b"g":
            os._exit(1)
        # Only stdin, stdout and stderr, as a plain start gets them.
        os.closerange(3, 1 << 30)
