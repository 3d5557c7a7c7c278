"""A failed `e2e/local/up.sh` says what failed and stops what it started: here the chart's
`network.apiServerCidrs` holds an address the schema's pattern lets through but that is no
CIDR, so the operator exits at start-up, again and again, and never gets Ready. up.sh must
name the container's state and the error its last attempt ended with, show its last log lines,
and leave no process, mount or bridge behind (a substrate left running an hour after pytest
ended is how this was found). A second substrate beside the session's: each takes its own
instance, bridge and pod subnet."""

from __future__ import annotations

import re
import subprocess

import pytest
from e2e_local import LocalSubstrate

pytestmark = pytest.mark.e2e


def test_a_failed_up_says_why_and_stops_what_it_started(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    local = LocalSubstrate(tmp_path_factory.mktemp("failing-substrate"))
    with pytest.raises(RuntimeError) as failed:
        local.up("network.apiServerCidrs={10.0.0.300/99}", timeout=45)
    message = str(failed.value)
    assert "the operator is not Ready after 45 s" in message
    assert "container operator: now " in message and "last attempt terminated: Error" in message
    assert "its last 40 log lines" in message
    assert "RLHF_OPERATOR_API_SERVER_CIDRS: must be CIDRs such as 10.0.0.1/32" in message
    assert "stopping the substrate it started" in message
    # Stopped by up.sh itself, before any down.sh.
    assert not local.processes(argv_contains=str(local.state)), "left running after a failed up"
    assert not local.mounts()
    log = (local.state / "substrate.log").read_text()  # kept for a look
    instance = re.search(r"serving \S+ \(instance (\d+),", log)
    assert instance is not None, log[-2000:]
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True)
    assert f"rlhfsub{instance.group(1)} " not in links.stdout, "its pod network is left"
