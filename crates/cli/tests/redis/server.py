"""Starts and stops `epochdb serve` for the client tests (shared helper)."""

import os
import re
import signal
import subprocess
import sys
import time

EPOCHDB = os.environ.get("EPOCHDB_BIN", "epochdb")


class Server:
    """An `epochdb serve` child process on a free port."""

    def __init__(self, *args):
        self.args = [EPOCHDB, "serve", "--port", "0", *args]
        self.proc = None
        self.port = None

    def start(self, timeout=60):
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + timeout
        log = []
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            log.append(line)
            match = re.search(r"ready to accept connections on [^\s]*:(\d+)", line)
            if match:
                self.port = int(match.group(1))
                self.recovery_line = "".join(log)
                return self
        raise RuntimeError("epochdb serve did not start:\n" + "".join(log))

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        """SIGTERM: a clean shutdown. Returns the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def check(condition, message):
    if not condition:
        print("FAILED: " + message, file=sys.stderr)
        sys.exit(1)
