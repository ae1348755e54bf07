"""`LocalSandbox`: start `python -m verl.tools.sandbox` as a child process for the length of a `with` block.

    with LocalSandbox() as url:
        run_code(url, "print(1)")

The child prints its URL on one line once it serves; we wait for that line with a deadline and stop the child
with SIGTERM, then SIGKILL, so neither start nor stop can hang.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import tempfile
import time

_URL_PREFIX = "sandbox listening on "


class SandboxStartError(RuntimeError):
    """The local sandbox service did not come up; the message carries its output."""


class LocalSandbox:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_concurrency: int | None = None,
        python: str | None = None,
        extra_args: list[str] | None = None,
        start_timeout: float = 60.0,
        stop_timeout: float = 10.0,
    ):
        self.argv = [python or sys.executable, "-m", "verl.tools.sandbox", "--host", host, "--port", str(port)]
        if max_concurrency is not None:
            self.argv += ["--max-concurrency", str(max_concurrency)]
        self.argv += list(extra_args or [])
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self._log = None

    def start(self) -> str:
        # stdout carries only the URL line; the service's log (warnings, a refusal to start) goes to a file.
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL, bufsize=0
        )
        seen = b""
        deadline = time.monotonic() + self.start_timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in seen.partition(_URL_PREFIX.encode())[2]:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not sel.select(timeout=remaining):
                    self.stop()
                    raise SandboxStartError(f"the sandbox did not start within {self.start_timeout}s: {self.log()}")
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    code = self.stop()
                    raise SandboxStartError(f"the sandbox exited (code {code}) before serving: {self.log()}")
                seen += chunk
        self.url = seen.decode().partition(_URL_PREFIX)[2].splitlines()[0].strip()
        self.proc.stdout.close()
        return self.url

    def log(self) -> str:
        """The last part of what the service wrote to stderr."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")[-4000:]

    def stop(self) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout and not proc.stdout.closed:
            proc.stdout.close()
        return proc.returncode

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
