#!/usr/bin/env python3
"""The admin endpoint's status page (GET /) in a real browser: Debian's chromium, headless.

Starts the real gateway with the admin endpoint on and libraries served by the real test worker (one
per session, a glob entry, a shared one), opens sessions that each run a long keyword (Sleep), and one
that has a keyword named `<script>...</script>` waiting behind its Sleep. Then it drives chromium over
the DevTools protocol (--remote-debugging-pipe: no port to find, nothing else can connect) and checks:

  - the rendered DOM shows every session (its number), its library and its keyword;
  - the `<script>` keyword name is shown as text: the document has no script element, and the markup
    has the escaped name;
  - the page logs no console message of level error or warning, throws nothing, and no Content-
    Security-Policy violation is reported (each is one of those);
  - every request the page makes goes to the admin address (its stylesheet included);
  - the page carries the policy (Content-Security-Policy, with default-src 'none').

With --screenshot FILE it also saves a PNG of the page (the README's doc/status-page.png is one, taken
with --sessions 100). The ctest test browser.status_page runs it (tests/browser/CMakeLists.txt); by hand:

  tests/browser/status_page_test.py --gateway build/bin/robot-jsonrpc-gateway \\
      --worker build/bin/robot-test-worker [--sessions 100] [--screenshot doc/status-page.png]

Needs python3 and chromium (deploy/install-deps.sh installs both). Exits 1 naming each problem.
"""
import argparse
import base64
import json
import os
import select
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from gateway_process import http_get, running_gateway  # noqa: E402

# A keyword name a client chooses: run as script it would set a mark the test then looks for.
SCRIPT_KEYWORD = "<script>window.__rjg_injected = 1</script><img src=x onerror=\"window.__rjg_injected = 2\">"


class Session:
    """A client of the JSON-RPC remote protocol (Content-Length frames), enough to leave keywords running."""

    def __init__(self, port, source):
        self.sock = socket.socket()
        # Distinct client addresses, as a lab's machines have (Linux routes all of 127/8 to loopback).
        self.sock.bind((source, 0))
        self.sock.connect(("127.0.0.1", port))
        self.buffer = b""
        self.next_id = 0

    def send(self, method, params, request=True):
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        if request:
            self.next_id += 1
            message["id"] = str(self.next_id)
        body = json.dumps(message).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return message.get("id")

    def read(self):
        while True:
            head, sep, rest = self.buffer.partition(b"\r\n\r\n")
            if sep:
                length = int(dict(line.split(b": ", 1) for line in head.split(b"\r\n"))[b"Content-Length"])
                if len(rest) >= length:
                    self.buffer = rest[length:]
                    return json.loads(rest[:length])
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("the gateway closed a session")
            self.buffer += chunk

    def call(self, method, params):
        wanted = self.send(method, params)
        while True:
            answer = self.read()
            if answer.get("id") == wanted:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def start(self, library, keywords):
        """Initialize, import `library`, send the keywords without waiting for their answers."""
        self.call("robot/initialize", {"capabilities": {}, "client_info": {"name": "status-page-test", "version": "1"}})
        self.send("robot/initialized", {}, request=False)
        token = self.call("robot/import_library", {"name": library, "args": [], "kw_args": {}})["token"]
        for name, args in keywords:
            self.send("robot/run_keyword", {"library_token": token, "name": name, "args": args, "kwargs": {}})

    def close(self):
        self.sock.close()


