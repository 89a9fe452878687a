"""A local Pod's own view of the filesystem: a user and mount namespace per process, its volumes
bind-mounted at their mount paths, then its command exec'd. Stands alone (the standard library
only): it runs as `python -I sandbox.py SPEC`, so a Pod's PYTHONPATH cannot change what it imports.

No root is needed where the kernel lets users create user namespaces: the caller's uid and gid
map to themselves (root maps every id, so root keeps its reach). Nothing is created on the host's
filesystem outside the Pod's directory:
- `/tmp` is the Pod's own (a directory of its Pod directory, as a container has its own /tmp);
- a mount path whose parent does not exist (`/home/ray/samples` on a machine without
  `/home/ray`) is made in a copy of its nearest existing ancestor: a tmpfs over that ancestor
  holding bind mounts of each of its entries, so the ancestor reads as before and the new
  directories exist only in this namespace. Where that ancestor is `/` itself, the copy becomes
  the namespace's root (built in the Pod's /tmp, moved onto `/`, entered with chroot).

Sources are opened before anything is mounted (in the new namespace: a mount of another cannot be
bound) and bound from `/proc/self/fd/N`, so a mount over `/tmp` or `/home` never hides a source
that lives below it.

`spec` file (JSON, written by the agent, holding no secret): `argv`, `working_dir`,
`private_tmp`, and `mounts` in the order to mount: `{"source", "target", "read_only"}` binds,
`{"tmpfs_size", "target"}` a tmpfs (bytes, or null for the kernel's default).
Commands: `run SPEC` (start a Pod's process), `enter PID DIR -- ARGV` (run a command in a running
Pod's namespaces: `kubectl exec`), `network PORTS -- ARGV` (run a command on a loopback of its own
where the Pod's ports answer: `kubectl exec` into a local Redis Pod), `probe` (whether this
machine allows it at all).

`network`: a Pod whose server listens on an address of its own here (a local Redis on 127.x.y.z)
is reached by its own clients at `127.0.0.1:<Pod port>`, as in a Pod's network namespace
(`redis-cli` with no `-h`). The command gets a user and network namespace of its own, whose
loopback has a listener on each Pod port; this process stays on the machine's network (it forked
the command) and joins each connection to the Pod port to where that port listens here. Those
listeners are made in the new namespace and handed back over a socket pair, so nothing on the
machine's own loopback changes and two such commands never collide.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import stat
import struct
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 1
MAX_NETWORK_PORTS = 16
COPY_BYTES = 64 << 10
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_MOVE = 8192
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
# statvfs flag → the mount flag a remount must keep (a user namespace may not clear a flag
# its parent set: such flags are locked).
_KEPT_FLAGS = {
    os.ST_NOSUID: MS_NOSUID,
    os.ST_NODEV: MS_NODEV,
    os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: 1024,
    os.ST_NODIRATIME: 2048,
    os.ST_RELATIME: 1 << 21,
}
MAX_MIRRORED_ENTRIES = 4096
"""Entries of a directory copied to make a mount path in it (`/etc` has a few hundred)."""

_libc = ctypes.CDLL(None, use_errno=True)


class SandboxError(Exception):
    """The Pod's view cannot be made; the message says which path and why."""


def run_argv(spec_path: Path, *, python: str = sys.executable) -> list[str]:
    """The command that starts a Pod's process in namespaces of its own, as `spec_path` says."""
    return [python, "-I", __file__, "run", str(spec_path)]


def enter_argv(
    pid: int, working_dir: str, command: Sequence[str], *, python: str = sys.executable
) -> list[str]:
    """The command that runs `command` in the user and mount namespaces of process `pid` (a
    running Pod's), in `working_dir`, with the environment it is started with."""
    return [python, "-I", __file__, "enter", str(pid), working_dir, "--", *command]


def network_argv(
    ports: Mapping[int, tuple[str, int]], command: Sequence[str], *, python: str = sys.executable
) -> list[str]:
    """The command that runs `command` on a loopback of its own where `127.0.0.1:<Pod port>`
    reaches the local address each Pod port (a key of `ports`) listens on."""
    spec = ",".join(f"{pod_port}={host}:{port}" for pod_port, (host, port) in sorted(ports.items()))
    return [python, "-I", __file__, "network", spec, "--", *command]


