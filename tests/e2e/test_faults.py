"""Fault injection: one section per fault in docs/reliability.md's table. Each case injects the fault, checks that it
surfaces as a named error (or the documented recovery) within its deadline, and that nothing is lost or left
half-written. Fast cases run in `make test`; whole runs that take minutes are marked `slow`.

Sections are owned by the part of the code they exercise; shared helpers live in tests/helpers/.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e]


# == deadlines: a worker that hangs, a worker killed mid-step, non-finite gradients ================================
# (section: deadlines)


# == reward scoring: a reward function that hangs ===================================================================
# (section: reward)


# == resume identity and the checkpoint-folder lock: resume with a different model, a second run on one folder ======
# (section: resume identity)


# == kill -9 of the driver during a step and during a save (vLLM, 2 ranks, mid-epoch) ===============================
# (section: kill -9)


# == data checked before Ray: a row without ground truth, an overlong prompt, an empty val file ====================
# (section: data)