class DevTools:
    """Chromium's DevTools protocol over --remote-debugging-pipe: JSON messages ending in NUL, ours on
    its fd 3, its on its fd 4."""

    def __init__(self, chromium, profile):
        os.makedirs(profile, exist_ok=True)
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()
        args = [chromium, "--headless=new", "--remote-debugging-pipe", f"--user-data-dir={profile}",
                "--no-first-run", "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--hide-scrollbars", "--force-color-profile=srgb", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # chromium refuses to start as root with its sandbox
        # The pipes become chromium's fds 3 and 4 through bash's redirections (dash takes one-digit fds only).
        wrapper = ["/bin/bash", "-c", f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}']
        self.log = open(os.path.join(profile, "chromium.log"), "w")
        self.proc = subprocess.Popen(wrapper + args, pass_fds=(to_browser_r, from_browser_w), stdout=self.log,
                                     stderr=self.log)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.buffer = b""
        self.next_id = 0
        self.events = []

    def send(self, method, params=None, session=None, timeout=60):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        while True:
            m = self.receive(timeout)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"DevTools {method}: {m['error']}")
                return m.get("result", {})

    def receive(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_browser], [], [], left)[0]:
                raise RuntimeError(f"chromium said nothing for {timeout} s (its log: {self.log.name})")
            chunk = os.read(self.from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed its DevTools pipe (its log: {self.log.name})")
            self.buffer += chunk
        text, _, self.buffer = self.buffer.partition(b"\0")
        m = json.loads(text)
        if "method" in m:
            self.events.append(m)
        return m

    def wait_event(self, method, timeout=60):
        for m in self.events:
            if m["method"] == method:
                return m
        while True:
            m = self.receive(timeout)
            if m.get("method") == method:
                return m

    def close(self):
        try:
            self.send("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_browser)
        os.close(self.from_browser)
        self.log.close()


def load_page(chromium, url, profile, screenshot=None, width=1500, height=None, slices=False):
    """Loads url in headless chromium: its DOM, what it logged, the URLs it requested; a PNG if asked."""
    tools = DevTools(chromium, profile)
    try:
        target = tools.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = tools.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            tools.send(f"{domain}.enable", session=session)
        tools.send("Emulation.setDeviceMetricsOverride",
                   {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False}, session=session)
        tools.events.clear()
        tools.send("Page.navigate", {"url": url}, session=session)
        tools.wait_event("Page.loadEventFired")
        evaluate = lambda e: tools.send("Runtime.evaluate", {"expression": e, "returnByValue": True},
                                        session=session)["result"].get("value")
        dom = evaluate("document.documentElement.outerHTML")
        page = {
            "dom": dom,
            "scripts": evaluate("document.scripts.length"),
            "images": evaluate("document.images.length"),
            "injected": evaluate("window.__rjg_injected === undefined ? null : window.__rjg_injected"),
            "stylesheets": evaluate("document.styleSheets.length"),
            # The sessions table's rows, cell by cell, as the browser renders their text.
            "session_rows": evaluate("Array.from(document.querySelectorAll('#sessions-table tbody tr:not(.total)'))"
                                     ".map(tr => Array.from(tr.cells).map(td => td.textContent))"),
            "height": evaluate("document.documentElement.scrollHeight"),
        }
        def capture(path, top, tall):
            shot = tools.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                        "clip": {"x": 0, "y": top, "width": width, "height": tall,
                                                                 "scale": 1}},
                              session=session)
            with open(path, "wb") as f:
                f.write(base64.b64decode(shot["data"]))

        if screenshot:
            capture(screenshot, 0, min(height or page["height"], page["height"]))
            # The whole page in screen-sized parts too, to look at each as a person would.
            for i, top in enumerate(range(0, page["height"], 1000) if slices else []):
                capture(f"{os.path.splitext(screenshot)[0]}-part{i + 1}.png", top, min(1000, page["height"] - top))
        # Everything reported while loading: requests, console, exceptions, log entries (CSP violations).
        page["requests"] = [e["params"]["request"]["url"] for e in tools.events if e["method"] == "Network.requestWillBeSent"]
        page["failed"] = [e["params"] for e in tools.events if e["method"] == "Network.loadingFailed"]
        page["responses"] = {e["params"]["response"]["url"]: e["params"]["response"] for e in tools.events
                             if e["method"] == "Network.responseReceived"}
        page["complaints"] = []
        for e in tools.events:
            p = e["params"]
            if e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "warning", "assert"):
                page["complaints"].append(f"console.{p['type']}: {[a.get('value') for a in p['args']]}")
            elif e["method"] == "Runtime.exceptionThrown":
                page["complaints"].append(f"exception: {p['exceptionDetails'].get('text')}")
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                page["complaints"].append(f"log ({p['entry']['source']}, {p['entry']['level']}): {p['entry']['text']}")
        return page
    except Exception:
        tools.log.flush()
        with open(tools.log.name, errors="replace") as log:
            noise = ("dbus", "/usr/bin/chromium: ")  # a container has no D-Bus; Debian's wrapper script complains
            sys.stderr.write("chromium log (tail):\n" + "".join(l for l in log.readlines()[-80:] if not any(n in l for n in noise)))
        raise
    finally:
        tools.close()


