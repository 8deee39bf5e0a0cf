"""Every registered runtime through the runtime conformance suite
(:mod:`megaactors.runtime.conformance`): a runtime joins by registering itself in
``megaactors.runtime.RUNTIMES``, whose every entry is this class's ``runtime``."""

from __future__ import annotations

import pytest

from megaactors.runtime import RUNTIMES
from megaactors.runtime.conformance import RuntimeConformance, RuntimeFactory


class TestRegisteredRuntimes(RuntimeConformance):
    @pytest.fixture(params=sorted(RUNTIMES))
    def runtime(self, request: pytest.FixtureRequest) -> RuntimeFactory:
        return RUNTIMES[request.param]