def probe_argv(*, python: str = sys.executable) -> list[str]:
    """The command that exits 0 where user and mount namespaces can be made, else says why."""
    return [python, "-I", __file__, "probe"]


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(code)}") from OSError(code, os.strerror(code))


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    result = _libc.mount(
        None if source is None else source.encode(),
        target.encode(),
        None if fstype is None else fstype.encode(),
        ctypes.c_ulong(flags),
        data.encode() or None,
    )
    _check(result, f"mount {source or fstype} on {target}")


def enter_own_namespaces(*, network: bool = False) -> None:
    """Move this process into a new user namespace (the caller's ids mapped to themselves) and a
    new mount namespace whose mounts do not propagate back (with `network`: a network namespace
    of its own too, its loopback up)."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWUSER | CLONE_NEWNS | (CLONE_NEWNET if network else 0)
    _check(_libc.unshare(flags), "unshare(user, mount)" + (", network" if network else ""))
    # Root maps every id where it may (so it keeps its reach over others' files); else, and
    # for anyone else, only the caller's own id (setgroups denied, as the kernel requires then).
    every_uid = uid == 0 and _write_map("uid_map", "0 0 4294967295")
    if not every_uid:
        _write_map("uid_map", f"{uid} {uid} 1", required=True)
    if not (every_uid and _write_map("gid_map", "0 0 4294967295")):
        _write_map("setgroups", "deny", required=True)
        _write_map("gid_map", f"{gid} {gid} 1", required=True)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    if network:
        _loopback_up()


def _loopback_up() -> None:
    """Bring up `lo` of this process's (new) network namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as control:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(control, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(control, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def _write_map(name: str, line: str, *, required: bool = False) -> bool:
    descriptor = os.open(f"/proc/self/{name}", os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(descriptor, f"{line}\n".encode())
    except PermissionError as error:
        if required:
            raise SandboxError(f"writing /proc/self/{name}: {error.strerror}") from error
        return False
    finally:
        os.close(descriptor)
    return True


class MountNamespace:
    """Mounts made in this process's own mount namespace, and what in it is ours to write to."""

    def __init__(self) -> None:
        self._own_trees: list[str] = []
        """Directories whose whole tree is the Pod's (its private /tmp)."""
        self._own_dirs: set[str] = set()
        """Directories of the namespace's own (tmpfs copies, directories made in them): only
        their direct entries are ours, not what a bind mount in them shows."""

    def own_tree(self, directory: str) -> None:
        self._own_trees.append(directory.rstrip("/") or "/")

    def bind(self, source_fd: int, target: str, *, read_only: bool) -> None:
        """Bind what `source_fd` names at `target`, made first if missing."""
        is_dir = stat.S_ISDIR(os.fstat(source_fd).st_mode)
        self.ensure(target, is_dir=is_dir)
        _mount(f"/proc/self/fd/{source_fd}", target, None, MS_BIND | MS_REC)
        if read_only:
            kept = os.statvfs(target).f_flag
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY
            flags |= sum(flag for st, flag in _KEPT_FLAGS.items() if kept & st)
            _mount(None, target, None, flags)

    def tmpfs(self, target: str, *, size: object) -> None:
        """A tmpfs at `target` (an emptyDir of `medium: Memory`), of at most `size` bytes."""
        self.ensure(target, is_dir=True)
        limit = f",size={size}" if isinstance(size, int) and size > 0 else ""
        _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777{limit}")

    def ensure(self, path: str, *, is_dir: bool) -> None:
        """Make `path` exist (a directory or an empty file) without writing to the host."""
        path = os.path.normpath(path)
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            found = None
        if found is not None:
            if stat.S_ISDIR(found.st_mode) != is_dir:
                kind = "directory" if is_dir else "file"
                raise SandboxError(f"{path} exists and is not a {kind}")
            return
        ancestor = _nearest_existing(path)
        if not self._is_own(ancestor):
            if ancestor == "/":
                self._new_root()
            else:
                self._copy(ancestor)
        missing = []
        current = os.path.dirname(path)
        while current != ancestor:
            missing.append(current)
            current = os.path.dirname(current)
        for directory in reversed(missing):
            os.mkdir(directory)
            self._own_dirs.add(directory)
        if is_dir:
            os.mkdir(path)
            self._own_dirs.add(path)
        else:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))

    def _is_own(self, path: str) -> bool:
        return path in self._own_dirs or any(
            path == tree or path.startswith(tree + "/") for tree in self._own_trees
        )

    def _copy(self, directory: str) -> None:
        """Cover `directory` with a tmpfs holding bind mounts of each of its entries."""
        entries = _entries(directory)
        try:
            mode = os.stat(directory).st_mode & 0o7777
            _mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode:o}")
            self._own_dirs.add(directory)
            self._fill(directory, entries)
        finally:
            _close(entries)

    def _new_root(self) -> None:
        """Make `/` a tmpfs holding bind mounts of the old root's entries: built in the Pod's
        /tmp, moved onto `/`, entered with chroot (the old root stays beneath, unreachable)."""
        entries = _entries("/")
        staging = "/tmp/.pod-root"
        try:
            os.mkdir(staging, 0o755)
            _mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755")
            self._fill(staging, entries)
        finally:
            _close(entries)
        os.chdir(staging)
        _mount(".", "/", None, MS_MOVE)
        os.chroot(".")
        os.chdir("/")
        self._own_dirs = {"/"}

    def _fill(self, directory: str, entries: list[tuple[str, int | str]]) -> None:
        for name, source in entries:
            target = os.path.join(directory, name)
            if isinstance(source, str):
                os.symlink(source, target)
                continue
            is_dir = stat.S_ISDIR(os.fstat(source).st_mode)
            if is_dir:
                os.mkdir(target)
            else:
                os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
            _mount(f"/proc/self/fd/{source}", target, None, MS_BIND | MS_REC)


