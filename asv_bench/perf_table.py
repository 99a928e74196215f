"""The tables of docs/performance.md, generated from asv results.

Every figure of the performance page is one `Row`: the asv benchmark (and parameters) that
measures it, and the figure last recorded by hand with the machine it was taken on. `write`
fills each row from the newest asv result of that benchmark in `asv_bench/results/` (the
project keeps its machine's results in the repository) and falls back to the recorded figure
where no result exists yet; a row's figure is replaced, never appended to.

    cd asv_bench
    python perf_table.py run [-b REGEX]   # asv run --python=same --quick, results recorded
    python perf_table.py write            # rewrite the tables of docs/performance.md
    python perf_table.py publish SITE     # asv publish into SITE/benchmarks (the docs site)

`run` without -b runs every benchmark a row names (tens of minutes on 2 cores); pass a regular
expression to re-measure some. tests/test_docs.py checks the page holds what `write` renders.
"""

import argparse
import contextlib
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PAGE = ROOT / "docs" / "performance.md"
RESULTS = HERE / "results"


def _vector_unit():
    """The host's widest vector unit, "AVX-512", "AVX2" or "" (from /proc/cpuinfo's flags): a
    VM may name every CPU alike ("AMD EPYC"), and the kernels and the BLAS differ by it."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else ""
    return ""


# The asv machine name of the project's machine, whose results are kept in the repository: the
# 2-vCPU VMs it runs on come as AVX2 (Zen 3) or AVX-512 (Zen 4) hosts, whose kernels and BLAS
# differ, so each kind keeps its own results (and machine.json)
MACHINE = "project-2vcpu" + ("-avx512" if _vector_unit() == "AVX-512" else "")
# The machine the recorded figures were taken on (asv's machine.json fields for new results).
RECORDED_ON = "2-vCPU AMD EPYC VM, Python 3.11, numba 0.68"


class Row(NamedTuple):
    """One figure of the page: `benchmark` is asv's name, `params` its parameter values (as
    Python values, matched against asv's reprs), `unit` how a track_ value reads ('' for
    time_ / timeraw_ benchmarks, whose seconds are scaled), `recorded` the figure to show
    until asv results exist, `command` the script that reproduces it when no asv benchmark
    does."""

    area: str
    figure: str
    benchmark: str
    params: tuple = ()
    unit: str = ""
    recorded: str = ""
    command: str = ""


def _rows():
    g, ex, dev = "bench_graph.", "bench_executors.", "bench_device."
    mt, rel = "bench_multithread.", "bench_multithread_relations."
    md, co = "bench_models.", "bench_coldstart."
    # fmt: off
    rows = [
        Row("graph-load", "load + full validation, 100k nodes / 1M edges, ids in order", g + "GraphLoad.time_load_validated", ("forward-ids",), recorded="7.2 ms"),
        Row("graph-load", "the same, shuffled ids (Kahn cycle pass)", g + "GraphLoad.time_load_validated", ("shuffled-ids",), recorded="16.6 ms"),
        Row("graph-load", "load without validation (memory map + schema checks)", g + "GraphLoad.time_load_unvalidated", ("forward-ids",), recorded="3.0 ms"),
        Row("graph-load", "in-memory structure of that graph", g + "GraphLoad.track_structure_bytes", ("forward-ids",), "B", "10.5 MB"),
        Row("graph-load", "`GraphBuilder.finalize()` from an unsorted edge list", g + "GraphFinalize.time_finalize", recorded="18.3 ms"),
        Row("graph-load", "generate + save 1M nodes / 10M edges", g + "GenerateLarge.track_generate_and_save_seconds", unit="s", recorded="0.86 s"),
        Row("graph-load", "race check, 141,164-node lowered graph", g + "RaceCheck.time_race_check", recorded="10.9 ms"),
        Row("graph-load", "all of `validate_graph`, the same graph", g + "RaceCheck.time_validate_graph", recorded="16 ms"),
    ]
    for workload, executor, recorded in [
        ("random", "sequential", "1.02-1.11"), ("random", "topological", "1.13-1.26"),
        ("random", "priority", "1.18-1.20"), ("chain", "topological", "1.24-1.27"),
        ("layered", "topological", "1.17-1.20"),
    ]:
        figure = f"{executor} over its C baseline, {workload} graph"
        rows.append(Row("executors", figure, ex + "ExecutorSpeed.track_ratio", (workload, executor), "x", recorded))  # fmt: skip
    rows += [
        Row("multithread", "multithread, 2 threads, random 100k DAG", mt + "RandomDag.track_multithread_ns_per_node", unit="ns/node", recorded="15.7 ns/node (C topological 67.6)"),
        Row("multithread", "the same, over the C topological loop in the same run", mt + "RandomDag.track_ratio_to_c_topological", unit="x", recorded="0.23x"),
        Row("multithread", "busy-work lowered graph, 2 threads over sequential (Taskflow-like)", mt + "BusyWork.track_speedup_over_sequential", unit="x", recorded="1.75x (median of 19 runs; single runs 1.62-1.82)"),
        Row("multithread", "host DAG (2,000 kernels of ~14 us), 2 threads sharing the host work, over sequential", mt + "HostDag.track_speedup_host_sharing", unit="x", recorded="-"),
        Row("multithread", "the same, `sharing=\"auto\"` after calibration", mt + "HostDag.track_speedup_auto", unit="x", recorded="-"),
        Row("multithread", "lowered Inception-v1 (narrow, 64x64), 2 threads over 1, `auto`", mt + "InceptionBranches.track_speedup_two_threads", ("narrow-64",), unit="x", recorded="-"),
        Row("multithread", "the same, launches shared", mt + "InceptionBranches.track_speedup_shared_launches", ("narrow-64",), unit="x", recorded="-"),
        Row("multithread", "the same, the sequential executor with `intra_op_threads=2`", mt + "InceptionBranches.track_speedup_intra_op", ("narrow-64",), unit="x", recorded="-"),
        Row("multithread", "the same, the default session (pool kept if measured faster) over one thread", mt + "InceptionBranches.track_speedup_default", ("narrow-64",), unit="x", recorded="-"),
        Row("multithread", "the same, the threads the default session kept for its ops", mt + "InceptionBranches.track_default_pool_threads", ("narrow-64",), unit="threads", recorded="-"),
        Row("multithread", "lowered Inception-v1 (full, 224x224), 2 threads over 1, `auto`", mt + "InceptionBranches.track_speedup_two_threads", ("full-224",), unit="x", recorded="-"),
        Row("multithread", "the same, launches shared", mt + "InceptionBranches.track_speedup_shared_launches", ("full-224",), unit="x", recorded="-"),
        Row("multithread", "the same, the sequential executor with `intra_op_threads=2`", mt + "InceptionBranches.track_speedup_intra_op", ("full-224",), unit="x", recorded="-"),
        Row("multithread", "the same, the default session (pool kept if measured faster) over one thread", mt + "InceptionBranches.track_speedup_default", ("full-224",), unit="x", recorded="-"),
        Row("multithread", "the same, the threads the default session kept for its ops", mt + "InceptionBranches.track_default_pool_threads", ("full-224",), unit="threads", recorded="-"),
        Row("multithread", "relation events: an unrelated node", rel + "RelationEvents.track_unrelated_node_ns", unit="ns", recorded="3.13 ns"),
        Row("multithread", "relation events: an immediate exact wait", rel + "RelationEvents.track_immediate_wait_ns", unit="ns", recorded="13.5 ns"),
        Row("multithread", "relation events: a Free-Launch occurrence", rel + "RelationEvents.track_free_launch_occurrence_ns", unit="ns", recorded="31.0 ns"),
        Row("prepare", "prepare, 100k nodes / 1M edges, sequential", "bench_prepare.Prepare.time_prepare", ("sequential",), recorded="4.3-5.7 ms"),
        Row("prepare", "the same, topological", "bench_prepare.Prepare.time_prepare", ("topological",), recorded="1.70-1.84 ms"),
        Row("prepare", "the same, priority", "bench_prepare.Prepare.time_prepare", ("priority",), recorded="2.00-2.37 ms"),
        Row("multithread", "multithread relation state, 100k nodes / 1M relations", rel + "RelationPrepare.track_prepare_relation_state_ms", unit="ms", recorded="1.48-1.55 ms"),
        Row("prepare", "a runtime with an unread extra part of 8 arrays / without", "bench_prepare.KernelAbi.track_wide_over_narrow", unit="x", recorded="1.02x"),
        Row("device", "malloc + free pair, trace and quick lists on (default)", dev + "MallocFreePair.track_ns_per_pair", (True, True), "ns", "48.3 ns"),
        Row("device", "the same, trace off", dev + "MallocFreePair.track_ns_per_pair", (False, True), "ns", "46.6 ns"),
        Row("device", "the same, no quick lists", dev + "MallocFreePair.track_ns_per_pair", (True, False), "ns", "57.0 ns"),
        Row("device", "reserved peak / live-bytes bound, 53 % allocs, worst seed", dev + "Fragmentation.track_reserved_over_lower_bound", (0.53, "default"), "x", "1.094x"),
        Row("device", "the same, page mode", dev + "Fragmentation.track_reserved_over_lower_bound", (0.53, "page"), "x", "1.27x"),
        Row("device", "the same, PyTorch-like", dev + "Fragmentation.track_reserved_over_lower_bound", (0.53, "pytorch"), "x", "1.24x"),
        Row("device", "lowered 4k nodes, 1 stream: reserved / requested peak, mean of 6 seeds", dev + "LoweredFragmentation.track_reserved_over_requested_mean", (4000, 1), "x", "1.26x"),
        Row("device", "the same, 2 event-ordered streams", dev + "LoweredFragmentation.track_reserved_over_requested_mean", (4000, 2), "x", "1.36x"),
        Row("device", "static planner / lower bound, 53 % allocs", dev + "StaticPlanner.track_planner_ratio", (0.53, "best"), "x", "1.026x"),
        Row("models", "1,000-op MLP, latency over onnxruntime's", md + "ModelLatency.track_ratio_vs_onnxruntime", ("mlp-1000",), "x", "0.93x (0.92-0.95)"),
        Row("models", "the same, every op on both sides (unfused, unoptimized)", md + "ModelLatency.track_unfused_ratio_vs_onnxruntime_unoptimized", ("mlp-1000",), "x", "0.81-0.94x"),
        Row("models", "small CNN (`cnn-32`), one BLAS thread, over onnxruntime", md + "ModelLatency.track_ratio_vs_onnxruntime", ("cnn-32",), "x", "3.70-4.02x"),
        Row("models", "lowering the 1,000-op MLP", md + "Lowering.time_lower", recorded="62.6 ms"),
        Row("models", "tree ensemble, 100 trees of depth 10, 1,000 rows, over onnxruntime", "bench_ml.TreeEnsembleVersusOnnxruntime.track_ratio", ("rf-100x10 rows 1000",), "x", "2.5x"),
        Row("models", "the same, 200 trees of depth 6, one row", "bench_ml.TreeEnsembleVersusOnnxruntime.track_ratio", ("gbm-200x6 rows 1",), "x", "6.0x"),
        Row("models", "ResNet-18, 1x224, one thread, over onnxruntime", "bench_cnn.CnnLatency.track_ratio_vs_onnxruntime", ("resnet18", "1x224", "one"), "x", "1.75x"),
        Row("models", "MobileNetV2, 1x224, one thread, over onnxruntime", "bench_cnn.CnnLatency.track_ratio_vs_onnxruntime", ("mobilenet_v2", "1x224", "one"), "x", "3.12x"),
        Row("models", "ResNet-50, 1x224, one thread, over onnxruntime", "bench_cnn.CnnLatency.track_ratio_vs_onnxruntime", ("resnet50", "1x224", "one"), "x", "-"),
        Row("models", "DenseNet-121, 1x224, one thread, over onnxruntime", "bench_cnn.CnnLatency.track_ratio_vs_onnxruntime", ("densenet121", "1x224", "one"), "x", "-"),
        Row("models", "Inception-v1, 1x224, one thread, over onnxruntime", "bench_cnn.CnnLatency.track_ratio_vs_onnxruntime", ("inception_v1", "1x224", "one"), "x", "-"),
        Row("models", "ResNet-18, 1x224, one thread, over onnxruntime computing in NCHW", "bench_cnn.CnnLayout.track_ratio_vs_onnxruntime_nchw", ("resnet18", "1x224", "one"), "x", "-"),
        Row("models", "MobileNetV2, 1x224, one thread, over onnxruntime computing in NCHW", "bench_cnn.CnnLayout.track_ratio_vs_onnxruntime_nchw", ("mobilenet_v2", "1x224", "one"), "x", "-"),
        Row("models", "ResNet-50, 1x224, one thread, over onnxruntime computing in NCHW", "bench_cnn.CnnLayout.track_ratio_vs_onnxruntime_nchw", ("resnet50", "1x224", "one"), "x", "-"),
        Row("models", "DenseNet-121, 1x224, one thread, over onnxruntime computing in NCHW", "bench_cnn.CnnLayout.track_ratio_vs_onnxruntime_nchw", ("densenet121", "1x224", "one"), "x", "-"),
        Row("models", "Inception-v1, 1x224, one thread, over onnxruntime computing in NCHW", "bench_cnn.CnnLayout.track_ratio_vs_onnxruntime_nchw", ("inception_v1", "1x224", "one"), "x", "-"),
        Row("models", "ResNet-18, 1x224, onnxruntime in NCHW over its default (NCHWc)", "bench_cnn.CnnLayout.track_nchwc_gain", ("resnet18", "1x224", "one"), "x", "-"),
        Row("models", "MobileNetV2, 1x224, onnxruntime in NCHW over its default (NCHWc)", "bench_cnn.CnnLayout.track_nchwc_gain", ("mobilenet_v2", "1x224", "one"), "x", "-"),
        Row("models", "ResNet-50, 1x224, onnxruntime in NCHW over its default (NCHWc)", "bench_cnn.CnnLayout.track_nchwc_gain", ("resnet50", "1x224", "one"), "x", "-"),
        Row("models", "DenseNet-121, 1x224, onnxruntime in NCHW over its default (NCHWc)", "bench_cnn.CnnLayout.track_nchwc_gain", ("densenet121", "1x224", "one"), "x", "-"),
        Row("models", "Inception-v1, 1x224, onnxruntime in NCHW over its default (NCHWc)", "bench_cnn.CnnLayout.track_nchwc_gain", ("inception_v1", "1x224", "one"), "x", "-"),
        Row("models", "ResNet-18, 1x224, default threads, over onnxruntime", "bench_cnn.CnnLatency.track_ratio_vs_onnxruntime", ("resnet18", "1x224", "default"), "x", "-"),
        Row("models", "MobileNetV2, 1x224, default threads, over onnxruntime", "bench_cnn.CnnLatency.track_ratio_vs_onnxruntime", ("mobilenet_v2", "1x224", "default"), "x", "-"),
        Row("models", "ResNet-50, 1x224, default threads, over onnxruntime", "bench_cnn.CnnLatency.track_ratio_vs_onnxruntime", ("resnet50", "1x224", "default"), "x", "-"),
        Row("models", "DenseNet-121, 1x224, default threads, over onnxruntime", "bench_cnn.CnnLatency.track_ratio_vs_onnxruntime", ("densenet121", "1x224", "default"), "x", "-"),
        Row("models", "Inception-v1, 1x224, default threads, over onnxruntime", "bench_cnn.CnnLatency.track_ratio_vs_onnxruntime", ("inception_v1", "1x224", "default"), "x", "-"),
        Row("models", "ResNet-18, 1x224, default threads, over onnxruntime computing in NCHW", "bench_cnn.CnnLayout.track_ratio_vs_onnxruntime_nchw", ("resnet18", "1x224", "default"), "x", "-"),
        Row("models", "MobileNetV2, 1x224, default threads, over onnxruntime computing in NCHW", "bench_cnn.CnnLayout.track_ratio_vs_onnxruntime_nchw", ("mobilenet_v2", "1x224", "default"), "x", "-"),
        Row("models", "ResNet-50, 1x224, default threads, over onnxruntime computing in NCHW", "bench_cnn.CnnLayout.track_ratio_vs_onnxruntime_nchw", ("resnet50", "1x224", "default"), "x", "-"),
        Row("models", "DenseNet-121, 1x224, default threads, over onnxruntime computing in NCHW", "bench_cnn.CnnLayout.track_ratio_vs_onnxruntime_nchw", ("densenet121", "1x224", "default"), "x", "-"),
        Row("models", "Inception-v1, 1x224, default threads, over onnxruntime computing in NCHW", "bench_cnn.CnnLayout.track_ratio_vs_onnxruntime_nchw", ("inception_v1", "1x224", "default"), "x", "-"),
        Row("models", "ResNet-18, 1x224, default threads, onnxruntime in NCHW over its default", "bench_cnn.CnnLayout.track_nchwc_gain", ("resnet18", "1x224", "default"), "x", "-"),
        Row("models", "MobileNetV2, 1x224, default threads, onnxruntime in NCHW over its default", "bench_cnn.CnnLayout.track_nchwc_gain", ("mobilenet_v2", "1x224", "default"), "x", "-"),
        Row("models", "ResNet-50, 1x224, default threads, onnxruntime in NCHW over its default", "bench_cnn.CnnLayout.track_nchwc_gain", ("resnet50", "1x224", "default"), "x", "-"),
        Row("models", "DenseNet-121, 1x224, default threads, onnxruntime in NCHW over its default", "bench_cnn.CnnLayout.track_nchwc_gain", ("densenet121", "1x224", "default"), "x", "-"),
        Row("models", "Inception-v1, 1x224, default threads, onnxruntime in NCHW over its default", "bench_cnn.CnnLayout.track_nchwc_gain", ("inception_v1", "1x224", "default"), "x", "-"),
        Row("models", "ResNet-18, 1x224, FusedConv over the other fusions alone", "bench_cnn.CnnFusion.track_fused_over_unfused", ("resnet18", "1x224"), "x", "0.988x"),
        Row("models", "MobileNetV2, 1x224, FusedConv over the other fusions alone", "bench_cnn.CnnFusion.track_fused_over_unfused", ("mobilenet_v2", "1x224"), "x", "0.975x"),
        Row("models", "ResNet-18, 1x224, Winograd convs over direct ones, one thread", "bench_cnn.CnnWinograd.track_fused_over_unfused", ("resnet18", "1x224", "one"), "x", "-"),
        Row("models", "ResNet-18, 1x224, Winograd convs over direct ones, default threads", "bench_cnn.CnnWinograd.track_fused_over_unfused", ("resnet18", "1x224", "default"), "x", "-"),
        Row("models", "ResNet-50, 1x224, Winograd convs over direct ones, one thread", "bench_cnn.CnnWinograd.track_fused_over_unfused", ("resnet50", "1x224", "one"), "x", "-"),
        Row("models", "ResNet-50, 1x224, Winograd convs over direct ones, default threads", "bench_cnn.CnnWinograd.track_fused_over_unfused", ("resnet50", "1x224", "default"), "x", "-"),
        Row("models", "DenseNet-121, 1x224, Winograd convs over direct ones, one thread", "bench_cnn.CnnWinograd.track_fused_over_unfused", ("densenet121", "1x224", "one"), "x", "-"),
        Row("models", "DenseNet-121, 1x224, Winograd convs over direct ones, default threads", "bench_cnn.CnnWinograd.track_fused_over_unfused", ("densenet121", "1x224", "default"), "x", "-"),
        Row("models", "Inception-v1, 1x224, Winograd convs over direct ones, one thread", "bench_cnn.CnnWinograd.track_fused_over_unfused", ("inception_v1", "1x224", "one"), "x", "-"),
        Row("models", "Inception-v1, 1x224, Winograd convs over direct ones, default threads", "bench_cnn.CnnWinograd.track_fused_over_unfused", ("inception_v1", "1x224", "default"), "x", "-"),
        Row("models", "WinogradConv 3x3 64->64 on 56x56, one thread, over onnxruntime", "bench_ops_nn.WinogradVersusOnnxruntime.track_ratio", ("3x3 64->64 on 56x56",), "x", "-"),
        Row("models", "the same, over rtsoa's direct Conv", "bench_ops_nn.WinogradVersusOnnxruntime.track_over_direct", ("3x3 64->64 on 56x56",), "x", "-"),
        Row("models", "WinogradConv 3x3 128->32 on 56x56 (DenseNet), over onnxruntime", "bench_ops_nn.WinogradVersusOnnxruntime.track_ratio", ("3x3 128->32 on 56x56",), "x", "-"),
        Row("models", "Conv 3x3 16->32 on 32x32, one thread, over onnxruntime", "bench_ops_nn.ConvVersusOnnxruntime.track_ratio", ("3x3 16->32 on 32x32",), "x", "1.78x"),
        Row("models", "MaxPool 3x3/2 on 64x112x112 (ResNet's), one thread, over onnxruntime", "bench_ops_nn.PoolVersusOnnxruntime.track_ratio", ("MaxPool 3x3/2 on 64x112x112",), "x", "-"),
        Row("models", "MaxPool 3x3/2 on 480x28x28 (Inception-v1's), over onnxruntime", "bench_ops_nn.PoolVersusOnnxruntime.track_ratio", ("MaxPool 3x3/2 on 480x28x28",), "x", "-"),
        Row("models", "MaxPool 3x3/1 on 832x7x7 (Inception-v1's), over onnxruntime", "bench_ops_nn.PoolVersusOnnxruntime.track_ratio", ("MaxPool 3x3/1 on 832x7x7",), "x", "-"),
        Row("models", "MaxPool 2x2/2 on 128x112x112 (VGG's), over onnxruntime", "bench_ops_nn.PoolVersusOnnxruntime.track_ratio", ("MaxPool 2x2/2 on 128x112x112",), "x", "-"),
        Row("models", "AveragePool 2x2/2 on 128x56x56 (DenseNet's), over onnxruntime", "bench_ops_nn.PoolVersusOnnxruntime.track_ratio", ("AveragePool 2x2/2 on 128x56x56",), "x", "-"),
        Row("models", "transpose float32 512x512, word copies / byte copies", "bench_ops_movement.CopyWordsVersusBytes.track_words_over_bytes", ("float32 512x512 T",), "x", "0.37x"),
        Row("model-api", "`execute_sync` overhead over the bare run, one Relu", "bench_model_api.ExecuteSyncOverhead.track_overhead_us", unit="us", recorded="16.0-18.5 us"),
        Row("start", "cold `rtsoa run datasets/lowered-4k.rtsoa` (empty caches)", co + "ColdStart.timeraw_run_cold", ("lowered-4k",), recorded="11.7 s"),
        Row("start", "warm `rtsoa run datasets/lowered-4k.rtsoa`, fresh process", co + "ColdStart.timeraw_run_warm", ("lowered-4k",), recorded="0.99 s"),
        Row("start", "cold `rtsoa run datasets/random-10k.rtsoa`", co + "ColdStart.timeraw_run_cold", ("random-10k",), recorded="3.11 s"),
        Row("start", "warm `rtsoa run datasets/random-10k.rtsoa`", co + "ColdStart.timeraw_run_warm", ("random-10k",), recorded="0.65 s"),
        Row("start", "load the example model + one inference, warm, fresh process", md + "ModelStart.timeraw_load_and_first_inference", recorded="0.96 s"),
        Row("start", "cold `rtsoa run datasets/mlp.onnx --inputs ...` (empty caches, lowering included)", co + "ModelColdStart.timeraw_first_run_cold", ("mlp",), recorded="50 s"),
        Row("start", "the same, warm, fresh process", co + "ModelColdStart.timeraw_first_run_warm", ("mlp",), recorded="0.96 s"),
        Row("start", "cold `rtsoa run` of a quarter-width ResNet-18 on 64x64 (empty caches)", co + "ModelColdStart.timeraw_first_run_cold", ("resnet18",), recorded="-"),
        Row("start", "cold compile of the op library, both cores", md + "OpLibraryCold.timeraw_compile", ("cores",), recorded="47.8 s"),
        Row("start", "the same, one core", md + "OpLibraryCold.timeraw_compile", ("one",), recorded="58.1 s"),
        Row("batch", "1,000 jobs of random-10k, 1 local worker", "bench_batch.LocalBatch.track_jobs_per_second_1_worker", unit="jobs/s", recorded="3,726 jobs/s"),
        Row("batch", "the same, 2 local workers", "bench_batch.LocalBatch.track_jobs_per_second_2_workers", unit="jobs/s", recorded="7,155 jobs/s"),
        Row("batch", "2 workers over 1 (median of five pairs)", "bench_batch.LocalBatch.track_two_over_one", unit="x", recorded="1.87x"),
        Row("batch", "per-job overhead, 1 worker", "bench_batch.LocalBatch.track_overhead_ms", unit="ms", recorded="0.16 ms"),
        Row("batch", "parent CPU per job", "bench_batch.LocalBatch.track_parent_cpu_us_per_job", unit="us", recorded="8.4 us"),
        Row("batch", "Dask LocalCluster of 2 workers", "bench_batch.DaskBatch.track_jobs_per_second", unit="jobs/s", recorded="171 jobs/s"),
    ]
    # fmt: on
    return rows


ROWS = _rows()
AREAS = {
    "graph-load": "Graph load",
    "executors": "Executors against C baselines",
    "prepare": "Prepare",
    "device": "Simulated device",
    "models": "Models against onnxruntime",
    "model-api": "Model API overhead",
    "start": "Cold and warm start",
    "batch": "Batch throughput",
    "multithread": "Multi-thread executor",
}


def _machine_info():
    """asv machine fields of this machine, for the machine.json kept with its results (`asv
    machine --yes` records none of them for a named machine)."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    unit = _vector_unit()
    cpu += f" {unit}" if unit else ""
    info = {"os": f"{platform.system()} {platform.release()}", "arch": platform.machine()}
    info |= {"cpu": cpu, "num_cpu": str(os.cpu_count())}
    with contextlib.suppress(OSError, IndexError, ValueError):
        total_kib = int(Path("/proc/meminfo").read_text().split()[1])
        info["ram"] = f"{total_kib // 1024**2} GiB"
    return info


