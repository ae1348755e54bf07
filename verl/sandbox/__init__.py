"""The sandbox for model-written code: an isolated runner, a SandboxFusion-compatible HTTP service and its client.

- `isolation`: how one execution is confined (new net/mount/PID namespaces, user nobody, rlimits, pids cgroup,
  a read-only view of the filesystem with only the work dir writable).
- `runner`: `SandboxRunner.run(code, ...)`: one execution in a fresh temporary directory, output capped, wall clock.
- `server`: the HTTP service (`POST /run_code`, `GET /health`); `python -m verl.tools.sandbox` runs it.
- `client`: `run_code(url, code, ...)` / `arun_code(...)` against this service or a real SandboxFusion.
- `local`: `with LocalSandbox() as url:` starts and stops the service as a child process.

Only `client` and `local` are imported by callers; they need nothing beyond the standard library.
"""

from verl.sandbox.client import SandboxHTTPError, SandboxUnavailable, arun_code, run_code
from verl.sandbox.local import LocalSandbox, SandboxStartError

__all__ = ["run_code", "arun_code", "SandboxUnavailable", "SandboxHTTPError", "LocalSandbox", "SandboxStartError"]
