"""The local failover cluster the HA tests run on: started by scripts/test-ha with
scripts/ha-cluster, which names its directory in HA_CLUSTER_DIR. Its nodes' roles and
health are what `ha-cluster status` says; killing and starting nodes goes through the
script too, as an operator's drill would."""

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

    def status(self) -> dict[str, str]:
        """What `ha-cluster status` says: each node's "role:state" as Patroni's REST API
        gives it, and `healthy` (a leader and a streaming synchronous standby): yes or no."""
        said = dict(
            line.split(": ", 1) for line in self.script("status").splitlines() if ": " in line
        )
        return said

    def with_role(self, role: str) -> str | None:
        nodes = {node["name"] for node in self.state["nodes"]}
        for name, said in self.status().items():
            if (
                name in nodes
                and said.startswith(f"{role}:")
                and said.endswith(("running", "streaming"))
            ):
                return name
        return None

    def healthy(self) -> bool:
        return self.status().get("healthy") == "yes"

    def wait(self, done: Callable[[], bool], what: str, timeout: float = 90) -> float:
        """Until done(); how long it took."""
        began = time.monotonic()
        while not done():
            if time.monotonic() - began > timeout:
                raise AssertionError(f"{what}: not in {timeout}s; {self.status()}")
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
