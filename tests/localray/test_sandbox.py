"""A local Pod's sandbox, without a control plane: its mounts at paths the host lacks (under an
existing directory, and under `/` itself), read-only where told, a file at a `subPath`-like
target, its own /tmp, and a command run later in its namespaces; the host is left as it was."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_operator.localray.sandbox import enter_argv, probe_argv, run_argv

pytestmark = pytest.mark.skipif(
    subprocess.run(probe_argv(), capture_output=True, check=False).returncode != 0,
    reason="this machine allows no unprivileged user namespaces",
)


@pytest.fixture
def names() -> Iterator[tuple[str, str]]:
    """(a path under /home, a path under /): neither exists on the host."""
    home, top = f"/home/sandbox-{uuid.uuid4().hex[:8]}", f"/sandbox-{uuid.uuid4().hex[:8]}"
    yield home, top
    assert not Path(home).exists(), f"{home} was made on the host"
    assert not Path(top).exists(), f"{top} was made on the host"


def write_spec(tmp_path: Path, argv: list[str], mounts: list[dict[str, object]], cwd: str) -> Path:
    (tmp_path / "tmp").mkdir()
    spec = tmp_path / "sandbox.json"
    spec.write_text(
        json.dumps(
            {
                "argv": argv,
                "working_dir": cwd,
                "private_tmp": str(tmp_path / "tmp"),
                "mounts": mounts,
            }
        )
    )
    return spec


def test_volumes_show_at_their_mount_paths_read_only_where_told(
    tmp_path: Path, names: tuple[str, str]
) -> None:
    home, top = names
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "code.py").write_text("print('hi')")
    single = tmp_path / "key"
    single.write_text("one key")
    script = (
        f"pwd; cat {home}/samples/code.py; echo; cat {top}/etc/key; echo; "
        f"touch {home}/samples/new 2>&1; touch {top}/written && echo wrote; "
        "touch /tmp/private && echo private"
    )
    spec = write_spec(
        tmp_path,
        ["sh", "-c", script],
        [
            {"source": str(volume), "target": f"{home}/samples", "read_only": True},
            {"source": str(single), "target": f"{top}/etc/key", "read_only": True},
            {"tmpfs_size": 1024 * 1024, "target": f"{top}/shm"},
        ],
        cwd=home,
    )
    ran = subprocess.run(run_argv(spec), capture_output=True, text=True, timeout=30, check=False)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[:3] == [home, "print('hi')", "one key"]
    assert "Read-only file system" in lines[3]
    assert lines[4:] == ["wrote", "private"]
    assert not (volume / "new").exists()
    assert (tmp_path / "tmp" / "private").exists()


def test_a_command_entered_later_sees_the_pods_view(tmp_path: Path, names: tuple[str, str]) -> None:
    home, _ = names
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "data").write_text("shared")
    spec = write_spec(
        tmp_path,
        ["sleep", "30"],
        [{"source": str(volume), "target": f"{home}/volume"}],
        cwd="/",
    )
    pod = subprocess.Popen(run_argv(spec))
    try:
        wait_for_exec(pod.pid, "sleep")
        entered = subprocess.run(
            enter_argv(pod.pid, home, ["sh", "-c", "pwd; cat volume/data; echo; echo $GREETING"]),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={"PATH": os.environ["PATH"], "GREETING": "hello"},
        )
    finally:
        pod.kill()
        pod.wait()
    assert entered.returncode == 0, entered.stderr
    assert entered.stdout.splitlines() == [home, "shared", "hello"]


def test_a_missing_source_is_refused_with_its_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    spec = write_spec(tmp_path, ["true"], [{"source": str(missing), "target": "/x"}], cwd="/")
    ran = subprocess.run(run_argv(spec), capture_output=True, text=True, timeout=30, check=False)
    assert ran.returncode == 126
    assert f"volume source {missing}: No such file or directory" in ran.stderr


def wait_for_exec(pid: int, program: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == program.encode():
            return
        time.sleep(0.02)
    raise AssertionError(f"{pid} never became {program}")
