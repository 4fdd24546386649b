"""GPU telemetry: NVML (over a fake binding, as this machine has no GPU), dcgm-exporter over a
real local HTTP server, and the monitor thread over a real simulated box."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from types import SimpleNamespace

import psutil
import pynvml
import pytest
from helpers import free_port

from cockpit.core.errors import CockpitError
from cockpit.core.hardware import GIB
from cockpit.sim.box import GpuLoad, SimBox
from cockpit.telemetry.base import NA_NAME, GpuProcess, GpuSample, GpuSource
from cockpit.telemetry.monitor import Monitor
from cockpit.telemetry.nvml import NvmlSource, driver_present
from cockpit.telemetry.prometheus import MIB, PrometheusSource, parse_dcgm
from cockpit.telemetry.simbox import SimBoxSource

H200 = "NVIDIA H200"


def reaped_child_pid() -> int:
    """The PID of a process that has run, exited and been reaped: nothing lives under it."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# NVML ----------------------------------------------------------------------------------------


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # pynvml picks the subclass: NVMLError_NotSupported, ...


NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


def gpu(**fields: object) -> dict[str, object]:
    """One fake GPU's answers; a field given an exception raises it, a field left out is
    not supported, as on boards without power readings."""
    answers: dict[str, object] = {
        "name": H200,
        "memory": SimpleNamespace(total=141 * GIB, used=10 * GIB, free=131 * GIB),
        "power": 412_345,  # mW
        "limit": 700_000,  # mW
        "utilization": SimpleNamespace(gpu=87, memory=40),
        "temperature": 54,
        "compute": [],
        "graphics": [],
    }
    answers.update(fields)
    return answers


class FakeNvml:
    """Stands in for the pynvml module where there is no NVIDIA hardware; raises pynvml's own errors."""

    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU

    def __init__(self, gpus: list[dict[str, object] | None], init_error: Exception | None = None) -> None:
        self.gpus = gpus  # None: a GPU whose handle cannot be had (fell off the bus)
        self.init_error = init_error
        self.inits = 0
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.gpus):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index] is None:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return index

    def _answer(self, handle: int, field: str) -> object:
        answers = self.gpus[handle]
        if answers is None:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        answer = answers.get(field, nvml_error(NOT_SUPPORTED))
        if isinstance(answer, Exception):
            raise answer
        return answer

    def nvmlDeviceGetName(self, handle: int) -> object:
        return self._answer(handle, "name")

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> object:
        return self._answer(handle, "memory")

    def nvmlDeviceGetPowerUsage(self, handle: int) -> object:
        return self._answer(handle, "power")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> object:
        return self._answer(handle, "limit")

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:
        return self._answer(handle, "utilization")

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> object:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._answer(handle, "temperature")

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> object:
        return self._answer(handle, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> object:
        return self._answer(handle, "graphics")


def process_info(pid: int, used: int | None) -> SimpleNamespace:
    no_mig = 0xFFFFFFFF
    return SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=no_mig, computeInstanceId=no_mig)


def test_nvml_sample_reads_every_field_in_its_unit():
    gone = reaped_child_pid()
    me = os.getpid()
    fake = FakeNvml(
        [
            gpu(
                compute=[process_info(me, 9 * GIB), process_info(gone, GIB)],
                graphics=[process_info(me, 9 * GIB)],  # listed twice by NVML, once here
            ),
            gpu(
                memory=SimpleNamespace(total=141 * GIB, used=0, free=141 * GIB),
                power=75_000,
                utilization=SimpleNamespace(gpu=0, memory=0),
            ),
        ]
    )

    with NvmlSource(nvml=fake) as source:
        gpu0, gpu1 = source.sample()

    assert gpu0.index == 0 and gpu0.name == H200
    assert (gpu0.memory_used, gpu0.memory_total) == (10 * GIB, 141 * GIB)
    assert gpu0.power_w == pytest.approx(412.345) and gpu0.power_limit_w == 700.0
    assert gpu0.utilization == 87.0 and gpu0.temperature_c == 54.0
    assert gpu0.processes == (
        GpuProcess(me, psutil.Process(me).name(), 9 * GIB),
        GpuProcess(gone, "?", GIB),
    )
    assert gpu0.time > 0
    assert gpu1.index == 1 and gpu1.memory_used == 0 and gpu1.power_w == 75.0 and gpu1.processes == ()
    assert fake.shutdowns == 1