def _strip_interpreter_paths(machine_dir):
    """asv names an existing environment after its interpreter's path; results kept in the
    repository name the Python version instead (`existing-py3.11`)."""
    for path in machine_dir.glob("*-existing-*.json"):
        data = json.loads(path.read_text())
        version = Path(data.get("python", "python")).name.removeprefix("python") or "3"
        name = f"existing-py{version}"
        data["env_name"] = name
        data["python"] = version
        data.get("params", {})["python"] = version
        target = machine_dir / f"{data['commit_hash'][:8]}-{name}.json"
        if target.exists():  # an earlier run of this commit: keep its other benchmarks
            earlier = json.loads(target.read_text())
            data["results"] = {**earlier.get("results", {}), **data.get("results", {})}
            data["durations"] = {**earlier.get("durations", {}), **data.get("durations", {})}
        target.write_text(json.dumps(data, indent=1))
        if target != path:  # a file already named so is the target itself: keep it
            path.unlink()


def _latest_results(results_dir=RESULTS):
    """{benchmark: [(date, machine description, commit, params, values)]} from asv's result
    files (format version 2), newest first."""
    found = {}
    for machine_dir in sorted(path for path in results_dir.glob("*") if path.is_dir()):
        info_path = machine_dir / "machine.json"
        info = json.loads(info_path.read_text()) if info_path.exists() else {}
        described = [str(info[key]) for key in ("cpu", "os") if info.get(key)]
        if info.get("num_cpu"):
            described.insert(1, f"{info['num_cpu']} CPUs")
        machine = ", ".join(described) or machine_dir.name
        for path in machine_dir.glob("*.json"):
            if path.name == "machine.json":
                continue
            data = json.loads(path.read_text())
            columns = data.get("result_columns", [])
            if "result" not in columns:
                continue
            for name, entry in data.get("results", {}).items():
                record = dict(zip(columns, entry, strict=False))
                found.setdefault(name, []).append(
                    (data.get("date", 0), machine, data.get("commit_hash", "")[:8],
                     record.get("params") or [], record.get("result") or [])
                )  # fmt: skip
    for entries in found.values():
        entries.sort(key=lambda entry: entry[0], reverse=True)
    return found


