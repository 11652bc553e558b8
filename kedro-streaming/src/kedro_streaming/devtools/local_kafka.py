"""``LocalKafka``: a real single-node Kafka broker's process, from start to
stop; and a running broker through Kafka's Admin API (kafka-python)::

    with LocalKafka() as kafka:  # a temporary data folder, unless data_dir
        print(kafka.bootstrap_servers)  # "127.0.0.1:PORT"
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from kafka.admin import KafkaAdminClient, ScramMechanism, UserScramCredentialUpsertion
from kafka.errors import KafkaError

from kedro_streaming.devtools.broker_config import (
    NODE_ID,
    Listeners,
    choose_ports,
    format_storage_once,
    jaas_plain_config,
    server_properties,
    write_config,
)
from kedro_streaming.devtools.broker_jars import (
    KAFKA_VERSION,
    BrokerError,
    java_command,
    java_executable,
    resolve_classpath,
)
from kedro_streaming.devtools.certificates import ensure_tls_files
from kedro_streaming.devtools.processes import HOST, tail, terminate


class LocalKafka:
    """A real single-node Kafka broker+controller (KRaft combined mode).

    Ports (None: a free one) are chosen at :meth:`start`. A ``data_dir`` is
    formatted once and kept, as a compose volume; without one, data lives in a
    temporary folder :meth:`stop` removes. ``sasl_users`` (``{name:
    password}``) adds a SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-512);
    ``tls``, the SSL, MTLS and SASL_SSL listeners, with a private CA in
    ``tls_dir`` (default ``<data_dir>/tls``); ``extra_tls_listeners``, SSL
    listeners with PEM key stores of their own. Unless ``detach``, the broker
    stops when this process exits.
    """

    def __init__(
        self,
        *,
        version: str = KAFKA_VERSION,
        port: int | None = None,
        sasl_users: Mapping[str, str] | None = None,
        sasl_port: int | None = None,
        heap: str = "512m",
        extra_properties: Mapping[str, object] | None = None,
        data_dir: os.PathLike | None = None,
        detach: bool = False,
        stop_grace: float = 20.0,
        tls: bool = False,
        tls_ports: Mapping[str, int] | None = None,
        extra_tls_listeners: Mapping[str, os.PathLike] | None = None,
        tls_dir: os.PathLike | None = None,
        jvm_options: tuple[str, ...] = (),
    ) -> None:
        if sasl_users is not None:
            if not sasl_users:
                raise ValueError("sasl_users must contain at least one user")
            jaas_plain_config(sasl_users)  # validate names/passwords early
        self.version = version
        self._requested_ports = (port, sasl_port)
        self._requested_tls_ports = dict(tls_ports or {})
        self.listeners: Listeners | None = None
        self.sasl_users = dict(sasl_users) if sasl_users else None
        self.tls = tls or bool(extra_tls_listeners)
        self.extra_tls_listeners = {
            name.upper(): Path(path).resolve()
            for name, path in (extra_tls_listeners or {}).items()
        }
        self._requested_tls_dir = Path(tls_dir).resolve() if tls_dir else None
        self.tls_dir: Path | None = None
        self.heap = heap
        self.jvm_options = tuple(jvm_options)
        self.extra_properties = dict(extra_properties or {})
        self.keep_data = data_dir is not None
        self.detach = detach
        self.stop_grace = stop_grace
        # The broker runs in its data folder: every path it is given must be absolute.
        self.data_dir: Path | None = Path(data_dir).resolve() if data_dir else None
        self.log_path: Path | None = None
        self.properties_path: Path | None = None
        self.cluster_id: str | None = None
        self._proc: subprocess.Popen | None = None

    @property
    def port(self) -> int | None:
        """The PLAINTEXT listener's port (the requested one before start)."""
        return self.listeners.port if self.listeners else self._requested_ports[0]

    @property
    def sasl_port(self) -> int | None:
        return self.listeners.sasl_port if self.listeners else self._requested_ports[1]

    @property
    def tls_ports(self) -> dict[str, int]:
        return self.listeners.tls_ports if self.listeners else {}

    @property
    def bootstrap_servers(self) -> str:
        """PLAINTEXT bootstrap address, e.g. ``"127.0.0.1:53412"``."""
        if self.port is None:
            raise BrokerError("broker not started")
        return f"{HOST}:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str | None:
        """SASL_PLAINTEXT bootstrap address, or None without ``sasl_users``."""
        if not self.sasl_users or self.sasl_port is None:
            return None
        return f"{HOST}:{self.sasl_port}"

    @property
    def tls_bootstrap_servers(self) -> dict[str, str]:
        """The TLS listeners' addresses by name, at the certificate's name."""
        return {name: f"localhost:{port}" for name, port in self.tls_ports.items()}

    @property
    def pid(self) -> int | None:
        """Broker JVM process id, or None when not running."""
        return self._proc.pid if self._proc else None

    def is_running(self) -> bool:
        """True while the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 90) -> LocalKafka:
        """Resolves jars (cached), formats storage, launches and awaits the
        broker; ``timeout`` does not count the jars' resolution."""
        if self._proc is not None:
            raise BrokerError("broker already started")
        libs = resolve_classpath(self.version)
        java = java_executable()
        deadline = time.monotonic() + timeout
        try:
            self._prepare(libs, java, deadline)
            self._launch(libs, java)
            await_ready(
                self._proc,
                self.bootstrap_servers,
                deadline=deadline,
                log_path=self.log_path,
                sasl_servers=self.sasl_bootstrap_servers,
                sasl_users=self.sasl_users,
            )
        except BaseException as exc:
            # Never leave a half-started JVM or temp dir behind, even on Ctrl-C.
            tail = self.log_tail(60)
            self._stop_quietly()
            if isinstance(exc, Exception) and not isinstance(exc, BrokerError):
                raise BrokerError(
                    f"Kafka start failed: {exc!r}; broker log tail:\n{tail}"
                ) from exc
            raise
        return self

    def stop(self, grace: float | None = None) -> None:
        """Stops the broker (SIGKILL after ``grace`` seconds) and removes a
        temporary data folder; safe to call more than once."""
        grace = self.stop_grace if grace is None else grace
        proc, self._proc = self._proc, None
        with contextlib.suppress(Exception):
            atexit.unregister(self._stop_quietly)
        if proc is not None:
            terminate(proc.pid, grace, proc=proc)
        if self.data_dir is not None and not self.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def log_tail(self, lines: int = 50) -> str:
        """Returns the last ``lines`` lines of the broker log ('' if none yet)."""
        return tail(self.log_path, lines) if self.log_path else ""

    def first_error(self) -> str:
        """The broker log's first ERROR line and its cause (see :func:`first_error`)."""
        return first_error(self.log_path)

    def __enter__(self) -> LocalKafka:
        return self.start() if self._proc is None else self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _stop_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self.stop(grace=5)

    def _prepare(self, libs: Path, java: str, deadline: float) -> None:
        if self.keep_data:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        else:
            self.data_dir = Path(tempfile.mkdtemp(prefix="kafka-local-"))
        self.log_path = self.data_dir / "broker.log"
        self.log_path.write_text("")  # this start's log only: log_tail shows its errors
        tls_names = ["SSL", "MTLS", "SASL_SSL"] if self.tls else []
        self.listeners = choose_ports(
            *self._requested_ports,
            self._requested_tls_ports,
            tls_names + list(self.extra_tls_listeners),
            sasl=bool(self.sasl_users),
        )
        if self.tls:
            self.tls_dir = ensure_tls_files(
                self._requested_tls_dir or self.data_dir / "tls"
            )
        props = server_properties(
            self.listeners,
            log_dirs=self.data_dir / "kraft-logs",
            sasl_users=self.sasl_users,
            tls_dir=self.tls_dir,
            extra_tls_listeners=self.extra_tls_listeners,
            extra=self.extra_properties,
        )
        self.properties_path = write_config(self.data_dir, self.version, props)
        storage_tool = self._java_command(libs, java, "kafka.tools.StorageTool")
        self.cluster_id = format_storage_once(
            self.data_dir, storage_tool, self.log_path, deadline
        )

    def _java_command(self, libs: Path, java: str, main_class: str) -> list[str]:
        log_config = self.data_dir / "log4j2.properties"
        options = self.jvm_options
        return java_command(
            java,
            libs,
            main_class,
            heap=self.heap,
            log_config=log_config,
            options=options,
        )

    def _launch(self, libs: Path, java: str) -> None:
        command = self._java_command(libs, java, "kafka.Kafka")
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [*command, str(self.properties_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                # Own session: a terminal Ctrl-C reaches only Python, which then
                # stops the broker gracefully; also required for --detach.
                start_new_session=True,
            )
        if not self.detach:
            atexit.register(self._stop_quietly)


def probe(bootstrap_servers: str, timeout: float = 3.0, **security) -> dict:
    """kafka-python's description of the cluster at ``bootstrap_servers``;
    KafkaError when it does not answer, refuses the credentials, or has not
    registered the broker yet."""
    millis = int(timeout * 1000)
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap_servers,
        bootstrap_timeout_ms=millis,
        request_timeout_ms=millis,
        **security,
    )
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    # A KRaft broker lists itself only once it is unfenced, ready for clients.
    if not any(broker["broker_id"] == NODE_ID for broker in cluster["brokers"]):
        raise KafkaError("the broker is not registered yet")
    return cluster