def test_nvml_failing_fields_read_none_and_a_lost_gpu_keeps_its_slot():
    fake = FakeNvml(
        [
            gpu(power=nvml_error(NOT_SUPPORTED), limit=nvml_error(NOT_SUPPORTED)),  # no power sensor
            gpu(
                compute=nvml_error(pynvml.NVML_ERROR_NO_PERMISSION),  # a container cannot list processes
                graphics=nvml_error(pynvml.NVML_ERROR_NO_PERMISSION),
                temperature=RuntimeError("not even an NVMLError"),
                name=b"NVIDIA H200",  # bindings before 11.515 return bytes
            ),
            None,
            gpu(compute=[process_info(os.getpid(), None)]),  # memory NVML withholds (MIG, WDDM)
        ]
    )
    source = NvmlSource(nvml=fake)

    gpu0, gpu1, gpu2, gpu3 = source.sample()

    assert gpu0.power_w is None and gpu0.power_limit_w is None
    assert gpu0.memory_used == 10 * GIB and gpu0.temperature_c == 54.0
    assert gpu1.name == H200 and gpu1.processes == () and gpu1.temperature_c is None
    assert gpu1.memory_used == 10 * GIB
    assert gpu2 == GpuSample(2, NA_NAME, None, None, None, None, None, None, (), gpu2.time)
    assert gpu3.processes[0].used_bytes == 0


def test_nvml_a_gpu_that_comes_back_is_read_again_and_keeps_its_name_when_it_fails():
    fake = FakeNvml([None, gpu()])
    source = NvmlSource(nvml=fake)

    assert source.sample()[0].memory_used is None
    fake.gpus[0] = gpu()
    assert source.sample()[0].memory_used == 10 * GIB
    fake.gpus[0] = None  # the handle is kept; every field now fails
    lost = source.sample()[0]
    assert lost.name == H200 and lost.memory_used is None and lost.power_w is None


def test_nvml_every_call_failing_still_samples():
    class Broken(FakeNvml):
        def __getattribute__(self, name: str) -> object:
            if name.startswith("nvmlDevice") and name != "nvmlDeviceGetCount":
                raise RuntimeError(f"{name} exploded")
            return super().__getattribute__(name)

    source = NvmlSource(nvml=Broken([gpu(), gpu()]))

    assert [(s.index, s.name, s.memory_used, s.power_w) for s in source.sample()] == [
        (0, NA_NAME, None, None),
        (1, NA_NAME, None, None),
    ]


def test_nvml_a_binding_without_a_function_reads_none_for_that_field():
    fake = FakeNvml([gpu()])
    old_binding = SimpleNamespace(
        NVML_TEMPERATURE_GPU=0,
        **{name: getattr(fake, name) for name in dir(fake) if name.startswith("nvml")},
    )
    del old_binding.nvmlDeviceGetEnforcedPowerLimit

    (sample,) = NvmlSource(nvml=old_binding).sample()

    assert sample.power_limit_w is None and sample.power_w == pytest.approx(412.345)


def test_nvml_indices_watch_a_subset():
    source = NvmlSource(indices=[1, 3], nvml=FakeNvml([gpu(), gpu(), gpu(), gpu(temperature=71)]))

    assert [(s.index, s.temperature_c) for s in source.sample()] == [(1, 54.0), (3, 71.0)]


def test_nvml_init_failure_is_one_line_that_points_to_sim():
    fake = FakeNvml([], init_error=pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))

    with pytest.raises(CockpitError) as raised:
        NvmlSource(nvml=fake)

    message = str(raised.value)
    assert message.startswith("no NVIDIA driver: NVML did not initialise (Driver Not Loaded)")
    assert "--sim" in message and "\n" not in message


def test_nvml_no_gpus_is_an_error_and_shuts_nvml_down():
    fake = FakeNvml([])

    with pytest.raises(CockpitError, match="--sim"):
        NvmlSource(nvml=fake)
    assert (fake.inits, fake.shutdowns) == (1, 1)


def test_nvml_close_shuts_down_once():
    fake = FakeNvml([gpu()])
    source = NvmlSource(nvml=fake)

    source.close()
    source.close()

    assert fake.shutdowns == 1


@pytest.mark.skipif(driver_present(), reason="an NVIDIA driver is present")
def test_real_nvml_without_a_driver_says_so_in_one_line():
    assert driver_present() is False
    with pytest.raises(CockpitError) as raised:
        NvmlSource()
    message = str(raised.value)
    assert message.startswith("no NVIDIA driver: NVML did not initialise (")
    assert message.endswith("run with --sim to use the simulated box")
    assert "\n" not in message


