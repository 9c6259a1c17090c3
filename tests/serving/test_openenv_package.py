"""environments/hopgym_openenv as OpenEnv's own ``openenv validate`` judges it: its openenv.yaml and layout
pass the static check, a manifest with a required field removed fails it naming the field, and the server
its ``server`` script starts passes the runtime check of a running environment (health, metadata, schema,
the ``/mcp`` endpoint)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.extras import require_extra
from tests.paths import ROOT

require_extra("openenv.cli", "serve")

PACKAGE = ROOT / "environments" / "hopgym_openenv"
READY = re.compile(r"^ready: --base-url (http://127\.0\.0\.1:\d+)$")


def validate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openenv.cli", "validate", *args], capture_output=True, text=True, timeout=1800
    )


@pytest.mark.early  # two openenv validate runs: 24 s under make test
def test_the_package_passes_openenv_validate_and_a_broken_manifest_fails_it(tmp_path: Path) -> None:
    passed = validate(str(PACKAGE), "--level", "static", "--skip-build")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "PASS  static.manifest" in passed.stdout and "Verdict: PASS" in passed.stdout

    broken = tmp_path / "hopgym_openenv"
    shutil.copytree(PACKAGE, broken)
    manifest = broken / "openenv.yaml"
    text = manifest.read_text()
    manifest.write_text(text[: text.index("  resources:")] + text[text.index("  capabilities:") :])
    failed = validate(str(broken), "--level", "static", "--skip-build")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "resources: Field required" in failed.stdout and "Verdict: FAIL" in failed.stdout

    again = validate(str(PACKAGE), "--level", "static", "--skip-build")  # the package itself is untouched
    assert again.returncode == 0, again.stdout + again.stderr


def test_the_packages_server_script_passes_openenv_validate_of_a_running_environment() -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "server.app", "--env", "ToolHop-v0"],
        cwd=PACKAGE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().strip()
        match = READY.match(line)
        assert match, f"the package's server did not print its ready line: {line!r}"
        checked = validate("--url", match.group(1))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        for criterion in ("health_endpoint", "metadata_endpoint", "schema_endpoint", "mcp_endpoint"):
            assert f"PASS  {criterion}" in checked.stdout, checked.stdout
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 130