def check_page(page, status, admin_origin):
    problems = []
    dom = page["dom"]
    for complaint in page["complaints"]:
        problems.append(f"the page logged: {complaint}")
    for url in page["requests"]:
        if not url.startswith(admin_origin + "/"):
            problems.append(f"the page requested {url}, which is not on the admin address {admin_origin}")
    for failed in page["failed"]:
        problems.append(f"a request of the page failed: {failed.get('errorText')} {failed.get('blockedReason', '')}")
    if not any(url == admin_origin + "/status.css" for url in page["requests"]) or page["stylesheets"] != 1:
        problems.append(f"the page's stylesheet was not loaded from {admin_origin}/status.css: {page['requests']}")
    csp = {k.lower(): v for k, v in page["responses"].get(admin_origin + "/", {}).get("headers", {}).items()}
    if "default-src 'none'" not in csp.get("content-security-policy", ""):
        problems.append(f"the page has no Content-Security-Policy with default-src 'none': {csp}")
    if page["scripts"] != 0 or page["images"] != 0 or page["injected"] is not None:
        problems.append(f"the page holds {page['scripts']} script and {page['images']} img elements and the injected "
                        f"mark is {page['injected']}: a keyword name was not escaped")
    if "&lt;script&gt;window.__rjg_injected = 1&lt;/script&gt;" not in dom:
        problems.append("the escaped <script> keyword name is not in the page's markup")
    # Each session of /status, with its library and keyword, in the page's rows.
    rows = {int(cells[0]): " | ".join(cells) for cells in page["session_rows"] if cells and cells[0].isdigit()}
    for s in status["sessions"]:
        row = rows.get(s["id"])
        if row is None:
            problems.append(f"session {s['id']} ({s['peer']}) is not a row of the page")
            continue
        for library in s["libraries"]:
            if library not in row:
                problems.append(f"the row of session {s['id']} does not name its library {library}: {row!r}")
        for k in s["keywords_running"]:
            if k["keyword"] not in row:
                problems.append(f"the row of session {s['id']} does not name its keyword {k['keyword']!r}: {row!r}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateway", required=True)
    parser.add_argument("--worker", required=True)
    parser.add_argument("--chromium", default="chromium")
    parser.add_argument("--sessions", type=int, default=4, help="sessions running a keyword (at least 4)")
    parser.add_argument("--screenshot", help="save a PNG of the page here")
    parser.add_argument("--screenshot-height", type=int, help="only the top of the page, this many pixels")
    parser.add_argument("--slices", action="store_true", help="with --screenshot: also FILE-partN.png, 1000 px each")
    args = parser.parse_args()
    sessions_wanted = max(args.sessions, 4)

    def config(port, admin):
        worker = args.worker
        return (f'[gateway]\nlisten = ["tcp://127.0.0.1:{port}"]\nlog_level = "info"\nmax_sessions = 500\n'
                f'max_workers = 500\nmax_sessions_per_client = 500\n'
                # The shared worker's Sleep outlives its session: the end of the test need not wait for it.
                f'drain_timeout = "1s"\n\n'
                f'[admin]\nlisten = ["tcp://127.0.0.1:{admin}"]\n\n'
                f'[[library]]\nname = "TestLibrary"\ncommand = ["{worker}", "--name", "TestLibrary"]\n'
                f'prewarm = 1\n\n'
                f'[[library]]\nname = "Lab*"\ncommand = ["{worker}", "--name", "{{library}}"]\nmax_workers = 200\n\n'
                f'[[library]]\nname = "SharedTools"\ncommand = ["{worker}", "--name", "SharedTools"]\n'
                f'isolation = "shared"\nshutdown_grace = "1s"\n')

    problems = []
    try:
        with running_gateway(args.gateway, config, "rjg-status-page.", log_tail_lines=60, stop_timeout=60) as g:
            port, admin = g.port, g.admin
            sessions = []
            try:
                # A lab: most sessions on the per-session library, some through the glob entry, a few sharing
                # one worker; each from its own address, each running Sleep (long enough to outlast the test).
                labs = ["LabPower", "LabScope", "LabRelay"]
                plan = []
                for i in range(sessions_wanted):
                    library = "SharedTools" if i % 10 == 3 else labs[i % 3] if i % 4 == 1 else "TestLibrary"
                    # A shared worker's keyword outlives its session (the gateway cannot cut it short): the end of
                    # the test waits for it, so it sleeps less.
                    keywords = [("Sleep", [15 if library == "SharedTools" else 600])]
                    if i == 0:
                        keywords.append((SCRIPT_KEYWORD, []))  # waits behind the Sleep: shown as running
                    plan.append((library, keywords))
                for i, (library, keywords) in enumerate(plan):
                    s = Session(port, f"127.0.{1 + i // 250}.{1 + i % 250}")
                    s.start(library, keywords)
                    sessions.append(s)
                running = sum(len(k) for _, k in plan)
                deadline = time.monotonic() + 60
                while True:
                    status = json.loads(http_get(f"http://127.0.0.1:{admin}/status")[2])
                    seen = sum(len(s.get("keywords_running", [])) for s in status["sessions"])
                    if len(status["sessions"]) == len(plan) and seen == running:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"/status shows {len(status['sessions'])} sessions and {seen} keywords running, "
                                           f"not {len(plan)} and {running}")
                    time.sleep(0.1)

                admin_origin = f"http://127.0.0.1:{admin}"
                page = load_page(args.chromium, admin_origin + "/", os.path.join(g.dir, "profile"), args.screenshot,
                                 height=args.screenshot_height, slices=args.slices)
                # The snapshot of the page's moment: sessions and keywords do not change meanwhile.
                status = json.loads(http_get(f"{admin_origin}/status")[2])
                problems += check_page(page, status, admin_origin)
                print(f"status page: {len(status['sessions'])} sessions, {len(page['requests'])} requests, "
                      f"{len(page['complaints'])} complaints, {len(page['dom'])} bytes of DOM, {page['height']} px high")
            finally:
                for s in sessions:
                    s.close()
    except Exception as e:
        problems.append(f"{type(e).__name__}: {e}")
    for p in problems:
        print("FAIL:", p)
    if problems:
        sys.exit(1)
    print("ok: the status page shows every session, its library and keyword; escaped; no complaint; "
          "no request elsewhere")


if __name__ == "__main__":
    main()
