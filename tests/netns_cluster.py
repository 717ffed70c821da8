"""Machines that share nothing but a network, for the share-nothing cluster test.

A ``PrivateNetwork`` is a network namespace holding a bridge (the switch) and, per machine, a
network namespace wired to it by a veth pair, with an address of the test's own subnet. No
namespace has a route anywhere else and the host's own namespace gets no interface, so the
machines reach each other and nothing outside. Each process a ``Machine`` starts also runs in
a private mount namespace: the machine's own directory (its "disk") becomes /tmp, with its own
/var/tmp and /dev/shm; the software every machine has installed (the Python and Spark install
the test runs from, this project's tests) stays visible read-only. So a path one machine
writes is never readable by another.

Creating namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN); ``PrivateNetwork.create``
raises ``NamespacesRefused`` with the reason where the sandbox refuses them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

# The mount set-up of a machine's process, run by sh inside its new mount namespace:
#   sh -c SCRIPT sh DISK READ_ONLY_PATH... -- COMMAND...
# Paths under /tmp are exposed again inside the private /tmp at the same place.
_MOUNTS = r"""
set -e
disk="$1"; shift
mkdir -p "$disk/tmp" "$disk/var-tmp"
while [ "$1" != "--" ]; do
    p="$1"; shift
    case "$p" in
        /tmp/*) t="$disk/tmp/${p#/tmp/}"; mkdir -p "$t"; mount --bind "$p" "$t" ;;
        *) t="$p"; mount --bind "$p" "$t" ;;
    esac
    mount -o remount,bind,ro "$t"
done
shift
mount --bind "$disk/var-tmp" /var/tmp
mount -t tmpfs -o size=64m,mode=1777 machine-shm /dev/shm
mount --rbind "$disk/tmp" /tmp
cd /tmp
exec "$@"
"""


class NamespacesRefused(RuntimeError):
    """The sandbox does not let this process create network or mount namespaces."""


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise NamespacesRefused(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")


class Machine:
    """One machine: a network namespace with one address, and a disk (a host directory whose
    tmp/ is the machine's /tmp)."""

    def __init__(self, network: "PrivateNetwork", name: str, address: str, disk: str) -> None:
        self.network, self.name, self.address, self.disk = network, name, address, disk
        self.namespace = f"{network.prefix}-{name}"

    def path(self, inside: str) -> str:
        """Where a path under the machine's /tmp lives on the host (for the test to read)."""
        assert inside.startswith("/tmp/"), inside
        return os.path.join(self.disk, "tmp", inside[len("/tmp/"):])

    def argv(self, command: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, "unshare", "--mount", "--propagation",
                "private", "--", "sh", "-c", _MOUNTS, "sh", self.disk,
                *self.network.read_only, "--", *command]

    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment: this machine's address for Spark, its own home and temp."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp/home",
               "TMPDIR": "/tmp", "LANG": "C.UTF-8", "SPARK_LOCAL_IP": self.address,
               "SPARK_LOCAL_HOSTNAME": self.address}
        if os.environ.get("JAVA_HOME"):
            env["JAVA_HOME"] = os.environ["JAVA_HOME"]
        env.update(extra)
        return env

    def start(self, command: list[str], log: str, env: dict[str, str] | None = None,
              **kwargs) -> subprocess.Popen:
        """Starts command on this machine; its output goes to log (a host path)."""
        out = kwargs.pop("stdout", None) or open(log, "ab")
        return subprocess.Popen(self.argv(command), env=env or self.env(), stdout=out,
                                stderr=kwargs.pop("stderr", subprocess.STDOUT), **kwargs)

    def run(self, command: list[str], env: dict[str, str] | None = None,
            timeout: float = 600) -> str:
        proc = subprocess.run(self.argv(command), env=env or self.env(), capture_output=True,
                              text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.name}: {' '.join(command)} exited with "
                               f"{proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return proc.stdout

    def wait_for_port(self, address: str, port: int, timeout: float = 120,
                      proc: subprocess.Popen | None = None) -> None:
        """Waits until address:port accepts connections from this machine."""
        deadline = time.monotonic() + timeout
        probe = ["ip", "netns", "exec", self.namespace, "bash", "-c",
                 f"exec 3<>/dev/tcp/{address}/{port}"]
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"the process for {address}:{port} exited with "
                                   f"{proc.returncode}")
            if subprocess.run(probe, capture_output=True).returncode == 0:
                return
            time.sleep(0.5)
        raise TimeoutError(f"{address}:{port} did not accept connections from {self.name}")

    def pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.namespace], capture_output=True,
                             text=True).stdout
        return [int(p) for p in out.split()]

    def kill(self) -> list[int]:
        """The machine dies: SIGKILL to every process in its namespace (all started by this
        test), by PID; returns them once they are gone."""
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 30
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.pids():
            raise RuntimeError(f"{self.name}: processes {self.pids()} survived SIGKILL")
        return pids


class PrivateNetwork:
    """A switch namespace with a bridge and machines wired to it (see the module docstring)."""

    def __init__(self, prefix: str, subnet: str, root: str, read_only: list[str]) -> None:
        self.prefix, self.subnet, self.root = prefix, subnet, root
        # installed software every machine sees read-only (no duplicates, parents first)
        paths = sorted({os.path.realpath(p) for p in read_only if os.path.isdir(p)})
        self.read_only = [p for p in paths
                          if not any(p.startswith(q + os.sep) for q in paths if q != p)]
        self.switch = f"{prefix}-switch"
        self.machines: dict[str, Machine] = {}
        self._namespaces: list[str] = []

    def _netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def create(self) -> "PrivateNetwork":
        if os.geteuid() != 0:
            raise NamespacesRefused("network namespaces need root")
        for tool in ("ip", "unshare"):
            if shutil.which(tool) is None:
                raise NamespacesRefused(f"{tool} is not installed")
        self._netns(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        return self

    def machine(self, name: str, host: int) -> Machine:
        """A new machine at <subnet>.<host>, wired to the switch, with an empty disk."""
        m = Machine(self, name, f"{self.subnet}.{host}", os.path.join(self.root, name))
        os.makedirs(os.path.join(m.disk, "tmp"))
        self._netns(m.namespace)
        port = f"p-{name}"[:15]
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
            "netns", m.namespace)
        _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        _ip("-n", m.namespace, "addr", "add", f"{m.address}/24", "dev", "eth0")
        _ip("-n", m.namespace, "link", "set", "eth0", "up")
        proc = subprocess.run(m.argv(["true"]), capture_output=True, text=True)
        if proc.returncode != 0:
            raise NamespacesRefused(f"a private mount namespace failed: {proc.stderr.strip()}")
        self.machines[name] = m
        return m

    def destroy(self) -> None:
        """Kills what still runs in the machines (by PID) and deletes the namespaces."""
        for m in self.machines.values():
            try:
                m.kill()
            except RuntimeError:
                pass
        for name in reversed(self._namespaces):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._namespaces.clear()
