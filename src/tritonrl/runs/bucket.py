"""`tritonrl bucket create`: an S3 bucket fit to keep runs in (boto3).

    tritonrl bucket create my-runs [--region eu-west-1] [--kms-key KEY_ID_OR_ARN]
    tritonrl pipeline --store s3://my-runs/runs ...

    steps = create_bucket("my-runs", region="eu-west-1")   # [(step, outcome), ...]

Steps, each read first and written only when it differs (so a second run changes nothing
and succeeds): the bucket (with its LocationConstraint outside us-east-1; one these
credentials already own is fine), versioning Enabled (an overwritten or deleted checkpoint
can be recovered), default encryption (SSE-S3 AES256, or SSE-KMS with `--kms-key` and the
bucket key on; a bucket already on KMS is kept on it), a lifecycle rule
`tritonrl-noncurrent-versions` (noncurrent versions expire after 30 days, their leftover
delete markers go, incomplete multipart uploads are aborted after 7 days; the bucket's
other rules are kept), and all four public access blocks on. Then `bucket create` writes,
reads back and deletes one object (`check_writes`): "bucket ready" only when that works.

Credentials, region and endpoint come from the standard AWS variables (AWS_ENDPOINT_URL
for a non-AWS S3 server). A step the store answers NotImplemented (SeaweedFS does for the
public access block) is reported as `not supported by this store` (a warning) and the rest
are still applied; any other refusal stops with a `BucketError` naming the step and, for
a permission error, the IAM action the credentials need.

What it does NOT do: it sets no bucket policy (TLS-only, deny-unencrypted), no object
lock, replication, access logging or tags; it does not create the KMS key or check that
the credentials may use it; it never deletes or loosens anything it finds (other lifecycle
rules, an existing KMS encryption), except its own lifecycle rule, which it rewrites.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Callable

import typer
from rich.console import Console
from rich.markup import escape

NOT_SUPPORTED = "not supported by this store"
RULE_ID = "tritonrl-noncurrent-versions"
NONCURRENT_DAYS = 30
ABORT_UPLOADS_DAYS = 7
CREDENTIALS = (
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN for temporary ones), or "
    "AWS_PROFILE; AWS_ENDPOINT_URL for a non-AWS S3 server"
)
# The IAM action each step writes with (and reads with, first).
PERMISSIONS = {
    "bucket": ("s3:CreateBucket", "s3:ListBucket"),
    "versioning": ("s3:PutBucketVersioning", "s3:GetBucketVersioning"),
    "encryption": ("s3:PutEncryptionConfiguration", "s3:GetEncryptionConfiguration"),
    "lifecycle": ("s3:PutLifecycleConfiguration", "s3:GetLifecycleConfiguration"),
    "public access block": ("s3:PutBucketPublicAccessBlock", "s3:GetBucketPublicAccessBlock"),
    "write test": ("s3:PutObject", "s3:GetObject"),
}
PROBE = ".tritonrl-write-probe"  # the object the write test writes, reads and deletes
_DENIED = {"AccessDenied", "AllAccessDisabled", "403", "Forbidden"}
_BAD_CREDENTIALS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                    "InvalidToken", "TokenRefreshRequired", "InvalidClientTokenId"}  # fmt: skip
_NOT_SET = {"404", "NoSuchBucket", "ServerSideEncryptionConfigurationNotFoundError",
            "NoSuchLifecycleConfiguration", "NoSuchPublicAccessBlockConfiguration"}  # fmt: skip
_BLOCKS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")


class BucketError(RuntimeError):
    """A bucket that could not be set up; `steps` are the (step, outcome) done before."""

    def __init__(self, message: str, steps: list[tuple[str, str]] | None = None):
        super().__init__(message)
        self.steps = list(steps or [])


class _Unreadable(Exception):
    """A step's current setting could not be read (denied, or not implemented)."""


def _status(e) -> int | None:
    return e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def _code(e) -> str:
    """A ClientError's code (a HEAD's is its HTTP status)."""
    return str(e.response.get("Error", {}).get("Code") or _status(e) or "")


def _not_implemented(e) -> bool:
    return _code(e) in {"NotImplemented", "501"} or _status(e) == 501