def _value(entry, params):
    """The entry's value at `params` (None when absent or failed)."""
    _, _, _, axes, values = entry
    if not axes:
        return values[0] if values else None
    wanted = [repr(value) for value in params]
    if len(wanted) != len(axes):
        return None
    index = 0
    for axis, value in zip(axes, wanted, strict=True):
        if value not in axis:
            return None
        index = index * len(axis) + axis.index(value)
    return values[index] if index < len(values) else None


SINGULAR = {"threads": "thread"}  # count units that read differently for one


def _format(row, value):
    if row.unit:
        number = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
        if row.unit == "x":
            return f"{number}x"
        unit = SINGULAR.get(row.unit, row.unit) if number == "1" else row.unit
        return f"{number} {unit}"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} s"


def figure_of(row, results):
    """(figure, machine, commit) of a row: the newest asv result, else the recorded one."""
    for entry in results.get(row.benchmark, []):
        value = _value(entry, row.params)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            return _format(row, value), entry[1], entry[2]
    return row.recorded, RECORDED_ON, ""


def _command(row):
    if row.command:
        return row.command
    params = f" ({', '.join(str(value) for value in row.params)})" if row.params else ""
    return f"`{row.benchmark}`{params}"


def render(area, results):
    """The Markdown table of one area."""
    lines = ["| figure | value | command | machine |", "|---|---|---|---|"]
    for row in ROWS:
        if row.area != area:
            continue
        figure, machine, commit = figure_of(row, results)
        where = f"{machine} ({commit})" if commit else machine
        lines.append(f"| {row.figure} | {figure} | {_command(row)} | {where} |")
    return "\n".join(lines)