def _entries(directory: str) -> list[tuple[str, int | str]]:
    """Each entry of `directory`: an O_PATH descriptor, or a symlink's target."""
    entries: list[tuple[str, int | str]] = []
    try:
        with os.scandir(directory) as listing:
            for entry in listing:
                if len(entries) >= MAX_MIRRORED_ENTRIES:
                    raise SandboxError(
                        f"{directory} has more than {MAX_MIRRORED_ENTRIES} entries to copy"
                    )
                if entry.is_symlink():
                    entries.append((entry.name, os.readlink(entry.path)))
                else:
                    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
                    entries.append((entry.name, os.open(entry.path, flags)))
    except BaseException:
        _close(entries)
        raise
    return entries


def _close(entries: list[tuple[str, int | str]]) -> None:
    for _, source in entries:
        if isinstance(source, int):
            os.close(source)


def _nearest_existing(path: str) -> str:
    current = os.path.dirname(path.rstrip("/")) or "/"
    while not os.path.lexists(current):
        current = os.path.dirname(current) or "/"
    if not os.path.isdir(current):
        raise SandboxError(f"{current} (on the way to {path}) is not a directory")
    return current


def run(spec: dict[str, object]) -> None:
    """Make the Pod's view as `spec` says, then exec its command (does not return)."""
    mounts = [dict(mount) for mount in spec.get("mounts") or []]  # type: ignore[attr-defined]
    enter_own_namespaces()
    # Opened in the new namespace (a mount of another one cannot be bound) before anything is
    # mounted in it.
    sources = [
        _open_source(str(mount["source"])) if "source" in mount else None for mount in mounts
    ]
    private_tmp = _open_source(str(spec["private_tmp"]))
    namespace = MountNamespace()
    namespace.bind(private_tmp, "/tmp", read_only=False)
    namespace.own_tree("/tmp")
    for mount, source in zip(mounts, sources, strict=True):
        target = str(mount["target"])
        if source is None:
            namespace.tmpfs(target, size=mount.get("tmpfs_size"))
            continue
        namespace.bind(source, target, read_only=bool(mount.get("read_only")))
        os.close(source)
    working_dir = str(spec["working_dir"])
    namespace.ensure(working_dir, is_dir=True)
    os.chdir(working_dir)
    argv = [str(word) for word in spec["argv"]]  # type: ignore[attr-defined]
    os.execvp(argv[0], argv)


def _open_source(path: str) -> int:
    try:
        return os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as error:
        raise SandboxError(f"volume source {path}: {error.strerror}") from error