@pytest.mark.skipif(not driver_present(), reason="no NVIDIA driver here")
def test_real_nvml_reads_the_gpus():
    with NvmlSource() as source:
        samples = source.sample()
    assert samples and all(s.name != NA_NAME and s.memory_total and s.memory_total > 0 for s in samples)
    assert [s.index for s in samples] == list(range(len(samples)))


# dcgm-exporter ---------------------------------------------------------------------------------

LABELS = (
    'gpu="{gpu}",UUID="GPU-{uuid}",pci_bus_id="00000000:{bus}:00.0",device="nvidia{gpu}",'
    'modelName="NVIDIA H200",Hostname="{host}",DCGM_FI_DRIVER_VERSION="570.124.06"'
)
UUIDS = ["1b2e5c7a-8f0d-4b7e-9a51-3c6d2e8f4a10", "7d4f0a9e-2c1b-4e8d-b6a3-5f9e1c2d7b84"]


def labels(gpu: int, host: str = "node1", **extra: str) -> str:
    text = LABELS.format(gpu=gpu, uuid=UUIDS[gpu], bus=("18", "2A")[gpu], host=host)
    return text + "".join(f',{key}="{value}"' for key, value in extra.items())


def dcgm_payload(host: str = "node1") -> str:
    """What dcgm-exporter 3.x/4.x serves at :9400/metrics for two H200s (default counters)."""
    series = {
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."): (1980, 1755),
        ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."): (2619, 2619),
        ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."): (47, 9223372036854775794),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."): (54, 38),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."): (412.345, 76.5),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."): (
            93284712345,
            61234098765,
        ),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."): (87, 0),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."): (31, 0),
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."): (58654, 142771),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."): (81234, 0),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."): (0, 0),
    }
    lines = []
    for (name, kind, help_text), values in series.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for index, value in enumerate(values):
            extra = {}
            if index == 0:  # Kubernetes pod attribution, with an escaped quote in a value
                extra = {"container": "vllm", "namespace": "llm", "pod": 'serve-\\"tp8\\"-0'}
            lines.append(f"{name}{{{labels(index, host, **extra)}}} {value}")
    return "\n".join(lines) + "\n"


def test_parse_dcgm_reads_a_real_payload():
    gpu0, gpu1 = parse_dcgm(dcgm_payload())

    assert gpu0.index == 0 and gpu0.name == H200
    assert gpu0.memory_used == 81234 * MIB
    assert gpu0.memory_total == (81234 + 58654) * MIB
    assert gpu0.power_w == pytest.approx(412.345)
    assert gpu0.power_limit_w is None  # not among the default counters
    assert (gpu0.utilization, gpu0.temperature_c) == (87.0, 54.0)
    assert gpu0.processes == () and gpu0.time > 0
    assert (gpu1.index, gpu1.memory_used, gpu1.memory_total) == (1, 0, 142771 * MIB)
    assert (gpu1.power_w, gpu1.utilization, gpu1.temperature_c) == (76.5, 0.0, 38.0)


def test_parse_dcgm_skips_garbage_and_keeps_the_first_series_of_a_gpu():
    garbage = "\n".join(
        [
            "garbage",
            "",
            "   ",
            "{}",
            "DCGM_FI_DEV_FB_USED",
            'DCGM_FI_DEV_FB_USED{gpu="0" 5',  # unterminated labels
            'DCGM_FI_DEV_FB_USED{gpu="0",UUID=unquoted} 5',
            'DCGM_FI_DEV_FB_USED{gpu="x"} 5',  # no GPU index
            'DCGM_FI_DEV_FB_USED{UUID="GPU-1"} 5',  # no gpu label at all
            'DCGM_FI_DEV_GPU_UTIL{gpu="0"} lots',
            "\x00\xff binary \x1b[31m",
            'DCGM_FI_DEV_GPU_TEMPERATURE_OF_SOMETHING{gpu="0"} 99',
            'NOT_DCGM{gpu="0"} 1',
        ]
    )
    later = "\n".join(
        [
            f"DCGM_FI_DEV_FB_USED{{{labels(0)}}} 1",  # a repeat (a MIG instance) does not override
            'DCGM_FI_DEV_GPU_TEMP{gpu="2",UUID="GPU-3",modelName="NVIDIA H200",Hostname="node1"} 40 1718000000000',
            'DCGM_FI_DEV_POWER_USAGE{gpu="2",Hostname="node1",} NaN',
            'DCGM_FI_DEV_POWER_MGMT_LIMIT{gpu="2",Hostname="node1"} 700.000',
        ]
    )

    samples = parse_dcgm(garbage + "\n" + dcgm_payload() + later + "\n" + garbage)

    clean = parse_dcgm(dcgm_payload())
    assert [s.index for s in samples] == [0, 1, 2]
    assert [strip_time(s) for s in samples[:2]] == [strip_time(s) for s in clean]
    gpu2 = samples[2]
    assert (gpu2.name, gpu2.temperature_c, gpu2.power_w, gpu2.power_limit_w) == (H200, 40.0, None, 700.0)
    assert gpu2.memory_used is None and gpu2.memory_total is None


