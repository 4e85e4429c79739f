"""A single-node Slurm on this machine, for the tests that run the sweep through Slurm.

Debian's ``slurmctld``, ``slurmd`` and ``munge`` run on localhost only, with accounting
off (``accounting_storage/none``) and ``proctrack/linuxproc`` (no cgroups needed). What
makes this work here, found the hard way:

* the job step strips ``SLURM_CONF``, so the configuration must be ``/etc/slurm/slurm.conf``;
  it is written only when absent (or written by an earlier run of this module, see
  ``MARKER``) and removed again on stop, so a real cluster's file is never touched;
* ``munged`` runs as the ``munge`` user and needs ``/run/munge`` to exist first;
* ``MinJobAge`` stays at 300 s: the executor plugin falls back to ``sacct`` (which hangs
  with accounting off) when it is below 3 x ``--slurm-init-seconds-before-status-checks``;
* PID 1 reaps slowly in containers, so a stopped daemon is judged by ``/proc/PID/stat``
  (gone or zombie), not by ``kill -0``.

Every daemon is started here as a child with ``-D`` (foreground) and stopped by its PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CONF = Path("/etc/slurm/slurm.conf")
MARKER = "# written by commsweep's tests (tests/slurm_cluster.py); removed when they stop"
DAEMONS = ("slurmctld", "slurmd", "munged", "munge", "unmunge", "sbatch", "squeue", "sinfo", "srun", "scancel")
PARTITION = "commsweep"
# Ports of this test cluster (Slurm's defaults + 100, to keep clear of a real one).
CTLD_PORT = 6917
SLURMD_PORT = 6918


def unavailable() -> str | None:
    """Why a test Slurm cannot start here, or None when it can."""
    missing = [d for d in DAEMONS if shutil.which(d, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None]
    if missing:
        hint = "" if os.geteuid() == 0 else " (and not root, so they cannot be installed or started)"
        return (
            f"Slurm test cluster: {', '.join(missing)} not found{hint}; install Debian's "
            "slurmctld slurmd slurm-client munge (as .ci/run does)"
        )
    if os.geteuid() != 0:
        return "Slurm test cluster: the daemons and /etc/slurm/slurm.conf need root"
    if CONF.exists() and MARKER not in CONF.read_text(errors="replace"):
        return f"Slurm test cluster: {CONF} belongs to a real Slurm installation; not touching it"
    for port in (CTLD_PORT, SLURMD_PORT):
        if _port_in_use(port):
            return f"Slurm test cluster: port {port} is in use (another slurmctld/slurmd running?)"
    return None


def _port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _sbin(name: str) -> str:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    assert found, name
    return found


def alive(pid: int) -> bool:
    """Whether a process still runs: present in /proc and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # The state follows the command name in parentheses, which may itself hold spaces.
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def stop_pid(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM, wait until gone (by /proc), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not alive(pid):
                return
            time.sleep(0.1)


def _real_memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024 * 9 // 10
    return 1024


@dataclass
class SlurmCluster:
    """A running test cluster: its folder, the daemons' PIDs and its partition."""

    root: Path
    node: str
    cpus: int
    pids: dict[str, int] = field(default_factory=dict)
    procs: list[subprocess.Popen] = field(default_factory=list)
    wrote_conf: bool = False
    partition: str = PARTITION

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else f"({path} missing)"

    def diagnostics(self) -> str:
        return "\n".join(f"--- {n}.log ---\n{self.log(n)[-3000:]}" for n in ("munged", "slurmctld", "slurmd"))


def _conf_text(root: Path, node: str, cpus: int) -> str:
    return f"""{MARKER}
ClusterName=commsweep-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={CTLD_PORT}
SlurmdPort={SLURMD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={_real_memory_mb()} State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _munge_works() -> bool:
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=5, check=True).stdout
        subprocess.run(["unmunge"], input=cred, capture_output=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def _wait(what: str, check, timeout: float, cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise RuntimeError(f"Slurm test cluster: {what} not ready after {timeout:.0f} s\n{cluster.diagnostics()}")


def start(timeout: float = 60.0) -> SlurmCluster:
    """Start munged (unless one already answers), slurmctld and slurmd; wait for the node."""
    node = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    root = Path(tempfile.mkdtemp(prefix="commsweep-slurm-"))
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    cluster = SlurmCluster(root=root, node=node, cpus=cpus)
    try:
        CONF.parent.mkdir(parents=True, exist_ok=True)
        tmp = CONF.with_name(CONF.name + ".commsweep-tmp")
        tmp.write_text(_conf_text(root, node, cpus))
        os.replace(tmp, CONF)
        cluster.wrote_conf = True

        if not _munge_works():
            run_dir = Path("/run/munge")
            run_dir.mkdir(parents=True, exist_ok=True)
            shutil.chown(run_dir, "munge", "munge")
            run_dir.chmod(0o755)
            if not Path("/etc/munge/munge.key").exists():
                subprocess.run([_sbin("mungekey"), "--create"], check=True, user="munge", group="munge")
            with open(root / "munged.log", "wb") as log:  # the daemon keeps its own copy
                proc = subprocess.Popen(
                    [_sbin("munged"), "--foreground"],
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True, user="munge", group="munge",
                )
            cluster.procs.append(proc)
            cluster.pids["munged"] = proc.pid
            _wait("munged", _munge_works, timeout, cluster)

        for name in ("slurmctld", "slurmd"):
            argv = [_sbin(name), "-D", "-f", str(CONF)]
            if name == "slurmctld":
                argv.append("-i")  # ignore any state from an earlier run (there is none: fresh StateSaveLocation)
            with open(root / f"{name}-stdout.log", "wb") as log:
                proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            cluster.procs.append(proc)
            cluster.pids[name] = proc.pid

        def node_idle() -> bool:
            for name, pid in cluster.pids.items():
                if not alive(pid):
                    raise RuntimeError(f"Slurm test cluster: {name} exited\n{cluster.diagnostics()}")
            out = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%t", "-n", node], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            return out in ("idle", "mix", "alloc")

        _wait(f"node {node}", node_idle, timeout, cluster)
        return cluster
    except BaseException:
        stop(cluster)
        raise


def stop(cluster: SlurmCluster) -> None:
    """Cancel every job, stop the daemons this module started (by PID), remove the config."""
    if cluster.pids.get("slurmctld") and alive(cluster.pids["slurmctld"]):
        subprocess.run(["scancel", "--full", f"--partition={cluster.partition}"], capture_output=True, timeout=10)
    # Job steps run under slurmd (slurmstepd); they end with the jobs cancelled above.
    for name in ("slurmd", "slurmctld", "munged"):
        pid = cluster.pids.get(name)
        if pid is not None:
            stop_pid(pid)
    for proc in cluster.procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    if cluster.wrote_conf:
        try:
            if MARKER in CONF.read_text(errors="replace"):
                CONF.unlink()
        except FileNotFoundError:
            pass
    shutil.rmtree(cluster.root, ignore_errors=True)
