"""The scaling benchmark's moving parts on this machine: CPU-limited cgroups, replicas
(lifeguard as PID 1 of a PID namespace and a network namespace of their own, the test
server under it), HAProxy in front of them, and the CloudWatch emulator. Everything
listens on 127.0.0.1 only: each replica on the loopback of its own network namespace,
which HAProxy enters to reach it, the rest on the host's.
"""
import ctypes
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Every replica has a network namespace of its own, as every ECS task with awsvpc and
# every Kubernetes pod has: the same ports in each, and lifeguard's quiet rule sees
# only its own replica's connections.
APP_PORT, LG_PORT = 8080, 9595
NETNS_DIR = "/var/run/netns"  # where `ip netns add` names them, and HAProxy finds them
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, timeout, interval=0.05):
    """Polls `check` until it returns something true; fails loudly on timeout."""
    deadline = time.time() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.time() >= deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Cgroups:
    """A CPU-limited cgroup per replica, as an ECS task's CPU limit: cgroup v2 (cpu.max)
    where /sys/fs/cgroup is v2, else v1 (cpu.cfs_quota_us, and a cpuacct group beside it
    so that lifeguard reads the replica's own usage, not the machine's)."""

    PERIOD_US = 100_000  # the kernel's and Docker's default CFS period

    def __init__(self, name):
        self.name = name
        base = "/sys/fs/cgroup"
        if os.path.exists(f"{base}/cgroup.controllers"):
            self.version = 2
            self.roots = [f"{base}/{name}"]
            os.makedirs(self.roots[0], exist_ok=True)
            # The cpu controller must be on in every parent's subtree_control.
            for parent in (base, self.roots[0]):
                with open(f"{parent}/cgroup.subtree_control", "w") as f:
                    f.write("+cpu")
        elif os.path.isdir(f"{base}/cpu") and os.path.isdir(f"{base}/cpuacct"):
            self.version = 1
            self.roots = [f"{base}/cpu/{name}", f"{base}/cpuacct/{name}"]
            for r in self.roots:
                os.makedirs(r, exist_ok=True)
        elif os.path.isdir(f"{base}/cpu,cpuacct"):
            self.version = 1
            self.roots = [f"{base}/cpu,cpuacct/{name}"]
            os.makedirs(self.roots[0], exist_ok=True)
        else:
            raise RuntimeError("no cgroup with a cpu controller under /sys/fs/cgroup: cannot limit the replicas' CPU")

    def create(self, child, cores):
        quota = int(cores * self.PERIOD_US)
        dirs = [f"{r}/{child}" for r in self.roots]
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        if self.version == 2:
            with open(f"{dirs[0]}/cpu.max", "w") as f:
                f.write(f"{quota} {self.PERIOD_US}")
        else:
            with open(f"{dirs[0]}/cpu.cfs_period_us", "w") as f:
                f.write(str(self.PERIOD_US))
            with open(f"{dirs[0]}/cpu.cfs_quota_us", "w") as f:
                f.write(str(quota))
        return [f"{d}/cgroup.procs" for d in dirs]

    def remove(self, child):
        for r in self.roots:
            try:
                os.rmdir(f"{r}/{child}")
            except OSError:
                pass

    def remove_all(self):
        for r in self.roots:
            if not os.path.isdir(r):
                continue
            for child in os.listdir(r):
                if os.path.isdir(f"{r}/{child}"):
                    try:
                        os.rmdir(f"{r}/{child}")
                    except OSError:
                        pass
            try:
                os.rmdir(r)
            except OSError:
                pass