def strip_time(sample: GpuSample) -> GpuSample:
    return GpuSample(**{**sample.__dict__, "time": 0.0})


def test_parse_dcgm_blank_sentinels_and_reserved_memory():
    text = "\n".join(
        [
            f"DCGM_FI_DEV_GPU_TEMP{{{labels(0)}}} 9223372036854775794",  # DCGM "blank": no reading
            f"DCGM_FI_DEV_POWER_USAGE{{{labels(0)}}} 140737488355328.000",
            f"DCGM_FI_DEV_FB_USED{{{labels(0)}}} 1000",
            f"DCGM_FI_DEV_FB_FREE{{{labels(0)}}} 2000",
            f"DCGM_FI_DEV_FB_RESERVED{{{labels(0)}}} 500",
        ]
    )

    (sample,) = parse_dcgm(text)

    assert sample.temperature_c is None and sample.power_w is None
    assert sample.memory_total == 3500 * MIB


def test_parse_dcgm_one_host_of_several():
    text = dcgm_payload("node1") + dcgm_payload("node2").replace("} 81234", "} 1024")

    assert [s.memory_used for s in parse_dcgm(text)] == [81234 * MIB, 0]
    assert [s.memory_used for s in parse_dcgm(text, host_label="node2")] == [1024 * MIB, 0]
    assert parse_dcgm(text, host_label="node3") == []


def test_parse_dcgm_of_nothing_useful_is_empty():
    assert parse_dcgm("") == []
    assert parse_dcgm("# HELP go_goroutines Number of goroutines.\ngo_goroutines 12\n") == []


