"""A worker program driven line by line on stdin, each command's answer
one JSON line on its stdout (net_job.py, origin_job.py, limits_job.py):
started, asked, and ended whatever state it is in (stopped, killed, hung)."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading

#: A bound, not an expectation: a worker that does not answer within it hung.
ANSWER_TIMEOUT_S = 120


class Driven:
    """One driven worker: argv run with env, its stderr to log_path."""

    def __init__(self, name: str, argv: list, env: dict, log_path: str) -> None:
        self.name = name
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, cmd: str) -> None:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def answer(self) -> dict:
        try:
            line = self.lines.get(timeout=ANSWER_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError("%s did not answer within %d s (hung)" % (self.name, ANSWER_TIMEOUT_S)) from None
        if line is None:
            raise AssertionError("%s exited (status %s) instead of answering" % (self.name, self.proc.poll()))
        return json.loads(line)

    def ask(self, cmd: str) -> dict:
        self.send(cmd)
        return self.answer()

    def close(self) -> None:
        """Ends it: asked to exit (continued first, if stopped), else killed."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                self.send("exit")
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.log):
            try:
                f.close()
            except OSError:
                pass
