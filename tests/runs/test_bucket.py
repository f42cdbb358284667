"""`tritonrl bucket create` against the SeaweedFS S3 server (tests/s3server.py): the
settings read back from the server, a second run that sends no write, other lifecycle
rules kept, and what SeaweedFS does not implement (the public access block) checked at
the request level: the real request botocore sent, recorded from its `before-send` event,
and the step reported as not supported. Refusals are real too: an anonymous client is
denied, a wrong secret is refused, and no credentials at all is an error before any
request."""

import xml.etree.ElementTree as ET

import pytest
import typer
from typer.testing import CliRunner

from s3server import READER_KEY, READER_SECRET
from tritonrl.runs.bucket import (
    NOT_SUPPORTED,
    RULE_ID,
    BucketError,
    check_name,
    check_writes,
    create_bucket,
    lifecycle_rule,
    register,
)

KMS_KEY = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
BLOCKS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
STEPS = ["bucket", "versioning", "encryption", "lifecycle", "public access block"]


@pytest.fixture
def name(s3, monkeypatch):
    """A bucket name no one has created, the AWS variables a user would set, and the
    bucket deleted afterwards (the test server has room for few buckets)."""
    import uuid

    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    bucket = f"tb-{uuid.uuid4().hex[:16]}"
    yield bucket
    client = s3.client()
    try:
        versions = client.list_object_versions(Bucket=bucket)
    except client.exceptions.NoSuchBucket:
        return
    for v in versions.get("Versions", []) + versions.get("DeleteMarkers", []):
        client.delete_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
    client.delete_bucket(Bucket=bucket)


class Sent(list):
    """The requests a client sent: (operation, method, body) from botocore's
    `before-send` event, just before they go on the wire."""

    def __init__(self, client):
        super().__init__()
        client.meta.events.register("before-send.s3.*", self)

    def __call__(self, request, event_name: str, **kwargs) -> None:
        body = request.body if isinstance(request.body, bytes) else b""
        self.append((event_name.rsplit(".", 1)[-1], request.method, body))

    def body(self, operation: str) -> ET.Element:
        found = [body for op, _, body in self if op == operation]
        assert len(found) == 1, f"{operation} sent {len(found)} times"
        return ET.fromstring(found[0])

    def writes(self) -> list[str]:
        return [op for op, method, _ in self if method in ("PUT", "POST", "DELETE")]


def _text(root: ET.Element, tag: str) -> list[str]:
    return [e.text for e in root.iter() if e.tag.rsplit("}", 1)[-1] == tag]


def test_it_sets_everything_and_a_second_run_changes_nothing(s3, name):
    steps = create_bucket(name)
    assert [s for s, _ in steps] == STEPS
    assert dict(steps)["bucket"] == "created in us-east-1"
    assert dict(steps)["public access block"] == NOT_SUPPORTED
    assert all(outcome != NOT_SUPPORTED for step, outcome in steps[:-1])

    client = s3.client()
    assert client.get_bucket_versioning(Bucket=name)["Status"] == "Enabled"
    rules = client.get_bucket_encryption(Bucket=name)["ServerSideEncryptionConfiguration"]
    assert rules["Rules"][0]["ApplyServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    (rule,) = client.get_bucket_lifecycle_configuration(Bucket=name)["Rules"]
    assert rule["ID"] == RULE_ID and rule["Status"] == "Enabled"
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}
    assert rule["Expiration"] == {"ExpiredObjectDeleteMarker": True}

    again_client = s3.client()
    sent = Sent(again_client)
    again = create_bucket(name, client=again_client)
    assert [s for s, _ in again] == STEPS
    assert all(o.startswith("already") for _, o in again[:-1]), again
    assert again[-1] == ("public access block", NOT_SUPPORTED)
    # Nothing written: only the (unsupported) public access block is tried again.
    assert sent.writes() == ["PutPublicAccessBlock"]


def test_the_public_access_block_request_is_sent_and_reported_not_supported(s3, name):
    client = s3.client()
    sent = Sent(client)
    steps = create_bucket(name, client=client)
    assert dict(steps)["public access block"] == NOT_SUPPORTED
    body = sent.body("PutPublicAccessBlock")
    for flag in BLOCKS:
        assert _text(body, flag) == ["true"], flag
    assert [m for op, m, _ in sent if op == "PutPublicAccessBlock"] == ["PUT"]
    assert sent.writes() == ["CreateBucket", "PutBucketVersioning", "PutBucketEncryption",
                             "PutBucketLifecycleConfiguration", "PutPublicAccessBlock"]  # fmt: skip


def test_kms_encryption_with_the_bucket_key(s3, name):
    client = s3.client()
    sent = Sent(client)
    steps = create_bucket(name, kms_key=KMS_KEY, client=client)
    assert KMS_KEY in dict(steps)["encryption"]
    body = sent.body("PutBucketEncryption")
    assert _text(body, "SSEAlgorithm") == ["aws:kms"]
    assert _text(body, "KMSMasterKeyID") == [KMS_KEY]
    assert _text(body, "BucketKeyEnabled") == ["true"]
    rule = client.get_bucket_encryption(Bucket=name)["ServerSideEncryptionConfiguration"]
    assert rule["Rules"][0]["ApplyServerSideEncryptionByDefault"]["KMSMasterKeyID"] == KMS_KEY

    # Without --kms-key later: the KMS encryption is kept, not downgraded.
    again = dict(create_bucket(name))
    assert again["encryption"].startswith("already SSE-KMS") and "kept" in again["encryption"]


