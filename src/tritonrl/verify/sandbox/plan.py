"""Planning one sandboxed run: which mechanisms a `SandboxConfig` gets on this host.

`make_plan(config, probe())` decides, for each mechanism, whether it is used (the host
offers it, `config.disable` does not turn it off), refuses to plan at all in strict mode
when a required one is unavailable (`SandboxUnavailable`), and fills `Plan.enforced` and
`Plan.missing`: the lists every run reports.

What it does NOT do: build commands (see `command`) or start anything (see `spawn`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tritonrl.verify.sandbox.config import SandboxConfig, SandboxUnavailable


@dataclass
class Plan:
    bwrap: bool
    landlock_abi: int  # 0: no Landlock
    netns: bool
    pidns: bool
    rlimits: bool
    nproc_rlimit: bool
    cgroup_parent: Path | None
    memory_cgroup: Path | None
    enforced: list[str]
    missing: list[str]


def _unavailable(config: SandboxConfig, host: Mapping[str, bool | int | str]) -> dict[str, str]:
    """Required mechanism -> why it is unavailable (absent when available)."""
    off = set(config.disable)
    bwrap_ok = bool(host["bwrap"]) and "bwrap" not in off
    cgroup_ok = bool(host["pids_cgroup"]) and "pids-cgroup" not in off
    checks = {
        "bwrap": (bool(host["bwrap"]), f"bwrap unusable: {host['bwrap_error']}"),
        "landlock": (bool(host["landlock"]), "the kernel offers no Landlock (Linux >= 5.13)"),
        "netns": (bwrap_ok or bool(host["netns"]), "cannot create a network namespace"),
        "pidns": (bwrap_ok or bool(host["pidns"]), "cannot create a pid namespace"),
        "rlimits": (bool(host["rlimits"]), "setrlimit unavailable"),
        "nproc": (
            cgroup_ok or not host["root"],
            "running as root (RLIMIT_NPROC does not apply to uid 0) and no writable pids cgroup",
        ),
    }
    out = {}
    for name, (ok, why) in checks.items():
        if name in off:
            out[name] = "disabled by SandboxConfig.disable"
        elif not ok:
            out[name] = why
    if config.network:
        out.pop("netns", None)
    return out


def make_plan(config: SandboxConfig, host: Mapping[str, bool | int | str]) -> Plan:
    unavailable = _unavailable(config, host)
    if unavailable and config.strict:
        what = "; ".join(f"{name}: {why}" for name, why in unavailable.items())
        raise SandboxUnavailable(f"sandbox mechanism(s) unavailable, refusing to run: {what}")
    off = set(config.disable)
    use_cgroup = bool(host["pids_cgroup"]) and not off & {"pids-cgroup", "nproc"}
    use_memory = bool(host.get("memory_cgroup")) and "memory-cgroup" not in off
    plan = Plan(
        bwrap="bwrap" not in unavailable,
        landlock_abi=0 if "landlock" in unavailable else int(host["landlock_abi"]),
        netns=not config.network and "netns" not in unavailable,
        pidns="pidns" not in unavailable,
        rlimits="rlimits" not in unavailable,
        nproc_rlimit="nproc" not in off and not host["root"],
        cgroup_parent=Path(str(host["pids_cgroup"])) if use_cgroup else None,
        memory_cgroup=Path(str(host["memory_cgroup"])) if use_memory else None,
        enforced=[],
        missing=[f"{name}: {why}" for name, why in unavailable.items()],
    )
    _describe(plan, config, host)
    return plan


def _describe(plan: Plan, config: SandboxConfig, host: Mapping[str, bool | int | str]) -> None:
    """Fill plan.enforced and the optional entries of plan.missing."""
    on, miss = plan.enforced, plan.missing
    on += [n for n, ok in (("bwrap", plan.bwrap), ("netns", plan.netns)) if ok]
    on += ["pidns"] if plan.pidns else []
    if config.network:
        miss.append("netns: network=True (the child shares the host network)")
    if plan.landlock_abi:
        on.append("landlock")
        _describe_landlock_extras(plan, config)
    on.append("no-new-privs")
    if not plan.bwrap and host["root"]:
        on.append("cap-drop")
    if plan.rlimits:
        on += ["rlimit-fsize", "rlimit-cpu", "rlimit-core"]
        if config.gpu:
            miss.append("rlimit-as: skipped (gpu=True: CUDA reserves a huge address space)")
        else:
            on.append("rlimit-as")
    on += ["rlimit-nproc"] if plan.nproc_rlimit and plan.rlimits else []
    on += ["pids-cgroup"] if plan.cgroup_parent else []
    if plan.memory_cgroup:
        on.append("memory-cgroup")
    elif "memory-cgroup" in config.disable:
        miss.append("memory-cgroup: disabled by SandboxConfig.disable")
    else:
        miss.append("memory-cgroup: no writable cgroup with the memory controller")
    if not plan.bwrap and not host["mountns"]:
        miss.append("private-proc: the host's /proc is visible")
    on += ["env-scrub", "tree-kill", "output-cap"]


def _describe_landlock_extras(plan: Plan, config: SandboxConfig) -> None:
    abi = plan.landlock_abi
    if not config.network:
        if abi >= 4:
            plan.enforced.append("landlock-net")
        else:
            plan.missing.append(f"landlock-net: Landlock ABI {abi} < 4")
    if abi >= 6:
        plan.enforced.append("landlock-scope")
    else:
        plan.missing.append(f"landlock-scope: Landlock ABI {abi} < 6")
