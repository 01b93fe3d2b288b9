"""The local failover cluster the HA tests run on: started by scripts/test-ha with
scripts/ha-cluster, which names its directory in HA_CLUSTER_DIR. Its nodes' roles come from
Patroni's REST API; killing and starting nodes goes through the script, as an operator's
drill would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.processes import ROOT

SCRIPT = ROOT / "scripts" / "ha-cluster"


class Cluster:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.state = json.loads((directory / "cluster.json").read_text())

    @classmethod
    def from_environment(cls) -> Cluster:
        directory = os.environ.get("HA_CLUSTER_DIR")
        if not directory:
            pytest.fail("no cluster: tests/ha runs under `make test-ha` (scripts/test-ha)")
        return cls(Path(directory))

    def script(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(SCRIPT), *args, "--dir", str(self.dir)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def members(self) -> dict[str, str]:
        """{node: "role:state"} from the first node whose Patroni answers."""
        for node in self.state["nodes"]:
            url = f"http://127.0.0.1:{node['rest_port']}/cluster"
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    view = json.loads(response.read())
            except (OSError, ValueError):
                continue
            return {m["name"]: f"{m['role']}:{m.get('state', '')}" for m in view["members"]}
        return {}

    def with_role(self, role: str) -> str | None:
        for name, said in self.members().items():
            if said.startswith(f"{role}:") and said.endswith(("running", "streaming")):
                return name
        return None

    def healthy(self) -> bool:
        """A leader and a synchronous standby, both running."""
        return self.with_role("leader") is not None and self.with_role("sync_standby") is not None

    def wait(self, done: Callable[[], bool], what: str, timeout: float = 90) -> float:
        """Until done(); how long it took."""
        began = time.monotonic()
        while not done():
            if time.monotonic() - began > timeout:
                raise AssertionError(f"{what}: not in {timeout}s; members {self.members()}")
            time.sleep(0.2)
        return time.monotonic() - began

    def patroni_answers(self, node: dict) -> bool:
        url = f"http://127.0.0.1:{node['rest_port']}/patroni"
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except urllib.error.HTTPError:  # answering, as a node that is not healthy yet
            return True
        except OSError:
            return False

    def restore(self) -> None:
        """After a test, whatever it did: every node's Patroni running again and the cluster
        healthy. A cluster left without its synchronous standby would hold every commit,
        the test database's teardown included, for ever (strict mode)."""
        for node in self.state["nodes"]:
            if not self.patroni_answers(node):
                self.start_node(node["name"])
        self.wait(self.healthy, "the cluster healthy again after the test", timeout=120)

    def kill_postgres(self, node: str) -> None:
        self.script("kill-postgres", node)

    def stop_node(self, node: str) -> None:
        self.script("stop-node", node)

    def start_node(self, node: str) -> None:
        self.script("start-node", node)