class Netns:
    """A named network namespace with its loopback up (`ip netns add`), nothing else:
    HAProxy's `namespace` keyword and the benchmark's own checks enter it, so no
    address but 127.0.0.1 is ever used."""

    def __init__(self, name):
        self.name = name
        self.path = os.path.join(NETNS_DIR, name)
        # One left by a run that was killed: start clean.
        subprocess.run(["ip", "netns", "delete", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for argv in (["ip", "netns", "add", name], ["ip", "-n", name, "link", "set", "lo", "up"]):
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"`{' '.join(argv)}` failed: {done.stdout.strip()}")

    def socket(self):
        """A TCP socket made inside the namespace. setns(2) moves the calling thread
        only, and a socket belongs to the namespace it was made in, so the thread goes
        in, makes it, and comes back at once."""
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(self.path, os.O_RDONLY)
        try:
            if _libc.setns(target, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {self.name}")
            try:
                return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            finally:
                if _libc.setns(own, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back to the benchmark's own network namespace")
        finally:
            os.close(own)
            os.close(target)

    def delete(self):
        subprocess.run(["ip", "netns", "delete", self.name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


class Replica:
    """One task: `nsenter --net=NS unshare --pid --fork --mount-proc lifeguard ... --
    server.py` in a CPU-limited cgroup, in its slot's network namespace. lifeguard
    counts the server's in-flight requests on its port, serves /readyz, and publishes
    to the emulator under the contract's environment."""

    def __init__(self, service, slot, netns, log_dir):
        self.service, self.slot, self.netns = service, slot, netns
        self.app_port, self.lg_port = APP_PORT, LG_PORT
        self.name = f"{service}-{slot}"
        self.log_path = os.path.join(log_dir, f"replica-{self.name}.log")
        self.proc = None
        self.lifeguard_pid = None
        self.launched = self.ready = self.term_sent = self.exited = None
        self.exit_code = None
        self.enabled = False

    def start(self, cgroups, cfg, env, lifeguard, now):
        procs = cgroups.create(self.name, cfg["cpu_cores"])
        argv = [
            "nsenter", f"--net={self.netns.path}",
            "unshare", "--pid", "--fork", "--mount-proc",
            lifeguard,
            "--listen", f"127.0.0.1:{self.lg_port}",
            "--inflight-port", str(self.app_port),
            "--ready-tcp", f"127.0.0.1:{self.app_port}",
            # The project's ECS task definition's drain (examples/ecs/task-definition.json).
            "--drain-delay", cfg["drain_delay"], "--drain-max", cfg["drain_max"], "--grace", cfg["grace"],
            "--",
            sys.executable, os.path.join(HERE, "server.py"),
            "--port", str(self.app_port),
            "--workers", str(cfg["workers"]),
            "--cost-ms", str(cfg["cost_ms"]),
            "--wait-ms", str(cfg["wait_ms"]),
        ]
        # Join the cgroup before unshare runs, so lifeguard and the server start in it.
        joins = "; ".join(f"echo $$ > {p}" for p in procs)
        shell = f"{joins}; exec " + shlex.join(argv)
        self.log = open(self.log_path, "ab")
        self.log_from = self.log.tell()  # a slot's log holds every launch of the slot
        self.proc = subprocess.Popen(
            ["sh", "-c", shell], env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.launched = now
        # lifeguard's pid as the host sees it: unshare's child (nsenter execs unshare).
        kids = wait_for(f"{self.name}'s lifeguard to start", lambda: children(self.proc.pid) or self.proc.poll() is not None, 10)
        if kids is True or self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited at once; see {self.log_path}")
        self.lifeguard_pid = kids[0]

    def readyz(self, timeout=0.5):
        """Whether lifeguard's /readyz answers 200, asked on the replica's own loopback."""
        try:
            with self.netns.socket() as s:
                s.settimeout(timeout)
                s.connect(("127.0.0.1", self.lg_port))
                s.sendall(b"GET /readyz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
                head = s.recv(64)
            return head.startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    def terminate(self, now):
        """The drain: SIGTERM to lifeguard, as ECS stops a task."""
        self.term_sent = now
        try:
            os.kill(self.lifeguard_pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def poll(self):
        if self.proc is None or self.exit_code is not None:
            return self.exit_code
        code = self.proc.poll()
        if code is not None:
            self.exit_code = code
            self.exited = time.time()
            self.log.close()
        return code

    def drain_end(self):
        """lifeguard's line saying how this launch's drain ended (which rule decided),
        from its log; None if there is none."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_from)
                text = f.read().decode(errors="replace")
        except OSError:
            return None
        for line in text.splitlines():
            if "drain over" in line or "drain-max reached" in line or "drain cut short" in line:
                return line.split("lifeguard: ", 1)[-1].strip()
        return None

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if self.lifeguard_pid:
                try:
                    os.kill(self.lifeguard_pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def stop_server(proc, log):
    """Stops a helper server (HAProxy, the emulator): SIGTERM, SIGKILL after 5 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
    log.close()


class HAProxy:
    """HAProxy on 127.0.0.1 with one frontend and backend per service and a slot per
    possible replica, declared in maintenance; each slot's server is 127.0.0.1 in the
    slot's network namespace. A slot is enabled (runtime API) once its
    replica's /readyz answers 200, and put back in maintenance after the replica exits.
    HAProxy's own health check is lifeguard's /readyz (every second, one failure takes a
    server out): at a scale-in lifeguard's drain turns it 503 and HAProxy stops sending
    new requests, before lifeguard relays the SIGTERM to the server."""

    def __init__(self, run_dir, services, check_inter, check_fall, relay_port):
        self.dir = run_dir
        self.sock = os.path.join(run_dir, "haproxy.sock")
        self.ports = {}
        lines = [
            "global",
            f"  stats socket {self.sock} level admin",
            "  maxconn 4096",
            # The replicas' network namespaces, opened when HAProxy starts: a server's
            # `namespace` makes HAProxy connect (and check) from inside it.
            "namespace_list",
            *[f"  namespace {r.netns.name}" for slots in services.values() for r in slots],
            "defaults",
            "  mode http",
            "  timeout connect 2s",
            "  timeout client 60s",
            "  timeout server 60s",
            # No retries, as an ALB: a request a server fails is failed.
            "  retries 0",
            "  option http-server-close",
        ]
        for service, slots in services.items():
            port = free_port()
            self.ports[service] = port
            lines += [
                f"frontend {service}",
                f"  bind 127.0.0.1:{port}",
                f"  default_backend {service}",
                f"backend {service}",
                # An ALB's default algorithm.
                "  balance roundrobin",
                "  option httpchk GET /readyz",
                f"  default-server inter {check_inter} fall {check_fall} rise 1",
            ]
            for r in slots:
                lines.append(f"  server {r.name} 127.0.0.1:{r.app_port} namespace {r.netns.name} check port {r.lg_port} disabled")
        # The way out of each replica's namespace to the CloudWatch emulator, as a
        # task's network reaches CloudWatch: a TCP relay bound on the replica's own
        # loopback at the emulator's port, so one endpoint URL serves everywhere.
        # lifeguard sees it as another listener beside the app (a sidecar's).
        for slots in services.values():
            for r in slots:
                lines += [
                    f"listen relay-{r.netns.name}",
                    "  mode tcp",
                    "  no option http-server-close",
                    f"  bind 127.0.0.1:{relay_port} namespace {r.netns.name}",
                    f"  server emulator 127.0.0.1:{relay_port}",
                ]
        with open(os.path.join(run_dir, "haproxy.cfg"), "w") as f:
            f.write("\n".join(lines) + "\n")
        self.log = open(os.path.join(run_dir, "haproxy.log"), "ab")
        self.proc = subprocess.Popen(
            [shutil.which("haproxy") or "/usr/sbin/haproxy", "-db", "-f", os.path.join(run_dir, "haproxy.cfg")],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        wait_for("HAProxy's runtime API", lambda: self.proc.poll() is not None or self._try("show info"), 15)
        if self.proc.poll() is not None:
            raise RuntimeError(f"haproxy exited; see {run_dir}/haproxy.log")

    def _try(self, command):
        try:
            return self.command(command)
        except OSError:
            return None

    def command(self, command):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(self.sock)
            s.sendall((command + "\n").encode())
            out = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        return out.decode() or "ok"

    def enable(self, replica):
        self.command(f"enable server {replica.service}/{replica.name}")
        replica.enabled = True

    def disable(self, replica):
        self.command(f"disable server {replica.service}/{replica.name}")
        replica.enabled = False

    def stop(self):
        stop_server(self.proc, self.log)


class Emulator:
    """moto behind tests/support/cloudwatch_front.py (the tests' emulator)."""

    def __init__(self, run_dir):
        script = os.path.join(ROOT, "tests", "support", "cloudwatch_front.py")
        self.log = open(os.path.join(run_dir, "emulator.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, script, "--port", "0", "--moto-port", "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log, start_new_session=True, text=True,
        )
        self.port = None
        deadline = time.time() + 90
        while self.port is None:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the CloudWatch emulator did not start; see {run_dir}/emulator.log")
            if line.startswith("ready "):
                self.port = int(line.split()[1])
            if time.time() > deadline:
                raise RuntimeError("the CloudWatch emulator did not start within 90 s")
        self.url = f"http://127.0.0.1:{self.port}"

    def data(self, namespace):
        with urllib.request.urlopen(f"{self.url}/_data?namespace={namespace}", timeout=30) as r:
            return json.load(r)

    def stop(self):
        stop_server(self.proc, self.log)
