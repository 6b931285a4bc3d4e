"""Private PostgreSQL and MariaDB servers for the restart scenario: started by the test
in a temporary directory on a free port, stopped and started at will, removed at the
end. The shared servers on 5432/3306 are never touched."""
from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from typing import Optional

from tests.support import wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class PrivateServer:
    url: str
    port: int

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="caravel-faults-")
        os.chmod(self.root, 0o755)
        self.port = _free_port()

    def remove(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class PrivatePostgres(PrivateServer):
    @staticmethod
    def missing() -> Optional[str]:
        if not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
            return "PostgreSQL server binaries (initdb, pg_ctl) are not installed"
        if not shutil.which("runuser"):
            return "runuser is needed to run PostgreSQL as the postgres user"
        return None

    def __init__(self) -> None:
        super().__init__()
        self.bin = sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1]
        self.data = os.path.join(self.root, "data")
        os.mkdir(self.data)
        shutil.chown(self.data, "postgres", "postgres")
        self._as_postgres("initdb", "-D", self.data, "-A", "trust", "-U", "postgres",
                          "--no-sync")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, tool: str, *args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(self.bin, tool),
                        *args], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, cwd=self.root)

    def start(self) -> None:
        self._as_postgres("pg_ctl", "-D", self.data, "-w", "-l",
                          os.path.join(self.data, "log"), "-o",
                          f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 "
                          f"-c fsync=off", "start")

    def stop(self) -> None:
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._as_postgres("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")


class PrivateMariaDB(PrivateServer):
    @staticmethod
    def missing() -> Optional[str]:
        if not (shutil.which("mariadb-install-db") and os.path.exists("/usr/sbin/mariadbd")):
            return "MariaDB server binaries (mariadb-install-db, mariadbd) are not installed"
        return None

    def __init__(self) -> None:
        super().__init__()
        self.data = os.path.join(self.root, "data")
        self.process: Optional[subprocess.Popen] = None
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={self.data}",
                        "--user=root", "--auth-root-authentication-method=normal",
                        "--skip-test-db"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
        self.url = f"mysql://root@127.0.0.1:{self.port}/mysql"

    def start(self) -> None:
        log = open(os.path.join(self.root, "mariadbd.log"), "ab")
        self.process = subprocess.Popen(
            ["/usr/sbin/mariadbd", "--no-defaults", f"--datadir={self.data}",
             f"--port={self.port}", f"--socket={os.path.join(self.root, 'sock')}",
             "--bind-address=127.0.0.1", "--user=root", "--skip-grant-tables",
             "--skip-log-bin", "--innodb-buffer-pool-size=32M",
             "--innodb-flush-log-at-trx-commit=2",
             f"--pid-file={os.path.join(self.root, 'pid')}"],
            stdout=subprocess.DEVNULL, stderr=log)
        log.close()
        wait_for(lambda: _answers(self.port) or self.process.poll() is not None,
                 timeout=60, message="the private MariaDB to listen")
        assert self.process.poll() is None, "the private MariaDB did not start"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
