"""GPU samples from a remote box's NVIDIA dcgm-exporter (`http://node:9400/metrics`).

For a box cockpit does not run on: the exporter's Prometheus text carries per-GPU memory,
power, utilization and temperature. It lists no processes, so samples from here have none.
"""

from __future__ import annotations

import logging
import math
import re
import time

import httpx

from cockpit.core.errors import CockpitError
from cockpit.core.secrets import redact_text
from cockpit.telemetry.base import NA_NAME, GpuSample, GpuSource, unknown_sample

log = logging.getLogger(__name__)

MIB = 2**20
MAX_REPLY_BYTES = 16 * MIB  # an exporter's page for 8 GPUs is ~100 KiB; more is not an exporter

# dcgm-exporter metric -> what it measures here. Memory is in MiB, power in W, temperature in C.
_METRICS = {
    "DCGM_FI_DEV_FB_USED": "used",
    "DCGM_FI_DEV_FB_FREE": "free",
    "DCGM_FI_DEV_FB_RESERVED": "reserved",
    "DCGM_FI_DEV_FB_TOTAL": "total",
    "DCGM_FI_DEV_POWER_USAGE": "power",
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": "enforced_limit",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "limit",
    "DCGM_FI_DEV_GPU_UTIL": "utilization",
    "DCGM_FI_DEV_GPU_TEMP": "temperature",
}

# DCGM writes "blank" (no reading) as huge sentinels: 0x7ffffff0 and up for integers, 2**47
# for doubles. No real reading here comes near either.
_DCGM_BLANK = 0x7FFFFFF0

_SERIES = re.compile(
    r"(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+-?\d+)?\s*"
)
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_ESCAPE = re.compile(r"\\(.)")


def parse_dcgm(text: str, host_label: str | None = None) -> list[GpuSample]:
    """One sample per GPU in dcgm-exporter's Prometheus text, by the `gpu` label's index.

    Lines that are not a DCGM GPU series (comments, other metrics, garbage) are skipped.
    `host_label` keeps the series whose `Hostname` is that host; without it the first host
    seen is the box, so an endpoint that aggregates several nodes never mixes their GPU 0s.
    The first series of a metric for a GPU wins (MIG instances repeat the GPU's labels).
    """
    host = host_label
    readings: dict[int, dict[str, float | None]] = {}
    names: dict[int, str] = {}
    for line in text.splitlines():
        series = _parse_series(line.strip())
        if series is None:
            continue
        metric, labels, value = series
        series_host = labels.get("Hostname")
        if host is None and series_host:
            host = series_host
        if series_host and series_host != host:
            continue
        try:
            index = int(labels["gpu"])
        except (KeyError, ValueError):
            continue
        readings.setdefault(index, {}).setdefault(_METRICS[metric], value)
        if labels.get("modelName"):
            names.setdefault(index, labels["modelName"])
    now = time.time()
    return [_sample(index, names.get(index, NA_NAME), readings[index], now) for index in sorted(readings)]


def _parse_series(line: str) -> tuple[str, dict[str, str], float | None] | None:
    """(metric, labels, value) of a DCGM GPU series line, or None for any other line."""
    if not line.startswith("DCGM_FI_DEV_"):
        return None
    match = _SERIES.fullmatch(line)
    if match is None or match["name"] not in _METRICS:
        return None
    labels = _parse_labels(match["labels"] or "")
    if labels is None:
        return None
    try:
        number = float(match["value"])
    except ValueError:
        return None
    value = number if math.isfinite(number) and number < _DCGM_BLANK else None
    return match["name"], labels, value


def _parse_labels(text: str) -> dict[str, str] | None:
    """`a="1",b="x\\"y"` as a dict, or None when the text is not a label set."""
    labels: dict[str, str] = {}
    position = 0
    while position < len(text.rstrip()):
        match = _LABEL.match(text, position)
        if match is None:
            return None
        labels[match[1]] = _ESCAPE.sub(lambda m: "\n" if m[1] == "n" else m[1], match[2])
        position = match.end()
    return labels


