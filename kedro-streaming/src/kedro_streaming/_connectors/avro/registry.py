"""A schema registry through Confluent's REST API (Confluent's, Confluent
Cloud's, Apicurio's ``/apis/ccompat/v7``, Karapace, Redpanda's), and Python's
framing and decoding of its records. Each failure is a StreamingConfigError
naming the address (never a password); a registry, or its proxy, saying "not
now" (HTTP 429, 502, 503, 504, a reset) is asked again for a few seconds."""

from __future__ import annotations

import base64
import http.client
import io
import json
import struct
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from kedro_streaming.errors import StreamingConfigError
from kedro_streaming.problems import closest

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# Answers that say "not now" rather than "no". A refused connection is not
# one: nothing listens there, and saying so at once beats waiting.
_TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})
_TRANSIENT_ERRORS = (ConnectionResetError, http.client.RemoteDisconnected)
# 3.75 s in all: time for a rate limit to let a request through, or a proxy to
# find its registry again.
_RETRY_WAITS = (0.25, 0.5, 1.0, 2.0)
_FRAME_BYTES = 5  # Confluent's wire format: magic byte 0, a 4-byte schema id
_NOT_THE_ROOT = (
    "{url} is not a schema registry's API root: it has no /subjects. Give the "
    "root of Confluent's API (Apicurio serves it under /apis/ccompat/v7)"
)


@dataclass(frozen=True)
class RegisteredSchema:
    """One version of a subject: its global ``id`` (the one framed in each
    message), its ``version`` within the subject, and its Avro text."""

    subject: str
    version: int
    id: int
    schema: str