def enter(pid: int, working_dir: str, argv: Sequence[str]) -> None:
    """Join process `pid`'s user then mount namespace, then exec `argv` in `working_dir`."""
    user = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    mount = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    _check(_libc.setns(user, CLONE_NEWUSER), f"setns(user of {pid})")
    _check(_libc.setns(mount, CLONE_NEWNS), f"setns(mount of {pid})")
    os.chdir(working_dir)
    try:
        os.execvp(argv[0], list(argv))
    except FileNotFoundError:
        # As a container runtime says it: the bare errno would not name the command.
        raise SandboxError(f'exec: "{argv[0]}": executable file not found in $PATH') from None


def parse_ports(text: str) -> dict[int, tuple[str, int]]:
    """`POD_PORT=HOST:PORT,...` (what `network_argv` writes) as Pod port → (host, port)."""
    ports: dict[int, tuple[str, int]] = {}
    for item in filter(None, text.split(",")):
        pod_port, _, target = item.partition("=")
        host, _, port = target.rpartition(":")
        ports[int(pod_port)] = (host, int(port))
    if len(ports) > MAX_NETWORK_PORTS:
        raise SandboxError(f"more than {MAX_NETWORK_PORTS} Pod ports")
    return ports


def network(ports: Mapping[int, tuple[str, int]], argv: Sequence[str]) -> int:
    """Fork `argv` into a network namespace of its own with a listener on `127.0.0.1:<Pod port>`
    for each of `ports`; forward what connects there until it ends; its exit code."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = os.fork()
    if child == 0:  # pragma: no cover - replaced by exec
        ours.close()
        try:
            enter_own_namespaces(network=True)
            listeners = [_listener(pod_port) for pod_port in ports]
            socket.send_fds(theirs, [b"ok"], [listener.fileno() for listener in listeners])
            theirs.close()
            for listener in listeners:
                listener.close()
            os.execvp(argv[0], list(argv))
        except FileNotFoundError:
            print(
                f'local Pod sandbox: exec: "{argv[0]}": executable file not found in $PATH',
                file=sys.stderr,
            )
            os._exit(127)
        except (SandboxError, OSError) as error:
            print(f"local Pod sandbox: {error}", file=sys.stderr)
            os._exit(126)
    theirs.close()
    _, fds, _, _ = socket.recv_fds(ours, 16, MAX_NETWORK_PORTS)
    ours.close()
    for fd, target in zip(fds, ports.values(), strict=False):
        listener = socket.socket(fileno=fd)
        threading.Thread(target=_accept, args=(listener, target), daemon=True).start()
    # The command's own end is ours; a signal to this process goes to its group as well.
    signal.signal(signal.SIGTERM, lambda *_: os.kill(child, signal.SIGTERM))
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def _listener(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", port))
    listener.listen(16)
    return listener


def _accept(listener: socket.socket, target: tuple[str, int]) -> None:
    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.create_connection(target, timeout=10)
        except OSError:
            client.close()
            continue
        upstream.settimeout(None)
        threading.Thread(target=_join, args=(client, upstream), daemon=True).start()


def _join(client: socket.socket, upstream: socket.socket) -> None:
    """Copy both ways until both ends finished, then close both."""
    back = threading.Thread(target=_copy, args=(upstream, client), daemon=True)
    back.start()
    _copy(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    """Copy until `source` ends, then end `sink`'s writing half."""
    with contextlib.suppress(OSError):
        while data := source.recv(COPY_BYTES):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def main(args: Sequence[str]) -> int:
    try:
        if args[:1] == ["run"] and len(args) == 2:
            run(json.loads(Path(args[1]).read_text()))
        elif args[:1] == ["enter"] and len(args) > 4 and args[3] == "--":
            enter(int(args[1]), args[2], args[4:])
        elif args[:1] == ["network"] and len(args) > 3 and args[2] == "--":
            return network(parse_ports(args[1]), args[3:])
        elif args == ["probe"]:
            enter_own_namespaces()
            return 0
        else:
            print("usage: sandbox.py run SPEC | enter PID DIR -- ARGV | probe", file=sys.stderr)
            return 2
    except (SandboxError, OSError) as error:
        print(f"local Pod sandbox: {error}", file=sys.stderr)
        not_found = isinstance(error, FileNotFoundError) or "not found in $PATH" in str(error)
        return 127 if not_found else 126
    return 0  # not reached: run and enter exec


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