class Exporter(http.server.ThreadingHTTPServer):
    """A dcgm-exporter stand-in on 127.0.0.1: serves `payload` at /metrics, 500 elsewhere."""

    daemon_threads = True

    def __init__(self, payload: str) -> None:
        self.payload = payload
        self.requests = 0
        super().__init__(("127.0.0.1", 0), ExporterHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class ExporterHandler(http.server.BaseHTTPRequestHandler):
    server: Exporter

    def do_GET(self) -> None:
        self.server.requests += 1
        if self.path != "/metrics":
            self.send_error(500, "collector failed")
            return
        body = self.server.payload.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def exporter():
    server = Exporter(dcgm_payload())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: bound by us, then let go."""
    return free_port()


def test_prometheus_source_reads_a_live_exporter(exporter):
    with PrometheusSource(exporter.url + "/metrics") as source:
        assert source.name == exporter.url + "/metrics"
        first = source.sample()
        exporter.payload = exporter.payload.replace("} 81234", "} 90000")
        second = source.sample()

    assert [strip_time(s) for s in first] == [strip_time(s) for s in parse_dcgm(dcgm_payload())]
    assert second[0].memory_used == 90000 * MIB
    assert exporter.requests == 2  # one GET per sample


def test_prometheus_source_keeps_the_last_gpus_as_na_when_the_exporter_fails(exporter):
    source = PrometheusSource(exporter.url + "/metrics", timeout=1.0)
    assert len(source.sample()) == 2

    source.url = exporter.url + "/broken"  # HTTP 500
    broken = source.sample()
    source.url = exporter.url + "/metrics"
    exporter.payload = "# nothing but comments\n"
    empty = source.sample()
    source.url = f"http://127.0.0.1:{closed_port()}/metrics"
    refused = source.sample()
    source.close()

    for samples in (broken, empty, refused):
        assert [(s.index, s.name) for s in samples] == [(0, H200), (1, H200)]
        assert all(
            (s.memory_used, s.memory_total, s.power_w, s.utilization, s.temperature_c) == (None,) * 5
            for s in samples
        )


def test_prometheus_source_on_a_closed_port_never_raises():
    with PrometheusSource(f"http://127.0.0.1:{closed_port()}/metrics", timeout=1.0) as source:
        assert source.sample() == []  # no GPU known yet: nothing to show as n/a
        assert source.sample() == []


# Monitor ---------------------------------------------------------------------------------------


@pytest.fixture
def box(tmp_path, seed_box):
    return SimBox(seed_box, root=tmp_path / "sim").create()


@pytest.fixture
def publisher(box):
    with box.publisher(os.getpid(), "test") as publisher:
        yield publisher


def test_monitor_peaks_follow_the_most_memory_since_track(box, publisher):
    monitor = Monitor(SimBoxSource(box))
    publisher.publish({0: GpuLoad(used_bytes=50 * GIB)})  # a previous experiment, still freeing
    monitor.sample_now()

    monitor.track(7, [0, 1])
    assert monitor.peaks(7) == {}  # counts from the next poll on
    for used in (5, 30, 20):
        publisher.publish({0: GpuLoad(used_bytes=used * GIB), 2: GpuLoad(used_bytes=60 * GIB)})
        monitor.sample_now()

    assert monitor.peaks(7) == {0: 30 * GIB, 1: 0}
    assert monitor.untrack(7) == {0: 30 * GIB, 1: 0}
    assert monitor.peaks(7) == {} and monitor.untrack(7) == {}


def test_monitor_latest_and_bounded_history(box, publisher):
    monitor = Monitor(SimBoxSource(box), history=3)
    assert monitor.latest() == [] and monitor.history(0) == []

    for used in range(1, 6):
        publisher.publish({0: GpuLoad(used_bytes=used * GIB)})
        returned = monitor.sample_now()

    assert monitor.latest() == returned and len(returned) == box.hardware.count
    assert [s.memory_used for s in monitor.history(0)] == [3 * GIB, 4 * GIB, 5 * GIB]
    assert monitor.history(0)[-1] == returned[0]
    assert len(monitor.history(7)) == 3 and monitor.history(8) == []


def test_monitor_subscribers_get_every_poll(box, publisher):
    monitor = Monitor(SimBoxSource(box))
    seen: list[list[GpuSample]] = []
    unsubscribe = monitor.subscribe(seen.append)
    monitor.subscribe(lambda samples: 1 / 0)  # a broken screen does not stop the others

    publisher.publish({3: GpuLoad(used_bytes=GIB)})
    first = monitor.sample_now()
    unsubscribe()
    monitor.sample_now()

    assert seen == [first] and seen[0][3].memory_used == GIB


class FlakySource(GpuSource):
    """A source that breaks its promise and raises, from its `fail_from`-th call on."""

    name = "flaky"

    def __init__(self, fail_from: int) -> None:
        self.calls = 0
        self.fail_from = fail_from

    def sample(self) -> list[GpuSample]:
        self.calls += 1
        if self.calls >= self.fail_from:
            raise OSError("the driver went away")
        return [GpuSample(0, H200, GIB, 2 * GIB, 100.0, 700.0, 5.0, 40.0)]


def test_monitor_a_raising_source_reads_na(caplog):
    monitor = Monitor(FlakySource(fail_from=2))
    monitor.track(1, [0])
    monitor.sample_now()

    (sample,) = monitor.sample_now()

    assert (sample.index, sample.name, sample.memory_used, sample.power_w) == (0, H200, None, None)
    assert monitor.peaks(1) == {0: GIB}
    assert "the driver went away" in caplog.text


def monitor_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cockpit-gpu-monitor"]


def test_monitor_thread_polls_and_stops(box, publisher):
    publisher.publish({0: GpuLoad(used_bytes=GIB)})
    polls: list[str] = []
    enough = threading.Event()

    def on_poll(samples: list[GpuSample]) -> None:
        polls.append(threading.current_thread().name)
        if len(polls) >= 3:
            enough.set()

    monitor = Monitor(SimBoxSource(box), interval=0.01)
    monitor.subscribe(on_poll)
    with monitor:
        assert enough.wait(timeout=10)
        assert monitor.running

    assert not monitor.running and monitor_threads() == []
    assert set(polls) == {"cockpit-gpu-monitor"}  # never the caller's thread
    assert monitor.latest()[0].memory_used == GIB


def test_monitor_thread_survives_a_raising_source():
    source = FlakySource(fail_from=2)
    polls: list[list[GpuSample]] = []
    enough = threading.Event()

    def on_poll(samples: list[GpuSample]) -> None:
        polls.append(samples)
        if len(polls) >= 4:
            enough.set()

    monitor = Monitor(source, interval=0.01)
    monitor.subscribe(on_poll)
    monitor.start()
    try:
        assert enough.wait(timeout=10)
        assert monitor.running
    finally:
        monitor.stop()

    assert source.calls >= 4 and monitor_threads() == []
    assert polls[0][0].memory_used == GIB
    assert all(samples[0].memory_used is None and samples[0].name == H200 for samples in polls[1:])


def test_monitor_refuses_a_nonsense_interval():
    with pytest.raises(ValueError):
        Monitor(FlakySource(fail_from=99), interval=0)