class SchemaRegistry:
    """A registry's Confluent-compatible API, with HTTP basic authentication
    (also given as user:password@ in the address).

    Example:
        ```python
        from kedro_streaming import SchemaRegistry

        registry = SchemaRegistry("http://localhost:8081/apis/ccompat/v7")
        latest = registry.version("taxi-trips-value")  # a RegisteredSchema
        registry.schema(latest.id) == latest.schema  # True: its Avro text
        ```
    """

    def __init__(
        self,
        url: str,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 10,
    ) -> None:
        parts = urllib.parse.urlsplit(str(url).rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise StreamingConfigError(
                f"schema_registry_url {self._shown(parts)!r} is not an http(s) "
                "address: give the registry's API root, e.g. "
                "http://localhost:8081/apis/ccompat/v7 (Apicurio) or "
                "https://psrc-xxxx.region.aws.confluent.cloud (Confluent Cloud)"
            )
        username = username or (urllib.parse.unquote(parts.username or "") or None)
        password = password or (urllib.parse.unquote(parts.password or "") or None)
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        self.url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
        """The API root, without credentials: safe to show."""
        self.username = username
        self._authorization = (
            "Basic "
            + base64.b64encode(f"{username}:{password or ''}".encode()).decode()
            if username
            else None
        )
        self.timeout = timeout
        self.retry_waits = _RETRY_WAITS
        """Seconds to wait before each new try of a request answered with a
        transient failure; ``()`` tries once."""

    @staticmethod
    def _shown(parts: urllib.parse.SplitResult) -> str:
        netloc = parts.hostname or ""
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))

    def version(self, subject: str, version: int | str = "latest") -> RegisteredSchema:
        """A version of ``subject`` (``"latest"`` or its number)."""
        answer = self._get(
            f"/subjects/{_quote(subject)}/versions/{_quote(str(version))}",
            missing=f"has no version {version} of subject '{subject}'",
        )
        return RegisteredSchema(
            subject, int(answer["version"]), int(answer["id"]), answer["schema"]
        )

    def versions(self, subject: str) -> list[RegisteredSchema]:
        """Every version of ``subject``, oldest first."""
        try:
            numbers = self._get(f"/subjects/{_quote(subject)}/versions", missing=None)
        except _Missing:
            subjects = self._get_or_none("/subjects")
            if subjects is None:
                raise StreamingConfigError(_NOT_THE_ROOT.format(url=self.url)) from None
            close = closest(subject, subjects, many=3)
            raise StreamingConfigError(
                f"the schema registry at {self.url} has no subject '{subject}'"
                + (f" (it has {', '.join(map(repr, close))})" if close else "")
                + ": register its schema first, or check the subject's name "
                "(<topic>-value by default)"
            ) from None
        return [self.version(subject, number) for number in sorted(numbers)]

    def subjects(self) -> list[str]:
        """Every subject's name (and a check that the registry answers)."""
        subjects = self._get_or_none("/subjects")
        if subjects is None:
            raise StreamingConfigError(_NOT_THE_ROOT.format(url=self.url))
        return list(subjects)

    def _get_or_none(self, path: str) -> Any:
        try:
            return self._get(path, missing=None)
        except _Missing:
            return None

    def schema(self, schema_id: int) -> str | None:
        """The schema registered with ``schema_id``; None if there is none."""
        try:
            return self._get(f"/schemas/ids/{int(schema_id)}", missing=None)["schema"]
        except _Missing:
            return None

    def register(self, subject: str, schema: str) -> int:
        """Registers ``schema`` under ``subject`` (or finds it there): its id;
        one the subject's compatibility refuses fails, naming the ways out."""
        try:
            answer = self._request(
                "POST",
                f"/subjects/{_quote(subject)}/versions",
                {"schema": schema},
                refused=f"refused a new version of subject '{subject}'",
            )
        except _Incompatible as error:
            raise StreamingConfigError(
                f"{str(error).rstrip('.')}. {self._rule_shown(subject)}: make "
                "a change it allows (a new field with a default), write to a new "
                "subject, or change the subject's rule (PUT "
                f"{self.url}/config/{_quote(subject)} with "
                '{"compatibility": "NONE"} lets any change through)'
            ) from None
        return int(answer["id"])

    def compatibility(self, subject: str | None = None) -> str:
        """The registry's global compatibility, or the one ``subject`` is
        checked against (its own, else the global one)."""
        if subject is None:
            return str(self._get("/config", missing=None)["compatibilityLevel"])
        answer = self._get(
            f"/config/{_quote(subject)}?defaultToGlobal=true",
            missing=f"has no compatibility for subject '{subject}'",
        )
        return str(answer["compatibilityLevel"])

    def _rule_shown(self, subject: str) -> str:
        try:
            return f"The subject's compatibility is {self.compatibility(subject)}"
        except (StreamingConfigError, _Missing, KeyError, TypeError):
            return "The subject's compatibility refuses it"

    def set_compatibility(self, subject: str, level: str) -> None:
        """Sets ``subject``'s compatibility (BACKWARD, FORWARD, FULL, NONE...)."""
        self._request(
            "PUT",
            f"/config/{_quote(subject)}",
            {"compatibility": level},
            refused=f"refused compatibility {level} for subject '{subject}'",
        )

    def _get(self, path: str, missing: str | None) -> Any:
        return self._request("GET", path, None, missing=missing)

    def _request(
        self,
        method: str,
        path: str,
        body: dict | None,
        *,
        missing: str | None = None,
        refused: str = "refused the request",
    ) -> Any:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Accept": _CONTENT_TYPE, "Content-Type": _CONTENT_TYPE},
        )
        if self._authorization:
            request.add_header("Authorization", self._authorization)
        tries = _Tries()
        for wait in (*self.retry_waits, None):
            tries.count += 1
            asked_to_wait = 0.0
            try:
                return self._send(request)
            except urllib.error.HTTPError as error:
                if error.code not in _TRANSIENT_STATUSES or wait is None:
                    raise self._refusal(error, missing, refused, tries) from None
                asked_to_wait = _retry_after(error)
                error.close()
            except (urllib.error.URLError, OSError, ValueError) as error:
                reason = getattr(error, "reason", error)
                if not isinstance(reason, _TRANSIENT_ERRORS) or wait is None:
                    raise StreamingConfigError(
                        f"the schema registry at {self.url} did not answer "
                        f"({reason}{tries}): check schema_registry_url, and that "
                        "the registry runs (`kedro streams registry start` runs "
                        "one here)"
                    ) from None
            time.sleep(max(wait, asked_to_wait))
        raise AssertionError("unreachable")  # the last try returns or raises

    def _send(self, request: urllib.request.Request) -> Any:
        with urllib.request.urlopen(request, timeout=self.timeout) as answer:
            return json.loads(answer.read() or b"null")

    def _refusal(
        self,
        error: urllib.error.HTTPError,
        missing: str | None,
        refused: str,
        tries: _Tries,
    ) -> Exception:
        if error.code in (401, 403):
            who = f"user '{self.username}'" if self.username else "no credentials"
            return StreamingConfigError(
                f"the schema registry at {self.url} refused {who} (HTTP "
                f"{error.code}): check the registry's username and password "
                "in the credentials entry"
            )
        if error.code == 404 and missing is not None:
            return StreamingConfigError(f"the schema registry at {self.url} {missing}")
        if error.code == 404:
            return _Missing()
        kind = _Incompatible if error.code == 409 else StreamingConfigError
        return kind(
            f"the schema registry at {self.url} {refused} (HTTP {error.code}"
            f"{tries}): {_message(error)}"
        )