def _read(call: Callable[[], dict]) -> dict | None:
    """The response of a Get call; None when the setting is absent."""
    from botocore.exceptions import ClientError

    try:
        return call()
    except ClientError as e:
        if _code(e) in _NOT_SET:
            return None
        if _code(e) in _DENIED or _not_implemented(e):
            raise _Unreadable(_code(e)) from None
        raise


def check_name(name: str) -> str:
    """The bucket name (an `s3://` in front is dropped); ValueError when S3 refuses it."""
    name = name.removeprefix("s3://").rstrip("/")
    problem = None
    if "/" in name:
        problem = "a bucket name, not a path: the run store's prefix goes to --store"
    elif not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name) or ".." in name:
        problem = "3 to 63 lower-case letters, digits, dots and hyphens, starting and ending "
        problem += "with a letter or digit, no '..'"
    else:
        try:
            ipaddress.ip_address(name)
            problem = "not an IP address"
        except ValueError:
            pass
    if problem:
        raise ValueError(f"bad bucket name {name!r}: {problem}")
    return name


# -- the steps: each returns its outcome ------------------------------------------------


def _bucket(client, name: str, region: str | None, kms_key: str | None) -> str:
    from botocore.exceptions import ClientError

    try:
        head = client.head_bucket(Bucket=name)
    except ClientError as e:
        if _code(e) not in _NOT_SET | _DENIED:
            raise
        head = None  # absent, or not ours to look at: creating says which
    if head is not None:
        headers = head.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        where = head.get("BucketRegion") or headers.get("x-amz-bucket-region")
        if region and where and where != region:
            return f"already exists, in {where} (not {region}): used there"
        return "already exists"
    args: dict = {"Bucket": name}
    if region and region not in ("us-east-1", "aws-global"):
        args["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        client.create_bucket(**args)
    except ClientError as e:
        if _code(e) == "BucketAlreadyOwnedByYou":
            return "already exists"
        if _code(e) == "BucketAlreadyExists":
            raise BucketError(
                f"bucket: the name {name!r} is taken by another account (bucket names are "
                "global across AWS): choose another"
            ) from None
        raise
    return f"created in {region or 'us-east-1'}"


def _versioning(client, name: str, region: str | None, kms_key: str | None) -> str:
    try:
        was = (_read(lambda: client.get_bucket_versioning(Bucket=name)) or {}).get("Status")
    except _Unreadable:
        was = None
    if was == "Enabled":
        return "already enabled"
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return "enabled (was suspended)" if was == "Suspended" else "enabled"


def _describe(rule: dict) -> str:
    default = rule.get("ApplyServerSideEncryptionByDefault", {})
    algorithm = default.get("SSEAlgorithm", "?")
    if algorithm == "AES256":
        return "SSE-S3 (AES256)"
    key = default.get("KMSMasterKeyID") or "the AWS managed key"
    bucket_key = ", bucket key on" if rule.get("BucketKeyEnabled") else ""
    return f"SSE-KMS ({algorithm}, {key}{bucket_key})"


def _encryption(client, name: str, region: str | None, kms_key: str | None) -> str:
    try:
        found = _read(lambda: client.get_bucket_encryption(Bucket=name))
    except _Unreadable:
        found = None
    rules = (found or {}).get("ServerSideEncryptionConfiguration", {}).get("Rules", [])
    current = rules[0] if rules else None
    if kms_key:
        default = {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": kms_key}
        rule = {"ApplyServerSideEncryptionByDefault": default, "BucketKeyEnabled": True}
    else:
        rule = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
    if current is not None:
        default = current.get("ApplyServerSideEncryptionByDefault", {})
        algorithm = default.get("SSEAlgorithm")
        if kms_key is None and algorithm == "AES256":
            return f"already {_describe(current)}"
        if kms_key is None and algorithm and algorithm.startswith("aws:kms"):
            return f"already {_describe(current)}: kept"
        same_key = algorithm == "aws:kms" and default.get("KMSMasterKeyID") == kms_key
        if kms_key and same_key and current.get("BucketKeyEnabled"):
            return f"already {_describe(current)}"
    client.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": [rule]})
    return f"{_describe(rule)} by default"


def lifecycle_rule() -> dict:
    """tritonrl's lifecycle rule, over the whole bucket."""
    return {
        "ID": RULE_ID,
        "Filter": {"Prefix": ""},
        "Status": "Enabled",
        "NoncurrentVersionExpiration": {"NoncurrentDays": NONCURRENT_DAYS},
        "Expiration": {"ExpiredObjectDeleteMarker": True},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_UPLOADS_DAYS},
    }


def _same_rule(found: dict, wanted: dict) -> bool:
    """Whether `found` is `wanted` as a store answers it (Filter {} or {"Prefix": ""})."""
    filter_ = found.get("Filter", {})
    whole_bucket = not found.get("Prefix") and set(filter_) <= {"Prefix"}
    whole_bucket = whole_bucket and not filter_.get("Prefix")
    fields = {k: v for k, v in wanted.items() if k not in ("ID", "Filter")}
    return whole_bucket and all(found.get(k) == v for k, v in fields.items())


def _lifecycle(client, name: str, region: str | None, kms_key: str | None) -> str:
    try:
        found = _read(lambda: client.get_bucket_lifecycle_configuration(Bucket=name))
    except _Unreadable as e:
        if e.args[0] in _DENIED:
            raise BucketError(
                f"lifecycle: could not read the bucket's lifecycle rules to keep them: the "
                f"credentials need {PERMISSIONS['lifecycle'][1]} on arn:aws:s3:::{name}"
            ) from None
        found = None
    rules = (found or {}).get("Rules", [])
    ours = [r for r in rules if r.get("ID") == RULE_ID]
    others = [r for r in rules if r.get("ID") != RULE_ID]
    wanted = lifecycle_rule()
    kept = f" ({len(others)} other rule(s) kept)" if others else ""
    if len(ours) == 1 and _same_rule(ours[0], wanted):
        return f"already set{kept}"
    client.put_bucket_lifecycle_configuration(
        Bucket=name, LifecycleConfiguration={"Rules": [*others, wanted]}
    )
    return (
        f"noncurrent versions expire after {NONCURRENT_DAYS} days (then their delete "
        f"markers), incomplete uploads are aborted after {ABORT_UPLOADS_DAYS} days{kept}"
    )


def _public_access(client, name: str, region: str | None, kms_key: str | None) -> str:
    try:
        found = _read(lambda: client.get_public_access_block(Bucket=name))
    except _Unreadable:
        found = None
    config = (found or {}).get("PublicAccessBlockConfiguration", {})
    if all(config.get(k) for k in _BLOCKS):
        return "already blocked"
    client.put_public_access_block(
        Bucket=name, PublicAccessBlockConfiguration=dict.fromkeys(_BLOCKS, True)
    )
    return "blocked (all four settings on)"


STEPS = (
    ("bucket", _bucket),
    ("versioning", _versioning),
    ("encryption", _encryption),
    ("lifecycle", _lifecycle),
    ("public access block", _public_access),
)


def _client(region: str | None):
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise BucketError('`tritonrl bucket` needs boto3: pip install "tritonrl[s3]"') from None
    session = boto3.session.Session(region_name=region)
    if session.get_credentials() is None:
        raise BucketError(f"no AWS credentials found: set {CREDENTIALS}")
    config = Config(connect_timeout=10, read_timeout=30, retries={"mode": "standard"})
    return session.client("s3", config=config)


def _explain(step: str, name: str, e) -> str:
    code = _code(e)
    message = e.response.get("Error", {}).get("Message") or code
    if code in _DENIED:
        need = PERMISSIONS[step][0]
        if step == "bucket":  # HeadBucket was refused too (or the bucket is absent)
            need += f" (and {PERMISSIONS[step][1]}, to find the bucket when it exists)"
        return f"{step}: access denied: the credentials need {need} on arn:aws:s3:::{name}"
    if code in _BAD_CREDENTIALS:
        return f"{step}: the store refused the credentials ({code}): check {CREDENTIALS}"
    return f"{step}: {code}: {message}"


def create_bucket(
    name: str, region: str | None = None, kms_key: str | None = None, client=None
) -> list[tuple[str, str]]:
    """Create or bring up to date the bucket `name` (see the module docstring); the
    (step, outcome) of each step. Raises BucketError (with the steps done) or ValueError
    (a bad name)."""
    name = check_name(name)
    client = client if client is not None else _client(region)
    region = region or client.meta.region_name
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    steps: list[tuple[str, str]] = []
    for step, apply in STEPS:
        try:
            outcome = apply(client, name, region, kms_key)
        except BucketError as e:
            raise BucketError(str(e), steps) from None
        except ClientError as e:
            if not _not_implemented(e):
                raise BucketError(_explain(step, name, e), steps) from None
            outcome = NOT_SUPPORTED
        except NoCredentialsError:
            raise BucketError(f"no AWS credentials found: set {CREDENTIALS}", steps) from None
        except BotoCoreError as e:  # the endpoint unreachable, a bad region, ...
            raise BucketError(f"{step}: {e} (endpoint {client.meta.endpoint_url})", steps) from None
        steps.append((step, outcome))
    return steps


def check_writes(name: str, region: str | None = None, client=None) -> str:
    """Write an object to bucket `name` with its settings, read it back and delete it
    (the version too): a bucket is fit for runs only when a checkpoint can go in (a
    default encryption the server cannot serve refuses every write). The outcome, or a
    BucketError naming the refusal."""
    import uuid

    from botocore.exceptions import BotoCoreError, ClientError

    client = client if client is not None else _client(region)
    key, body = f"{PROBE}-{uuid.uuid4().hex}", b"tritonrl write test\n"
    try:
        put = client.put_object(Bucket=name, Key=key, Body=body)
        try:
            if client.get_object(Bucket=name, Key=key)["Body"].read() != body:
                raise BucketError("write test: the object read back is not what was written")
        finally:
            version = {"VersionId": put["VersionId"]} if put.get("VersionId") else {}
            with contextlib.suppress(ClientError):  # may write, may not delete: writes count
                client.delete_object(Bucket=name, Key=key, **version)
    except ClientError as e:
        why = _explain("write test", name, e)
        if _code(e) not in _DENIED | _BAD_CREDENTIALS:
            why += " (the bucket's default encryption may be one this server cannot serve)"
        raise BucketError(why) from None
    except BotoCoreError as e:
        raise BucketError(f"write test: {e} (endpoint {client.meta.endpoint_url})") from None
    return "an object written, read back and deleted"


# -- the command ------------------------------------------------------------------------

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
bucket_app = typer.Typer(no_args_is_help=True, help="Create the object-store bucket for runs.")


def _show(steps: list[tuple[str, str]]) -> None:
    for step, outcome in steps:
        colour = "yellow" if outcome == NOT_SUPPORTED else "green"
        out.print(f"{escape(step)}: [{colour}]{escape(outcome)}[/{colour}]")


@bucket_app.command("create")
def create(
    name: str = typer.Argument(..., help="The bucket's name (global on AWS)."),
    region: str | None = typer.Option(
        None, "--region", help="Its region (default: AWS_DEFAULT_REGION / AWS_REGION / profile)."
    ),
    kms_key: str | None = typer.Option(
        None, "--kms-key", help="A KMS key id or ARN: SSE-KMS by default instead of SSE-S3."
    ),
) -> None:
    """A bucket for run stores: versioning, encryption, lifecycle, no public access.

    An existing bucket is brought up to date; running it again changes nothing."""
    steps: list[tuple[str, str]] = []
    try:
        steps = create_bucket(name, region=region, kms_key=kms_key)
        steps.append(("write test", check_writes(check_name(name), region)))
    except (BucketError, ValueError) as e:
        steps = getattr(e, "steps", None) or steps
        _show(steps)
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from None
    _show(steps)
    if any(outcome == NOT_SUPPORTED for _, outcome in steps):
        err.print("[yellow]warning:[/yellow] this store does not support every setting above")
    bucket = check_name(name)
    out.print(f"bucket ready: use it with --store s3://{bucket}/runs", markup=False)


def register(app: typer.Typer) -> None:
    """Add `bucket create` to the `tritonrl` app."""
    app.add_typer(bucket_app, name="bucket")