def create_scram_users(
    bootstrap_servers: str, users: Mapping[str, str], **security
) -> None:
    """Registers (or updates) ``users``' SCRAM-SHA-512 logins on a running
    broker, through the Admin API: no password on a command line."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, **security)
    try:
        errors = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    user, ScramMechanism.SCRAM_SHA_512, password, iterations=8192
                )
                for user, password in users.items()
            ]
        )
    finally:
        admin.close()
    failed = {user: error for user, error in errors.items() if error}
    if failed:
        raise BrokerError(f"SCRAM users not created: {failed}")


def await_ready(
    proc: subprocess.Popen,
    servers: str,
    *,
    deadline: float,
    log_path: Path,
    sasl_servers: str | None = None,
    sasl_users: Mapping[str, str] | None = None,
) -> None:
    """Waits until the broker ``proc`` runs answers on ``servers`` (and takes
    ``sasl_users``' logins on ``sasl_servers``); else BrokerError, with its
    log's end."""
    last_error: BaseException | None = None
    while True:
        code = proc.poll()
        if code is not None:
            cause = first_error(log_path)
            raise BrokerError(
                f"Kafka broker exited with code {code} during startup"
                + (f": {cause}" if cause else "")
                + f". Log {log_path} ends with:\n{tail(log_path, 60)}"
            )
        try:
            probe(servers, timeout=2.0)
            if sasl_users:
                _probe_logins(servers, sasl_servers, sasl_users)
            return
        except (KafkaError, OSError) as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise BrokerError(
                f"Kafka broker not ready on {servers} within the timeout "
                f"(last probe error: {last_error!r}). Log {log_path} ends with:\n"
                f"{tail(log_path, 60)}"
            )
        time.sleep(0.25)


def _probe_logins(servers: str, sasl_servers: str, users: Mapping[str, str]) -> None:
    # Again at each start: a changed password takes effect.
    create_scram_users(servers, users)
    # A real login: the listener takes these very credentials.
    user, password = next(iter(users.items()))
    probe(
        sasl_servers,
        timeout=2.0,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username=user,
        sasl_plain_password=password,
    )


def first_error(log_path: Path | None) -> str:
    """The broker log's first ERROR line and the exception line under it: why
    a start failed, which the shutdown lines push out of the log's tail."""
    found: list[str] = []
    try:
        with open(log_path or "", encoding="utf-8", errors="replace") as log:
            for line in log:
                if found and (line.startswith("[") or len(found) == 2):
                    break  # the next record: the error and its cause are in
                if found or " ERROR " in line:
                    found.append(line.split(" ERROR ", 1)[-1].strip())
    except OSError:
        pass
    return " ".join(found)[:500]
