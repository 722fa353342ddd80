"""A real single-node Slurm cluster (munged, slurmctld, slurmd) started in a temporary folder for the tests.

Nothing here is a stand-in: the daemons are Debian's `munge`, `slurmctld` and `slurmd`, configured by a
slurm.conf written into the folder (this machine as the only node, state and spool in the folder,
free ports). Clients find the cluster through `SLURM_CONF`, which `env()` sets. Every daemon is a
child of the test process, run in the foreground, and `stop()` ends each of them by its own pid.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "srun", "sinfo")
START_TIMEOUT_S = 60


class ClusterUnavailable(Exception):
    """The cluster could not be started here; the message says why (the tests skip with it)."""


def missing_programs() -> list[str]:
    return [
        name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None and not Path("/usr/sbin", name).exists()
    ]


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    def __init__(self, root: Path, cpus: int = 2) -> None:
        self.root = Path(root)
        self.cpus = cpus
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self._processes: dict[str, subprocess.Popen] = {}

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        self._start_munge()
        self._write_conf()
        self._spawn("slurmctld", [_program("slurmctld"), "-D", "-f", str(self.conf)])
        self._spawn("slurmd", [_program("slurmd"), "-D", "-f", str(self.conf), "-N", self.node])
        self._wait_until("the node to be idle", self._node_idle)

    def stop(self) -> None:
        """Cancel what is queued, then end every daemon this cluster started (slurmd first), each by its pid."""
        if self._processes.get("slurmctld") is not None and self._processes["slurmctld"].poll() is None:
            self._cancel_jobs()
        for name in ("slurmd", "slurmctld", "munged"):
            process = self._processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)
        # A job step's slurmstepd outlives slurmd when it cannot report back; it carries our SLURM_CONF.
        for pid in self._descendants_by_conf():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def log_tail(self, lines: int = 15) -> str:
        parts = []
        for log in sorted(self.root.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(parts)

    # --- internals

    def _start_munge(self) -> None:
        folder = self.munge_socket.parent
        folder.mkdir(parents=True, mode=0o700)
        key = folder / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self._spawn(
            "munged",
            [
                _program("munged"),
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={folder / 'munged.pid'}",
                f"--seed-file={folder / 'munged.seed'}",
                f"--log-file={self.root / 'munged.log'}",
            ],
        )
        self._wait_until("munged's socket", self.munge_socket.exists)

    def _write_conf(self) -> None:
        user = getpass.getuser()
        (self.root / "state").mkdir()
        (self.root / "spool").mkdir()
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=roundofftest",
                    f"SlurmctldHost={self.node}(127.0.0.1)",
                    f"SlurmctldPort={_free_port()}",
                    f"SlurmdPort={_free_port()}",
                    f"SlurmUser={user}",
                    f"SlurmdUser={user}",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={self.munge_socket}",
                    f"StateSaveLocation={self.root / 'state'}",
                    f"SlurmdSpoolDir={self.root / 'spool'}",
                    f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
                    f"SlurmdPidFile={self.root / 'slurmd.pid'}",
                    f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
                    f"SlurmdLogFile={self.root / 'slurmd.log'}",
                    "SlurmctldDebug=info",
                    "SlurmdDebug=info",
                    # No cgroups inside a container: track processes by their parent pid, bind nothing.
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "MpiDefault=none",
                    "SchedulerType=sched/backfill",
                    "SelectType=select/cons_tres",
                    # one CPU per task by default, so two array tasks run at once on 2 CPUs
                    "SelectTypeParameters=CR_CPU",
                    "ReturnToService=2",
                    "SlurmdTimeout=30",
                    "InactiveLimit=0",
                    "KillWait=5",
                    "MinJobAge=60",
                    f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN",
                    f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )

    def _spawn(self, name: str, command: list[str]) -> None:
        # The daemon writes to its own copy of the descriptor; ours closes once it has started.
        with open(self.root / f"{name}.stdout.log", "wb") as log:
            self._processes[name] = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=self.env(), cwd=self.root
            )
        log.close()

    def _cancel_jobs(self) -> None:
        try:
            subprocess.run(
                ["scancel", "--full", "--user", getpass.getuser()], env=self.env(), capture_output=True, timeout=15
            )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self._queue():
                time.sleep(0.5)
        except (OSError, subprocess.SubprocessError):
            pass  # the daemons are stopped below either way

    def _queue(self) -> str:
        out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, env=self.env(), timeout=10)
        return out.stdout.strip()

    def _descendants_by_conf(self) -> list[int]:
        """Processes other than the daemons and this one whose environment names this cluster's slurm.conf."""
        marker = f"SLURM_CONF={self.conf}".encode()
        own = {os.getpid(), *(p.pid for p in self._processes.values())}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in own:
                continue
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def _node_idle(self) -> bool:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, env=self.env(), timeout=10
        )
        return out.returncode == 0 and out.stdout.strip().startswith("idle")

    def _wait_until(self, what: str, ready) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            dead = [name for name, p in self._processes.items() if p.poll() is not None]
            if dead:
                raise ClusterUnavailable(f"{', '.join(dead)} exited while waiting for {what}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ClusterUnavailable(f"timed out after {START_TIMEOUT_S} s waiting for {what}:\n{self.log_tail()}")
            time.sleep(0.5)