def avro_framer(registry: SchemaRegistry, subject: str, schema: str):
    """Registers ``schema`` under ``subject``; returns a function that frames
    a record (a dict) in Confluent's wire format, for producers in Python.

    Example:
        ```python
        import json

        from kedro_streaming import SchemaRegistry, avro_framer

        registry = SchemaRegistry("http://localhost:8081/apis/ccompat/v7")
        fields = [{"name": "device", "type": "string"}]
        schema = json.dumps({"type": "record", "name": "Reading", "fields": fields})
        frame = avro_framer(registry, "sensor-readings-value", schema)
        frame({"device": "d1"})  # b"\\x00" + the 4-byte id + the Avro body
        ```
    """
    import fastavro  # noqa: PLC0415 - producers only

    schema_id = registry.register(subject, schema)
    parsed = fastavro.parse_schema(json.loads(schema))
    header = b"\x00" + struct.pack(">I", schema_id)

    def frame(record: dict) -> bytes:
        body = io.BytesIO()
        fastavro.schemaless_writer(body, parsed, record)
        return header + body.getvalue()

    return frame


def avro_reader(registry: SchemaRegistry):
    """Returns a function that decodes a message in Confluent's wire format
    into its record, with the writer schema its id names (looked up once), for
    consumers in Python; a message that does not decode is a ValueError.

    Example:
        ```python
        from kedro_streaming import SchemaRegistry, avro_reader, kafka_consumer

        read = avro_reader(SchemaRegistry("http://localhost:8081/apis/ccompat/v7"))
        for message in kafka_consumer("taxi-trips", env="kafka"):
            print(read(message.value))  # a dict, by the schema its id names
        ```
    """
    import fastavro  # noqa: PLC0415 - consumers only

    parsed: dict[int, Any] = {}

    def read(message: bytes) -> Any:
        if len(message) < _FRAME_BYTES:
            raise ValueError(
                f"truncated frame: {len(message)} bytes, Confluent's wire format "
                "has at least 5"
            )
        if message[0] != 0:
            raise ValueError(
                f"not in Confluent's wire format: magic byte {message[0]}, 0 expected"
            )
        schema_id = int.from_bytes(message[1:_FRAME_BYTES], "big")
        if schema_id not in parsed:
            schema = registry.schema(schema_id)
            if schema is None:
                raise ValueError(
                    f"unknown schema id {schema_id}: the schema registry at "
                    f"{registry.url} has none"
                )
            parsed[schema_id] = fastavro.parse_schema(json.loads(schema))
        body = io.BytesIO(message[_FRAME_BYTES:])
        try:
            record = fastavro.schemaless_reader(body, parsed[schema_id])
        except Exception:  # noqa: BLE001 - fastavro fails in many ways on bad bytes
            record, body = None, None
        if body is None or body.tell() != len(message) - _FRAME_BYTES:
            raise ValueError(f"does not decode with its writer schema (id {schema_id})")
        return record

    return read


class _Missing(Exception):
    """An id the registry does not have (HTTP 404)."""


class _Incompatible(StreamingConfigError):
    """A schema the subject's compatibility refuses (HTTP 409)."""


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _message(error: urllib.error.HTTPError) -> str:
    """The registry's own words: its JSON ``message``, else the body's start;
    the status's name for an HTML page (a proxy's, usually)."""
    text = error.read().decode("utf-8", errors="replace")
    try:
        return str(json.loads(text).get("message") or text)[:500]
    except (ValueError, AttributeError):
        if text.lstrip()[:1] == "<" or not text.strip():
            return str(error.reason)
        return text[:500]


def _retry_after(error: urllib.error.HTTPError) -> float:
    """The seconds a 429 or 503's ``Retry-After`` asks for (at most 10)."""
    try:
        return min(float(error.headers.get("Retry-After", 0)), 10.0)
    except (TypeError, ValueError):  # an HTTP date: the usual waits do
        return 0.0


class _Tries:
    """How many times a request was sent, and since when: ", 5 tries in 3.8 s"."""

    def __init__(self) -> None:
        self.count = 0
        self.started = time.monotonic()

    def __str__(self) -> str:
        if self.count < 2:
            return ""
        return f", {self.count} tries in {time.monotonic() - self.started:.1f} s"
