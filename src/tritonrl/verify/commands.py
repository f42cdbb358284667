"""`tritonrl verify`: one candidate kernel through the verifier, or a batch of them through
the worker pool.

    tritonrl verify TASK KERNEL [--json]       verify one candidate (code or completion)
    tritonrl verify --batch CASES.jsonl --out RESULTS.jsonl [--workers N] [--backend ray]
                                               many, through the worker pool (streamed),
                                               or the actors of a Ray cluster
    tritonrl serve [--host 127.0.0.1] [--port 8765] [--token-file F] [--workers N]
                   [--max-queue N] [--max-request-bytes N]
                                               the verifier as an HTTP service
                                               (tritonrl.verify.service)

TASK is a task file or an id such as `builtin:level1/1_ReLU`; KERNEL a file, `-` for
stdin, or the code itself. The command takes `--config FILE|NAME` and `--verify.KEY
VALUE` overrides (`tritonrl.cli_config`); `--device`, `--policy` and `--backend` are short
for `--verify.device`, `--verify.policy` and `--verify.backend`. With `verify.endpoint`
set (or $TRITONRL_VERIFY_ENDPOINT) both forms verify through that `tritonrl serve`, under
its settings. `register(app)` adds it to the `tritonrl` app.

What it does NOT do: compute a verdict (the funnel does) or load torch before it runs
(the verifier's modules are imported when the command runs).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tritonrl.cli_config import CONFIG, OVERRIDES
from tritonrl.reward import reward_for
from tritonrl.tasks import Task
from tritonrl.tasks.commands import load, usage, verify_config
from tritonrl.verify.batch import read_cases, result_row
from tritonrl.verify.client import ServiceError, client_for

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _one_task(spec: str) -> Task:
    report = load([spec])
    if len(report.tasks) != 1:
        err.print(
            f"[red]error:[/red] {spec!r} names {len(report.tasks)} tasks; give exactly one "
            "(a file, or an id such as builtin:level1/1_ReLU)"
        )
        raise typer.Exit(2)
    return report.tasks[0]


def _read_kernel(kernel: str) -> bytes:
    """KERNEL is a file, `-` for stdin, or the code itself."""
    if kernel == "-":
        return sys.stdin.buffer.read()
    path = Path(kernel)
    try:
        if path.is_file():
            return path.read_bytes()
    except OSError:
        pass  # a long code string is not a path
    if "\n" in kernel or "ModelNew" in kernel:
        return kernel.encode()
    err.print(
        f"[red]error:[/red] KERNEL {kernel!r}: no such file (give a file, - for stdin, "
        "or the code itself)"
    )
    raise typer.Exit(2)


def verify_cmd(
    ctx: typer.Context,
    task: str | None = typer.Argument(
        None, help="One task: a file or an id like builtin:level1/1_ReLU."
    ),
    kernel: str | None = typer.Argument(
        None, help="Candidate file (code or completion), or - for stdin."
    ),
    config_path: str | None = CONFIG,
    device: str | None = typer.Option(
        None, help="Short for --verify.device: auto, cpu (Triton interpreter) or cuda."
    ),
    policy: str | None = typer.Option(
        None, help="Short for --verify.policy: strict (all compute in Triton) or partial."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object."),
    batch: Path | None = typer.Option(
        None,
        "--batch",
        help='CASES.jsonl, one {"task": ..., "kernel": TEXT} or {"task": ..., '
        '"kernel_file": PATH} per line (PATH relative to the JSONL file\'s folder).',
    ),
    out_path: Path | None = typer.Option(
        None, "--out", help="RESULTS.jsonl for --batch: one result per case, as each finishes."
    ),
    workers: int = typer.Option(
        0,
        help="--batch: pool lanes (0: one per CPU core; on CUDA at most 16 per GPU); with "
        "--backend ray, each actor's.",
    ),
    backend: str | None = typer.Option(
        None,
        help="Short for --verify.backend: local (this machine's pool) or ray (the actors of "
        "the Ray cluster at --verify.ray_address; pip install 'tritonrl\\[ray]').",
    ),
    force: bool = typer.Option(False, "--force", help="--batch: overwrite an existing --out."),
):
    """Verify one candidate kernel, or with --batch many through the worker pool. Exit 0
    whenever every candidate got a verdict, 1 when some --batch line was unusable (its row
    says why), 2 for bad usage. --out is never overwritten without --force. The
    verifier's settings and the reward scheme are the config's verify section (--config,
    --verify.KEY VALUE, e.g. --verify.timeout_s 30)."""
    shortcuts = {"--device": ("verify.device", device), "--policy": ("verify.policy", policy),
                 "--backend": ("verify.backend", backend)}  # fmt: skip
    config, args = verify_config(ctx, config_path, "verify", shortcuts, (task, kernel), 2)
    task, kernel = (*args, None, None)[:2]
    if batch is not None or out_path is not None:
        if task is not None or kernel is not None or as_json:
            usage("--batch takes no TASK, KERNEL or --json (results go to --out)")
        if batch is None or out_path is None:
            usage("--batch and --out go together")
        _verify_batch(batch, out_path, config, workers, force)
        return
    if task is None or kernel is None:
        usage("give TASK and KERNEL, or --batch CASES.jsonl --out RESULTS.jsonl")
    from tritonrl.verify.funnel import verify  # lazy: loads torch

    the_task = _one_task(task)
    code = _read_kernel(kernel)
    client = client_for(config)
    if client is not None:  # the service's pool, under the server's verify settings
        result = _through(client, [(the_task, code)])[0]
    elif config.backend == "ray":  # on the cluster, as --batch would
        with _open_verifier(config, None) as verifier:
            result = verifier.verify_many([(the_task, code)])[0]
    else:
        result = verify(the_task, code, config)
    reward = reward_for(result, config)
    if as_json:
        typer.echo(json.dumps({**result.to_dict(), "reward": reward}))
        return
    verdict = "[green]correct[/green]" if result.correct else "[red]not correct[/red]"
    out.print(f"{result.task}: {verdict}, stage {result.stage}, reward {reward:.3f}")
    if result.error:
        out.print(f"  error: {result.error}", markup=False)
    if result.flags:
        out.print(f"  flags: {', '.join(result.flags)}", markup=False)
    for o in result.input_sets:
        out.print(
            f"  {o.name}: {'ok' if o.ok else 'FAIL'} {o.detail if not o.ok else ''}", markup=False
        )
    if result.speedup is not None:
        lo, hi = result.speedup_ci or (result.speedup, result.speedup)
        out.print(f"  speedup {result.speedup:.3f} (95% CI {lo:.3f}-{hi:.3f})")


def _through(client, pairs):
    with _service_errors():
        return client.verify_many(pairs)


@contextlib.contextmanager
def _service_errors():
    """The service not answering, or refusing: one line, exit 1 (the rows written stay)."""
    try:
        yield
    except ServiceError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from None


def _open_verifier(config, workers: int | None, sink=None):
    """The verifier of `config.backend`; exit 2 with the reason when the Ray backend
    cannot start (`sink`, the --out file just made, is removed then)."""
    from tritonrl.verify.backend import open_verifier  # lazy: loads torch
    from tritonrl.verify.ray_backend import RayVerifierError  # lazy: as the line above

    try:
        verifier = open_verifier(config, workers)
    except RayVerifierError as e:
        if sink is not None:
            sink.close()
            Path(sink.name).unlink(missing_ok=True)
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    if config.backend == "ray":
        err.print(f"verifying on the Ray cluster: {len(verifier.actors)} actors "
                  f"({verifier.device}), {verifier.lanes} lanes")  # fmt: skip
    return verifier


def _verify_batch(cases_path: Path, out_path: Path, config, workers: int, force: bool) -> None:
    """`verify --batch`: every case through one pool (or Ray verifier), rows streamed to
    --out."""
    try:
        cases = read_cases(cases_path)
    except OSError as e:
        usage(f"--batch {cases_path}: {e.strerror or e}")
    try:
        sink = open(out_path, "w" if force else "x", encoding="utf-8")  # noqa: SIM115
    except FileExistsError:
        usage(f"--out {out_path} exists; pass --force to overwrite it")
    except OSError as e:
        usage(f"--out {out_path}: {e.strerror or e}")
    good = [c for c in cases if c.error is None]
    bad = [c for c in cases if c.error is not None]
    correct = 0
    progress = Progress(
        TextColumn("verifying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, disable=not sys.stderr.isatty(),
    )  # fmt: skip

    def emit(row: dict) -> None:
        sink.write(json.dumps(row) + "\n")
        sink.flush()
        progress.advance(bar)

    with sink, progress:
        bar = progress.add_task("verify", total=len(cases))
        for case in bad:
            err.print(f"[yellow]skipped[/yellow] {escape(case.error)}")
            emit(result_row(case, None))
        pairs = [(c.task, c.code) for c in good]
        client = client_for(config) if good else None
        if client is not None:
            err.print(f"verifying through the service at {client.endpoint}", markup=False)
            with _service_errors():
                for i, result in client.imap(pairs):
                    correct += result.correct
                    emit(result_row(good[i], result, reward_for(result, config)))
        elif good:
            with _open_verifier(config, workers or None, sink) as verifier:
                for i, result in verifier.imap_unordered(pairs):
                    correct += result.correct
                    emit(result_row(good[i], result, reward_for(result, config)))
    err.print(
        f"{len(cases)} cases: {correct} correct, {len(good) - correct} not correct, "
        f"{len(bad)} without a verdict (bad input); results in {out_path}"
    )
    if bad:
        raise typer.Exit(1)


def serve_cmd(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", help="Address to bind; beyond loopback needs a token."),
    port: int = typer.Option(8765, help="Port (0: any free one; the address is printed)."),
    token_file: Path | None = typer.Option(
        None, "--token-file", help="File holding the token (else $TRITONRL_SERVE_TOKEN)."
    ),
    workers: int = typer.Option(0, help="Pool lanes (0: one per CPU core; CUDA: <= 16/GPU)."),
    max_queue: int = typer.Option(
        256, help="Completions queued or verifying at once, all requests together (503 past)."
    ),
    max_request_bytes: int = typer.Option(16 << 20, help="Largest request body (413 past)."),
    config_path: str | None = CONFIG,
):
    """Serve the verifier over HTTP (POST /verify, GET /health) for trainers whose
    rollout workers see no GPU; clients set verify.endpoint to the printed address. The
    verifier's settings and the reward scheme are this command's config (--config,
    --verify.KEY VALUE), fixed while it runs. Stops on Ctrl-C or SIGTERM."""
    from tritonrl.verify.client import read_token  # lazy: as the pool below
    from tritonrl.verify.pool.pool import VerifierPool  # lazy: loads torch
    from tritonrl.verify.service import VerifyService, is_loopback  # lazy: imports the pool

    config, _ = verify_config(ctx, config_path, "verify", {}, (), 0)
    if config.backend != "local":
        usage(
            f"tritonrl serve verifies on this machine's pool, not verify.backend "
            f"{config.backend!r}; run it on each GPU node, or have the trainer verify on "
            "the Ray cluster itself (--verify.backend ray, docs/scaling.md)"
        )
    try:
        token = read_token(token_file)
    except ValueError as e:
        usage(f"--token-file: {e}")
    if max_queue < 1 or max_request_bytes < 1:
        usage("--max-queue and --max-request-bytes must be at least 1")
    if not token and not is_loopback(host):
        usage(
            f"--host {host} is not loopback: give a token (--token-file FILE or "
            "$TRITONRL_SERVE_TOKEN), or bind 127.0.0.1"
        )
    pool = VerifierPool(config, workers or None)
    try:
        service = VerifyService(pool, host, port, token, max_queue, max_request_bytes,
                                lambda r: reward_for(r, config))  # fmt: skip
    except (ValueError, OSError) as e:
        pool.close()
        usage(f"cannot serve on {host}:{port}: {e}")
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=service.stop).start())
    err.print(
        f"verifier serving on {service.address} ({len(pool.lanes)} lanes, "
        f"{'token required' if token else 'no token: loopback only'}); Ctrl-C stops it"
    )
    try:
        service.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        service.close()


def register(app: typer.Typer) -> None:
    """Add `verify` and `serve` to the `tritonrl` app."""
    app.command("verify", context_settings=OVERRIDES)(verify_cmd)
    app.command("serve", context_settings=OVERRIDES)(serve_cmd)
