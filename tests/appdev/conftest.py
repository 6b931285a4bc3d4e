"""One virtualenv with this checkout pip-installed, shared by the tests that need an
installed caravel_lite (the pytest plugin's entry point, the py.typed marker)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.appdev import installed


@pytest.fixture(scope="session")
def installed_python(tmp_path_factory) -> Path:
    return installed.build(tmp_path_factory.mktemp("caravel-installed"))