def test_the_region_goes_into_the_create_request(s3, name):
    client = s3.client()
    sent = Sent(client)
    steps = create_bucket(name, region="eu-west-1", client=client)
    assert dict(steps)["bucket"] == "created in eu-west-1"
    assert _text(sent.body("CreateBucket"), "LocationConstraint") == ["eu-west-1"]


def test_other_lifecycle_rules_are_kept_and_ours_is_rewritten(s3, name):
    client = s3.client()
    client.create_bucket(Bucket=name)
    other = {"ID": "scratch", "Filter": {"Prefix": "tmp/"}, "Status": "Enabled",
             "Expiration": {"Days": 3}}  # fmt: skip
    stale = {**lifecycle_rule(), "NoncurrentVersionExpiration": {"NoncurrentDays": 90}}
    config = {"Rules": [other, stale]}
    client.put_bucket_lifecycle_configuration(Bucket=name, LifecycleConfiguration=config)
    steps = dict(create_bucket(name))
    assert steps["bucket"] == "already exists"
    assert "1 other rule(s) kept" in steps["lifecycle"]
    rules = {r["ID"]: r for r in client.get_bucket_lifecycle_configuration(Bucket=name)["Rules"]}
    assert rules["scratch"]["Expiration"] == {"Days": 3}
    assert rules[RULE_ID]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}


def test_a_permission_error_names_the_step_and_the_permission(s3, name):
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    anonymous = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1",
                             config=Config(signature_version=UNSIGNED))  # fmt: skip
    with pytest.raises(BucketError) as e:
        create_bucket(name, client=anonymous)
    assert str(e.value).startswith("bucket: access denied")
    assert "s3:CreateBucket" in str(e.value) and f"arn:aws:s3:::{name}" in str(e.value)
    assert e.value.steps == []


def test_refused_or_missing_credentials_name_the_variables(s3, name, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(BucketError) as e:
        create_bucket(name)
    assert "refused the credentials" in str(e.value)
    assert "AWS_SECRET_ACCESS_KEY" in str(e.value)

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(s3.root / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(s3.root / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(BucketError) as e:
        create_bucket(name)
    assert "no AWS credentials" in str(e.value)
    assert "AWS_ACCESS_KEY_ID" in str(e.value) and "AWS_PROFILE" in str(e.value)


@pytest.mark.parametrize("bad", ["ab", "Runs", "my_runs", "-runs", "a..b", "10.0.0.1", "b/p"])
def test_bad_names_are_refused_before_any_request(bad):
    with pytest.raises(ValueError, match="bad bucket name"):
        check_name(bad)
    assert check_name("s3://my-runs/") == "my-runs"


def _cli() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        pass

    register(app)
    return app


def test_the_command_prints_each_step_and_exits_0_then_1_on_an_error(name, monkeypatch):
    app = _cli()
    r = CliRunner().invoke(app, ["bucket", "create", name], terminal_width=200)
    assert r.exit_code == 0, r.output
    for step in STEPS:
        assert f"{step}: " in r.output
    assert f"public access block: {NOT_SUPPORTED}" in r.output
    assert f"s3://{name}/runs" in r.output

    r = CliRunner().invoke(app, ["bucket", "create", name], terminal_width=200)
    assert r.exit_code == 0 and "versioning: already enabled" in r.output

    r = CliRunner().invoke(app, ["bucket", "create", "Bad_Name"], terminal_width=200)
    assert r.exit_code == 1 and "bad bucket name" in r.output

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    r = CliRunner().invoke(app, ["bucket", "create", name], terminal_width=200)
    assert r.exit_code == 1 and "error:" in r.output and "AWS_SECRET_ACCESS_KEY" in r.output
    assert "bucket ready" not in r.output


def test_a_bucket_whose_encryption_the_server_cannot_serve_is_not_called_ready(name):
    """The settings go through, but no object can go in: SSE-KMS, which this server
    cannot serve (it has no KMS). An error naming the write test and why, the steps
    shown, and "bucket ready" never printed."""
    r = CliRunner().invoke(_cli(), ["bucket", "create", name, "--kms-key", KMS_KEY],
                           terminal_width=200)  # fmt: skip
    assert r.exit_code == 1, r.output
    assert "encryption: SSE-KMS" in r.output and "error: write test:" in r.output, r.output
    assert "encryption may be one this server cannot serve" in r.output
    assert "bucket ready" not in r.output


def test_the_write_test_names_the_permission_a_read_only_key_lacks(s3, name):
    """A bucket set up by a key that may write; the write test with a key that may only
    read and list names the permission it lacks."""
    import boto3

    r = CliRunner().invoke(_cli(), ["bucket", "create", name], terminal_width=200)
    assert r.exit_code == 0 and "write test: an object written" in r.output, r.output
    reader = boto3.client(
        "s3", endpoint_url=s3.endpoint, region_name="us-east-1",
        aws_access_key_id=READER_KEY, aws_secret_access_key=READER_SECRET,
    )  # fmt: skip
    with pytest.raises(BucketError) as e:
        check_writes(name, client=reader)
    assert "write test: access denied" in str(e.value) and "s3:PutObject" in str(e.value)
    assert check_writes(name, client=s3.client()).startswith("an object written")
    assert s3.client().list_objects_v2(Bucket=name).get("KeyCount", 0) == 0  # nothing left
