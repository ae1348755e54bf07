"""mlflow is not installed here: a stand-in module with the API Tracking uses, recording every call."""

from __future__ import annotations

import sys
import types


def install_fake_mlflow(monkeypatch) -> dict:
    """Puts the stand-in in sys.modules for this test; returns its record (uri, experiment, run_name, params,
    metrics as (step, metrics) pairs, ended)."""
    calls: dict = {"params": {}, "metrics": []}
    module = types.ModuleType("mlflow")
    module.set_tracking_uri = lambda uri: calls.__setitem__("uri", uri)
    module.set_experiment = lambda name: calls.__setitem__("experiment", name)
    module.start_run = lambda run_name: calls.__setitem__("run_name", run_name)
    module.log_params = lambda params: calls["params"].update(params)
    module.log_metrics = lambda metrics, step: calls["metrics"].append((step, metrics))
    module.end_run = lambda: calls.__setitem__("ended", True)
    monkeypatch.setitem(sys.modules, "mlflow", module)
    return calls