def _marks(area):
    return f"<!-- perf-table {area} -->", f"<!-- /perf-table {area} -->"


def rewrite(text, results):
    """`text` with each area's table between its marks replaced by `render`'s."""
    for area in AREAS:
        start, end = _marks(area)
        head, found, rest = text.partition(start)
        if not found:
            raise ValueError(f"{PAGE.name} has no {start} mark")
        _, found, tail = rest.partition(end)
        if not found:
            raise ValueError(f"{PAGE.name} has no {end} mark")
        text = f"{head}{start}\n{render(area, results)}\n{end}{tail}"
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="asv run --quick the rows' benchmarks, recorded")
    run.add_argument("-b", "--bench", help="regular expression of benchmarks (default: all rows)")
    run.add_argument("--machine", default=MACHINE, help=f"asv machine name (default {MACHINE})")
    commands.add_parser("write", help="rewrite the tables of docs/performance.md")
    publish = commands.add_parser("publish", help="asv publish into SITE/benchmarks")
    publish.add_argument("site")
    args = parser.parse_args(argv)
    if args.command == "run":
        names = sorted({row.benchmark for row in ROWS})
        pattern = args.bench or "|".join(f"^{name}$" for name in names).replace(".", r"\.")
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        subprocess.run(["asv", "machine", "--yes", "--machine", args.machine], cwd=HERE, check=True)
        command = ["asv", "run", "--python=same", "--quick", "--set-commit-hash", commit]
        command += ["--machine", args.machine]
        status = subprocess.run([*command, "-b", pattern], cwd=HERE).returncode
        machine_dir = RESULTS / args.machine
        _strip_interpreter_paths(machine_dir)
        info = {"machine": args.machine, **_machine_info(), "version": 1}
        (machine_dir / "machine.json").write_text(json.dumps(info, indent=4) + "\n")
        return status
    if args.command == "write":
        PAGE.write_text(rewrite(PAGE.read_text(), _latest_results()))
        return 0
    html = Path(args.site).resolve() / "benchmarks"
    return subprocess.run(["asv", "publish", "--html-dir", str(html)], cwd=HERE).returncode


if __name__ == "__main__":
    sys.exit(main())
