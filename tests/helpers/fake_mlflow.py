"""mlflow is not installed here: a stand-in module with the API Tracking uses, recording every call."""

from __future__ import annotations

import sys
import types


def install_fake_mlflow(monkeypatch) -> dict:
    """Puts the stand-in in sys.modules for this test; returns its record (uri, experiment, run_name, params,
    metrics as (step, metrics) pairs, artifacts as (artifact_path, path) pairs once any, ended)."""
    calls: dict = {"params": {}, "metrics": []}
    module = types.ModuleType("mlflow")
    module.set_tracking_uri = lambda uri: calls.__setitem__("uri", uri)
    module.set_experiment = lambda name: calls.__setitem__("experiment", name)

    def start_run(run_name):
        calls["run_name"] = run_name
        return types.SimpleNamespace(info=types.SimpleNamespace(run_id="fake-run"))

    module.start_run = start_run
    module.log_params = lambda params: calls["params"].update(params)
    module.log_metrics = lambda metrics, step: calls["metrics"].append((step, metrics))
    module.log_artifact = lambda path, artifact_path=None: calls.setdefault("artifacts", []).append(
        (artifact_path, path))
    module.end_run = lambda: calls.__setitem__("ended", True)
    monkeypatch.setitem(sys.modules, "mlflow", module)
    return calls