def _sample(index: int, name: str, readings: dict[str, float | None], now: float) -> GpuSample:
    used, free = _bytes(readings.get("used")), _bytes(readings.get("free"))
    total = _bytes(readings.get("total"))
    if total is None and used is not None and free is not None:
        total = used + free + (_bytes(readings.get("reserved")) or 0)
    limit = readings.get("enforced_limit")
    return GpuSample(
        index=index,
        name=name,
        memory_used=used,
        memory_total=total,
        power_w=readings.get("power"),
        power_limit_w=limit if limit is not None else readings.get("limit"),
        utilization=readings.get("utilization"),
        temperature_c=readings.get("temperature"),
        time=now,
    )


def _bytes(mib: float | None) -> int | None:
    return None if mib is None else round(mib * MIB)


class PrometheusSource(GpuSource):
    """Samples from one dcgm-exporter endpoint, one GET per sample.

    An endpoint that does not answer (down, refused, slow, an error page) keeps the GPUs it
    last listed on screen with every reading n/a: the box did not lose its GPUs, we lost sight.
    """

    def __init__(
        self,
        url: str,
        timeout: float = 2.0,
        client: httpx.Client | None = None,
        host_label: str | None = None,
        warn: bool = True,
    ) -> None:
        """``warn``: log a warning when the endpoint stops answering (a live screen); a one-shot
        reader says ``last_error`` itself instead."""
        self.warn = warn
        self.url = check_url(url)
        self.name = redact_text(url)  # shown on screen and in errors: never a password
        self.timeout = timeout
        self.host_label = host_label
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=timeout)
        self._known: list[tuple[int, str]] = []
        self._reachable = True
        self.last_error: str | None = None  # why the last sample came back empty, in words

    def sample(self) -> list[GpuSample]:
        try:
            samples = parse_dcgm(self._page(), self.host_label)
        except Exception as error:  # httpx.HTTPError, a bad encoding, anything: n/a, not a crash
            return self._unreachable(_words(error))
        if not samples:
            return self._unreachable("the reply holds no DCGM GPU metrics")
        if not self._reachable:
            log.info("%s answers again", self.url)
            self._reachable = True
        self._known = [(sample.index, sample.name) for sample in samples]
        return samples

    def _page(self) -> str:
        """The exporter's page, read up to MAX_REPLY_BYTES: an endpoint that streams without end
        is cut there, not read into memory whole."""
        with self._client.stream("GET", self.url, timeout=self.timeout) as response:
            response.raise_for_status()
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_REPLY_BYTES:
                    raise ValueError(
                        f"the reply is over {MAX_REPLY_BYTES // MIB} MiB: not a dcgm-exporter page"
                    )
        return body.decode("utf-8", errors="replace")

    def _unreachable(self, why: str) -> list[GpuSample]:
        self.last_error = why
        if self._reachable and self.warn:  # once per outage, not once per poll
            log.warning("%s: no GPU metrics (%s); showing n/a", self.name, why)
            self._reachable = False
        now = time.time()
        return [unknown_sample(index, name, now) for index, name in self._known]

    def close(self) -> None:
        if self._owns_client:
            self._client.close()


def check_url(url: str) -> str:
    """An exporter's address, refused in one line before any request when it is not an http(s) URL."""
    try:
        parsed = httpx.URL(url)
        ok = parsed.scheme in ("http", "https") and bool(parsed.host)
    except (httpx.InvalidURL, TypeError, ValueError) as err:
        raise CockpitError(
            f"{redact_text(url)[:200]} is not a URL ({err}): give one like http://node1:9400/metrics"
        ) from None
    if not ok:
        raise CockpitError(
            f"{redact_text(url)[:200]} is not an http(s) URL: give one like http://node1:9400/metrics"
        )
    return url


def _words(error: BaseException) -> str:
    """An error in a few words: httpx's own sentence, without the exception's class and repr."""
    text = str(error) or type(error).__name__
    return redact_text(text.splitlines()[0] if text.strip() else type(error).__name__)[:200]
