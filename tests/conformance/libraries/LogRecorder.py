"""Records the log messages Robot Framework receives while a keyword of another library runs, so that
a suite can check what a remote keyword logged: its level, whether it is HTML, and its text."""


class LogRecorder:
    ROBOT_LIBRARY_SCOPE = "GLOBAL"
    ROBOT_LISTENER_API_VERSION = 3

    def __init__(self):
        self.ROBOT_LIBRARY_LISTENER = self
        self._messages = None

    def log_message(self, message):
        if self._messages is not None:
            self._messages.append(message)

    def start_recording_logs(self):
        """Records every message logged from now on."""
        self._messages = []

    def stop_recording_logs(self):
        """Stops recording and returns what was logged, each message as `LEVEL: text`, or
        `LEVEL (html): text` for an HTML message."""
        messages, self._messages = self._messages or [], None
        return ["%s%s: %s" % (m.level, " (html)" if m.html else "", m.message) for m in messages]
