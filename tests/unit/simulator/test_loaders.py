"""Every loader on files the tests write (good and malformed) and on the real openb sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import JobEnd, JobKind, QoSClass
from qosmos.simulator.traces import (
    TraceFormatError,
    generate_genie,
    generate_helios_synth,
    helios_duration_stats,
    infer_format,
    load_helios,
    load_helios_gpu_numbers,
    load_native,
    load_native_nodes,
    load_openb,
    load_openb_nodes,
    load_philly,
    load_trace,
    scale_nodes,
)

from .conftest import write

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,64000,131072,8,V100"


def test_openb_sample_loads() -> None:
    tr = load_trace("builtin:openb-sample")
    assert len(tr.jobs) == 1000 and len(tr.nodes) == 304
    shared = [j for j in tr.jobs if j.gpu_milli < 1000]
    assert shared and all(j.gpus == 1 for j in shared)
    cpu = [j for j in tr.jobs if j.gpus == 0]
    assert cpu and all(j.kind is JobKind.CPU for j in cpu)
    never = [i for i, s in enumerate(tr.recorded_start) if s is None]
    assert never and all(tr.withdraw_at[i] is not None for i in never)
    j0 = tr.jobs[0]
    assert j0.duration == tr.recorded_end[0] - tr.recorded_start[0]


def test_openb_fields(tmp_path: Path) -> None:
    write(tmp_path / "nodes.csv", NODES)
    pods = write(
        tmp_path / "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        "p0,1000,1024,1,500,T4|V100,LS,Running,10,110,20\n"
        "p1,1000,1024,2,1000,,BE,Failed,10,50,30\n"
        "p2,1000,1024,1,1000,,BE,Pending,15,40,",
    )
    tr = load_openb(pods, tmp_path / "nodes.csv")
    a, b, c = tr.jobs
    assert a.gpu_milli == 500 and a.gpu_models == ("T4", "V100") and a.duration == 90 and a.qos is QoSClass.PRIOR
    assert tr.recorded_start[0] == 20 and tr.recorded_end[0] == 110
    assert b.end_state is JobEnd.FAILED and b.duration == 20
    assert c.end_state is JobEnd.CANCELLED and tr.withdraw_at[2] == 40


def test_openb_malformed_names_file_line_field(tmp_path: Path) -> None:
    write(tmp_path / "nodes.csv", NODES)
    pods = write(
        tmp_path / "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        "p0,1000,1024,1,1000,,LS,Running,10,110,20\n"
        "p1,1000,1024,two,1000,,LS,Running,10,110,20",
    )
    with pytest.raises(TraceFormatError) as e:
        load_openb(pods, tmp_path / "nodes.csv")
    assert str(e.value).startswith("pods.csv:3: field num_gpu:")
    assert isinstance(e.value, InvalidInput)


HELIOS = """job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue
j1,u1,vcA,8,16,1,COMPLETED,2020-09-01 00:00:00,2020-09-01 00:00:10,2020-09-01 01:00:10,3600,10
j2,u2,vcA,1,4,1,CANCELLED,2020-09-01 00:01:00,2020-09-01 00:01:00,2020-09-01 00:02:00,60,0
j3,u2,vcB,2,4,1,FAILED,2020-09-01 00:02:00,2020-09-01 00:05:00,2020-09-01 00:05:30,30,180
j4,u3,vcB,0,4,1,COMPLETED,2020-09-01 00:02:00,2020-09-01 00:02:00,2020-09-01 00:02:01,1,0
j5,u3,vcB,1,4,1,CANCELLED,2020-09-01 00:03:00,,2020-09-01 00:04:00,0,60
"""


def test_helios_loader(tmp_path: Path) -> None:
    write(tmp_path / "cluster_log.csv", HELIOS)
    write(tmp_path / "cluster_gpu_number.csv", "date,vcA,vcB\n2020-09-01,16,8\n2020-09-02,24,8")
    tr = load_helios(tmp_path)
    assert [j.id for j in tr.jobs] == ["j1", "j2", "j3", "j5"]  # CPU job j4 dropped
    assert tr.jobs[0].submit_time == 0 and tr.recorded_start[0] == 10 and tr.jobs[0].duration == 3600
    assert tr.jobs[1].end_state is JobEnd.CANCELLED and tr.jobs[2].end_state is JobEnd.FAILED
    assert tr.recorded_start[3] is None and tr.withdraw_at[3] == 240
    gpus = {}
    for n in tr.nodes:
        gpus[n.vc] = gpus.get(n.vc, 0) + n.gpus
    assert gpus == {"vcA": 24, "vcB": 8} and all(n.gpus == 8 for n in tr.nodes)


def test_helios_gpu_numbers_shapes(tmp_path: Path) -> None:
    assert load_helios_gpu_numbers(write(tmp_path / "a.csv", "vc,gpu_num\nx,8\ny,16")) == {"x": 8, "y": 16}
    assert load_helios_gpu_numbers(write(tmp_path / "b.csv", ",x,y\n2020-01-01,8,\n2020-01-02,16,4")) == {
        "x": 16,
        "y": 4,
    }
    with pytest.raises(TraceFormatError, match=r"b2\.csv:3: field y"):
        load_helios_gpu_numbers(write(tmp_path / "b2.csv", "date,x,y\n2020-01-01,8,8\n2020-01-02,16,lots"))


def test_helios_malformed(tmp_path: Path) -> None:
    bad = HELIOS.replace("2020-09-01 00:05:00", "yesterday")
    write(tmp_path / "cluster_log.csv", bad)
    with pytest.raises(TraceFormatError, match=r"cluster_log.csv:4: field start_time"):
        load_helios(tmp_path)


def test_helios_without_gpu_numbers_uses_peak(tmp_path: Path) -> None:
    write(tmp_path / "cluster_log.csv", HELIOS)
    tr = load_helios(tmp_path / "cluster_log.csv")
    assert {n.vc for n in tr.nodes} == {"vcA", "vcB"}


def test_philly_loader(tmp_path: Path) -> None:
    data = [
        {
            "jobid": "a",
            "user": "u",
            "vc": "v1",
            "submitted_time": "2017-10-03 00:00:00",
            "status": "Pass",
            "attempts": [
                {
                    "start_time": "2017-10-03 00:01:00",
                    "end_time": "2017-10-03 00:11:00",
                    "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}, {"ip": "m2", "gpus": ["gpu0", "gpu1"]}],
                }
            ],
        },
        {
            "jobid": "b",
            "user": "u",
            "vc": "v2",
            "submitted_time": "2017-10-03 00:02:00",
            "status": "Killed",
            "attempts": [],
        },
    ]
    p = write(tmp_path / "cluster_job_log", json.dumps(data))
    tr = load_philly(p)
    a, b = tr.jobs
    assert a.gpus == 4 and a.duration == 600 and tr.recorded_start[0] == 60 and tr.recorded_nodes[0] == ("m1", "m2")
    assert b.end_state is JobEnd.CANCELLED and tr.withdraw_at[1] is None and tr.recorded_start[1] is None
    data[0]["attempts"][0]["end_time"] = "soon"
    p.write_text(json.dumps(data))
    with pytest.raises(TraceFormatError, match=r"cluster_job_log:1: field attempts\[0\].end_time"):
        load_philly(p)


def test_native_loader_and_errors(tiny) -> None:  # type: ignore[no-untyped-def]
    p = tiny("id,submit,gpus,duration,vc,model,batch,iters,qos\na,0,1,10,,,,,\nb,5,1,,,ResNet50,64,100,urgent")
    tr = load_native(p)
    assert tr.jobs[1].has_genie_task and tr.jobs[1].qos is QoSClass.URGENT and len(tr.nodes) == 1
    p = tiny("id,submit,gpus,duration\na,0,1,10\nb,5,1,")
    with pytest.raises(TraceFormatError, match=r"jobs\.csv:3: field duration"):
        load_native(p)
    p = tiny("id,submit,gpus,duration\na,0,-1,10")
    with pytest.raises(TraceFormatError, match=r"jobs\.csv:2: field gpus"):
        load_native(p)
    p = tiny("id,submit,duration\na,0,10")
    with pytest.raises(TraceFormatError, match=r"jobs\.csv:1: field gpus: missing column"):
        load_native(p)


def test_genie_generator_mix_and_determinism() -> None:
    a = generate_genie(density=200, seed=3)
    b = generate_genie(density=200, seed=3)
    assert [(j.submit_time, j.model, j.batch, j.iters) for j in a] == [
        (j.submit_time, j.model, j.batch, j.iters) for j in b
    ]
    n = len(a)
    assert 4000 < n < 5600  # Poisson(4800)
    assert abs(sum(j.kind is JobKind.TRAINING for j in a) / n - 0.5) < 0.05
    assert abs(sum(j.qos is QoSClass.URGENT for j in a) / n - 0.05) < 0.02
    assert abs(sum(j.qos is QoSClass.PRIOR for j in a) / n - 0.35) < 0.04
    assert {j.model for j in a} == {"AlexNet", "GoogleNet", "ResNet50", "Inception-v3", "LSTM", "Seq2seq"}
    assert max(j.submit_time for j in a) < 24 * 3600
    assert all(j.has_genie_task for j in a)


def test_helios_synth_shape() -> None:
    tr = generate_helios_synth(20000, seed=1)
    assert sum(n.gpus for n in tr.nodes) == 1000 and len({n.vc for n in tr.nodes}) == 10
    g = [j.gpus for j in tr.jobs]
    assert abs(sum(x == 1 for x in g) / len(g) - 0.5) < 0.03
    assert all(x & (x - 1) == 0 for x in g)
    import numpy as np

    d = np.array([j.duration for j in tr.jobs])
    assert 150 < np.median(d) < 280


def test_scale_and_unknown_builtin() -> None:
    tr = scale_nodes(load_trace("builtin:openb-sample"), 0.25)
    assert len(tr.nodes) == 76
    with pytest.raises(InvalidInput):
        load_trace("builtin:nope")
    with pytest.raises(InvalidInput):
        load_trace("x.csv", "parquet")


# ---- one validation layer: every loader meets bad files the same way ------------------------

PODS_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)
PODS = PODS_HEADER + "\np0,1000,1024,1,1000,,LS,Running,10,110,20\n"
PHILLY = json.dumps([{"jobid": "a", "vc": "v", "submitted_time": "2017-10-03 00:00:00", "attempts": []}])

# (file name, good content, loader reading that file)
LOADERS = {
    "openb pods": ("openb_pod_list_x.csv", PODS, lambda p: load_openb(p, p.parent / "n.csv")),
    "openb nodes": ("openb_nodes.csv", NODES, lambda p: load_openb_nodes(p)),
    "helios log": ("cluster_log.csv", HELIOS, lambda p: load_helios(p)),
    "helios gpu numbers": ("gpus.csv", "vc,gpu_num\nx,8", lambda p: load_helios_gpu_numbers(p)),
    "philly": ("cluster_job_log", PHILLY, lambda p: load_philly(p)),
    "native jobs": ("jobs.csv", "id,submit,gpus,duration\na,0,1,10", lambda p: load_native(p)),
    "native nodes": ("mynodes.csv", "name,gpus\nn0,2", lambda p: load_native_nodes(p)),
}


@pytest.fixture
def node_file(tmp_path: Path) -> Path:
    return write(tmp_path / "n.csv", NODES)


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_every_loader_binary_non_utf8_and_directory_name_the_file(tmp_path: Path, node_file: Path, loader: str) -> None:
    name, good, read = LOADERS[loader]
    p = tmp_path / name
    for content, reason in (
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file"),
        (good.encode() + "\né,1".encode("latin-1"), "not UTF-8 text"),
    ):
        p.write_bytes(content)
        with pytest.raises(InvalidInput, match=reason) as e:
            read(p)
        assert name in str(e.value) and not isinstance(e.value, UnicodeDecodeError)
    d = tmp_path / "adir"
    d.mkdir(exist_ok=True)
    # openb and helios also take a folder (the trace's own files inside it): a folder without them
    folder_ok = loader in ("helios log", "openb pods")
    with pytest.raises(InvalidInput, match="file not found" if folder_ok else "is a directory") as e:
        read(d)
    assert "adir" in str(e.value)


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_every_loader_accepts_a_utf8_bom(tmp_path: Path, node_file: Path, loader: str) -> None:
    name, good, read = LOADERS[loader]
    plain = read(write(tmp_path / name, good))
    bom = read(write(tmp_path / name, "\ufeff" + good))
    assert repr(bom) == repr(plain)


def test_helios_dates_as_written_never_minutes(tmp_path: Path) -> None:
    write(
        tmp_path / "cluster_log.csv",
        HELIOS.replace("2020-09-01 00:05:00,2020-09-01 00:05:30", "2020-09-01 00:01:00,2020-09-01 00:05:30"),
    )
    with pytest.raises(TraceFormatError) as e:
        load_helios(tmp_path)
    assert str(e.value) == "cluster_log.csv:4: field start_time: before submit_time (got '2020-09-01 00:01:00')"


def test_helios_truncated_row_and_negative_duration(tmp_path: Path) -> None:
    write(tmp_path / "cluster_log.csv", HELIOS + "j6,u3,vcB,1,4,1,COMPLETED,2020-09-01 00:03:00\n")
    with pytest.raises(TraceFormatError, match=r"cluster_log\.csv:7: field start_time: truncated row: 8 of 12"):
        load_helios(tmp_path)
    write(
        tmp_path / "cluster_log.csv",
        HELIOS + "j6,u3,vcB,1,4,1,COMPLETED,2020-09-01 00:03:00,2020-09-01 00:03:00,,-5,0\n",
    )
    with pytest.raises(TraceFormatError, match=r"cluster_log\.csv:7: field duration: must be >= 0 \(got '-5'\)"):
        load_helios(tmp_path)


def test_native_negative_duration_and_truncated_row(tiny) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TraceFormatError, match=r"jobs\.csv:3: field duration: must be >= 0 \(got '-4'\)"):
        load_native(tiny("id,submit,gpus,duration\na,0,1,10\nb,1,1,-4"))
    with pytest.raises(TraceFormatError, match=r"jobs\.csv:3: field duration: truncated row: 3 of 4 fields"):
        load_native(tiny("id,submit,gpus,duration\na,0,1,10\nb,1,1"))


def test_native_checkpoint_interval_is_each_jobs_and_checked(tiny) -> None:  # type: ignore[no-untyped-def]
    tr = load_native(tiny("id,submit,gpus,duration,checkpoint_interval\na,0,1,10,600\nb,1,1,10,"))
    assert [j.checkpoint_interval for j in tr.jobs] == [600.0, None]
    with pytest.raises(TraceFormatError, match=r"jobs\.csv:3: field checkpoint_interval: must be >= 0 \(got '-1'\)"):
        load_native(tiny("id,submit,gpus,duration,checkpoint_interval\na,0,1,10,0\nb,1,1,10,-1"))


# ---- messages that used to mislead ---------------------------------------------------------


def test_openb_pods_without_format_are_recognised_by_their_columns(tmp_path: Path) -> None:
    pods = write(tmp_path / "pods.csv", PODS)  # a name that says nothing: the columns say openb
    assert infer_format(str(pods)) == "openb"
    with pytest.raises(InvalidInput) as e:
        load_trace(str(pods))
    msg = str(e.value)
    assert "openb pods in pods.csv need their node list" in msg and "--node-list" in msg
    tr = load_trace(str(pods), node_list=str(write(tmp_path / "n.csv", NODES)))
    assert [j.id for j in tr.jobs] == ["p0"]
    with pytest.raises(TraceFormatError, match=r"pods\.csv:1: field id: missing column; .*--format openb"):
        load_trace(str(pods), "native")


def test_builtin_messages() -> None:
    with pytest.raises(InvalidInput) as e:
        load_trace("builtin:nope")
    assert "None" not in str(e.value) and "builtin:helios-synth" in str(e.value)
    with pytest.raises(InvalidInput) as e:
        load_trace("builtin:helios-synth", "helios", jobs=10)
    assert "not found" not in str(e.value) and "--format helios-synth" in str(e.value)
    with pytest.raises(InvalidInput) as e:
        load_trace("builtin:openb-sample", "helios")
    assert str(e.value).endswith("builtin:openb-sample is in openb format; drop --format or use --format openb")
    with pytest.raises(InvalidInput, match="hours") as e:
        load_trace("builtin:genie", "genie", hours=0)
    assert "density" not in str(e.value)


def test_native_without_nodes_states_its_default_cluster(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = tiny("id,submit,gpus,duration\na,0,1,10")
    (tmp_path / "nodes.csv").unlink()
    tr = load_trace(str(p))
    assert len(tr.nodes) == 4 and all(n.gpus == 8 for n in tr.nodes)
    assert any("default cluster of 4 nodes x 8 GPUs" in n for n in tr.notes)
    tr = load_trace(str(p), nodes=2, gpus_per_node=2)
    assert len(tr.nodes) == 2 and any("--nodes" in n for n in tr.notes)


def test_cluster_options_are_never_silently_replaced() -> None:
    with pytest.raises(InvalidInput, match="nodes=0"):
        load_trace("builtin:openb-sample", nodes=0)
    with pytest.raises(InvalidInput, match="nodes=0"):
        load_trace("builtin:genie", nodes=0)
    with pytest.raises(InvalidInput, match=r"gpus_per_node=4.*--nodes"):
        load_trace("builtin:openb-sample", gpus_per_node=4)


def test_helios_summary_comes_from_the_shared_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "helios").mkdir()
    (tmp_path / "SOURCES.md").write_text("test data")
    write(tmp_path / "helios" / "helios_cluster_summary.csv", "id,med_run_time_gpu,avg_run_time_gpu\ntotal,100,900")
    monkeypatch.setenv("QOSMOS_SHARED", str(tmp_path))
    assert helios_duration_stats() == (100.0, 900.0)
    tr = generate_helios_synth(50, seed=0)
    assert "median 100 s mean 900 s" in tr.notes[0]


def test_progress_reaches_the_end_a_few_times(tmp_path: Path) -> None:
    write(tmp_path / "cluster_log.csv", HELIOS)
    for spec, kw in ((str(tmp_path), {}), ("builtin:helios-synth", {"jobs": 100}), ("builtin:openb-sample", {})):
        calls: list[tuple[int, int]] = []
        load_trace(spec, progress=lambda d, t: calls.append((d, t)), **kw)  # noqa: B023
        assert 1 <= len(calls) <= 300 and calls[-1][0] == calls[-1][1] > 0
