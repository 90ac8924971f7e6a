"""The bubblewrap sandbox of ``run_bash``: its command line, its limits, and why it cannot run.

What the sandbox is (each point is an invariant the tests in ``tests/security`` check):

- bwrap itself starts with an empty environment; the command gets only PATH, HOME, TMPDIR,
  LANG and TERM (``--setenv``). No variable of the harness (API keys, bot tokens) exists in
  any process of the sandbox, bwrap's own init included (``/proc/1/environ``);
- every namespace is new: own PIDs with its own ``/proc`` (no host process is visible), no
  network but a private loopback unless the session enables it, a user namespace in which
  the command runs as an unprivileged uid (``sandbox.uid``, default 1000) with no
  capabilities and no way to create further user namespaces;
- the system directories (/usr, /etc, /bin, /lib...) are bound read-only, and everything in
  /etc that an ordinary local user could not read (not world-readable: /etc/shadow, private
  keys, root-only configs) is masked, so file modes hold even when GEODE runs as root (whose
  uid the namespace maps the sandbox uid to);
- the workspace is the only writable host directory; /tmp and /var/tmp are private tmpfs of a
  bounded size; ``$GEODE_HOME`` and the store's files are masked wherever they are (also when
  they lie inside the workspace or a bound directory);
- per-call limits: processes, address space, file size (``ulimit`` in the wrapper), tmpfs
  size (``--size``); processes are also counted from outside and the sandbox is killed when
  it has more than allowed (the kernel does not apply ``RLIMIT_NPROC`` to root);
- ``--die-with-parent`` and ``--new-session``; no inherited file descriptors but the pipes.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from geode.tools.deps import SandboxLimits  # the session gives them (ctx.deps)

__all__ = [
    "SandboxLimits",
    "bwrap_argv",
    "count_sandbox_processes",
    "diagnose",
    "missing_features",
    "probe",
    "reset_probe",
]

#: host directories bound read-only (a symlink, as /bin -> usr/bin on merged-/usr, is recreated)
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_MIB = 1024 * 1024


def _walk_unreadable(top: str) -> list[tuple[str, bool]]:
    """Paths under ``top`` an ordinary user could not read: (path, is_dir), outermost only."""
    found: list[tuple[str, bool]] = []
    stack = [top]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if st.st_mode & 0o005 != 0o005:
                    found.append((entry.path, True))
                else:
                    stack.append(entry.path)
            elif stat.S_ISREG(st.st_mode) and not st.st_mode & 0o004:
                found.append((entry.path, False))
    return sorted(found)


@functools.cache
def _masked_system_entries() -> tuple[tuple[str, bool], ...]:
    # /etc only: it is where host secrets live; scanning /usr on every start would be slow
    # and it holds none by convention. Cached: /etc changes rarely, a restart picks it up.
    return tuple(_walk_unreadable("/etc"))


@functools.cache
def _supports(bwrap: str) -> frozenset[str]:
    """Options of this bwrap build that older ones lack (0.8.0 added the first two)."""
    try:
        done = subprocess.run(
            [bwrap, "--help"], capture_output=True, timeout=10, check=False, env={}
        )
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    text = done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace")
    return frozenset(o for o in ("--size", "--disable-userns", "--perms") if o in text)


def missing_features(bwrap: str) -> list[str]:
    """What this bwrap cannot enforce (for ``geode doctor``): upgrade to bubblewrap >= 0.8."""
    have = _supports(bwrap)
    out = []
    if "--size" not in have:
        out.append("the size limit of the private /tmp (--size)")
    if "--disable-userns" not in have:
        out.append("blocking nested user namespaces (--disable-userns)")
    return out


def _visible_under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _mask(path: str, is_dir: bool, have: frozenset[str]) -> list[str]:
    if is_dir:
        perms = ["--perms", "0000"] if "--perms" in have else []
        return [*perms, "--tmpfs", path, "--remount-ro", path]
    return ["--ro-bind", "/dev/null", path]


def bwrap_argv(
    bwrap: str,
    workspace: Path,
    argv: Sequence[str],
    *,
    network: bool = False,
    ro_paths: Sequence[str] = (),
    limits: SandboxLimits | None = None,
    protected: Sequence[Path] = (),
) -> list[str]:
    """The full bwrap command line running ``argv`` with ``workspace`` as its writable cwd.

    ``protected`` paths (GEODE's home, the store's files) are masked wherever they are
    visible in the sandbox. Start the result with an empty environment.
    """
    limits = limits or SandboxLimits()
    have = _supports(bwrap)
    cmd = [bwrap, "--unshare-all", "--unshare-user"]
    if "--disable-userns" in have:
        cmd.append("--disable-userns")
    cmd += ["--uid", str(limits.uid), "--gid", str(limits.gid)]
    if network:
        cmd.append("--share-net")
    cmd += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
    bound: list[str] = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            cmd += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            cmd += ["--ro-bind", path, path]
            bound.append(path)
    for path, is_dir in _masked_system_entries():
        cmd += _mask(path, is_dir, have)
    if network:
        # /etc/resolv.conf is often a symlink into /run, which the sandbox does not have
        resolv = os.path.realpath("/etc/resolv.conf")
        if not resolv.startswith("/etc/"):
            cmd += ["--ro-bind-try", resolv, resolv]
    for path in ro_paths:
        cmd += ["--ro-bind-try", path, path]
        bound.append(os.path.realpath(path))
    ws = str(workspace)
    size = ["--size", str(limits.tmpfs_mb * _MIB)] if "--size" in have else []
    cmd += ["--dev", "/dev", "--proc", "/proc"]
    cmd += [*size, "--tmpfs", "/tmp", *size, "--tmpfs", "/var/tmp"]
    # after the tmpfs mounts: a workspace under /tmp is bound on top of the private /tmp
    cmd += ["--bind", ws, ws, "--chdir", ws]
    bound.append(ws)
    # last: GEODE's own files are masked on top of whatever bound them
    for p in protected:
        real = os.path.realpath(p)
        if os.path.lexists(real) and _visible_under(real, bound):
            cmd += _mask(real, os.path.isdir(real), have)
    for key, value in (
        ("PATH", SANDBOX_PATH),
        ("HOME", ws),
        ("TMPDIR", "/tmp"),
        ("LANG", "C.UTF-8"),
        ("TERM", "dumb"),
    ):
        cmd += ["--setenv", key, value]
    return [*cmd, "--", *_limited(argv, limits)]


def _limited(argv: Sequence[str], limits: SandboxLimits) -> list[str]:
    """``argv`` behind a bash ``ulimit`` (bash is in every sandbox; -v/-f are in KiB)."""
    bash = shutil.which("bash") or "/bin/bash"
    script = (
        f"ulimit -S -H -u {limits.max_processes} -v {limits.max_memory_mb * 1024} "
        f'-f {limits.max_file_mb * 1024} -c 0 || exit 125; exec "$@"'
    )
    return [bash, "-c", script, "geode-sandbox", *argv]


def count_sandbox_processes(bwrap_pid: int) -> int | None:
    """Processes in the PID namespace of the sandbox started as ``bwrap_pid`` (None: gone).

    Counted from outside by the namespace link of each /proc entry: the kernel applies
    ``RLIMIT_NPROC`` to no process of root, so this count is what holds the limit then.
    """
    try:
        children = Path(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children").read_text().split()
        if not children:
            return None
        target = os.readlink(f"/proc/{children[0]}/ns/pid")
    except OSError:
        return None
    if target == os.readlink("/proc/self/ns/pid"):
        return None  # the init has not entered its namespace yet
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == target:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                continue
    return count


@functools.cache
def probe() -> str | None:
    """Why no sandbox can run here, or None when it works. Cached for the process."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap is not installed"
    with tempfile.TemporaryDirectory(prefix="geode-bwrap-probe-") as tmp:
        try:
            done = subprocess.run(
                bwrap_argv(bwrap, Path(tmp), ["/bin/sh", "-c", "touch probe"]),
                capture_output=True,
                timeout=30,
                check=False,
                env={},
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bwrap could not start: {exc}"
        if done.returncode != 0 or not (Path(tmp) / "probe").exists():
            err = done.stderr.decode("utf-8", "replace").strip()
            return f"bwrap cannot create a sandbox here: {err or f'exit {done.returncode}'}"
    return None


def reset_probe() -> None:
    """Forget the cached probe and /etc scan (tests, or after installing bubblewrap)."""
    probe.cache_clear()
    _masked_system_entries.cache_clear()
    _supports.cache_clear()


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def diagnose(reason: str) -> str:
    """How to fix the failure ``reason`` of :func:`probe` on this machine (for ``doctor``)."""
    if "not installed" in reason:
        return "install bubblewrap: apt-get install bubblewrap (dnf install bubblewrap)"
    fixes: list[str] = []
    if _read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        fixes.append("enable user namespaces: sysctl -w kernel.unprivileged_userns_clone=1")
    if _read("/proc/sys/user/max_user_namespaces") == "0":
        fixes.append("allow user namespaces: sysctl -w user.max_user_namespaces=15000")
    if _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        fixes.append(
            "AppArmor restricts user namespaces (Ubuntu 24.04+): add an AppArmor profile "
            "granting 'userns' to /usr/bin/bwrap, or sysctl -w "
            "kernel.apparmor_restrict_unprivileged_userns=0"
        )
    low = reason.lower()
    if "netlink" in low or "address family" in low or "rtnetlink" in low:
        fixes.append(
            "bwrap sets up the sandbox's loopback over AF_NETLINK: under systemd add AF_NETLINK "
            "to the unit's RestrictAddressFamilies= (deploy/ ships it), then restart"
        )
    if "operation not permitted" in low and not fixes:
        fixes.append(
            "namespaces are refused (container without user namespaces, seccomp, or systemd "
            "RestrictNamespaces=): allow user, mount, pid, net, ipc, uts namespaces for "
            "GEODE's service (e.g. RestrictNamespaces=no, or run the container with "
            "--security-opt seccomp=unconfined / a profile allowing clone(CLONE_NEWUSER))"
        )
    if not fixes:
        fixes.append("run bwrap --unshare-all --ro-bind / / true by hand to see why it fails")
    return "; ".join(fixes)
