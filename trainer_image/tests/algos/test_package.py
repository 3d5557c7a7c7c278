"""The algos package itself stays import-light (no torch until a submodule is imported)."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_package_does_not_import_torch() -> None:
    code = "import sys, rlhf_trainer.algos; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
