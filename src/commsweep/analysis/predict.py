"""One setup's iteration time as SimAI's model gives it, fed with Megatron's real work.

The prediction goes through SimAI's own inputs only, so a user's SimAI gives the same
numbers from the same files:

1. the **workload**: the Megatron schedule (``workload/megatron.py``) of the last pipeline
   stage (it holds the output layer and the loss: the slowest stage sets the pace of the
   1F1B schedule), with full recompute as rows, the interleaved schedule in the header's
   ``vpp``, DP as an all-reduce or the distributed optimizer's pair, and every row's compute
   from the kernel model (``aiob/megatron_kernels.py``), the optimizer step included;
2. the **flags**: the network's ``-g_p_s -n_p_s -nv -nic``, and ``-tp_o -dp_o -pp_o`` for
   what Megatron overlaps and for the pipeline sends (``simulate/overlap.py``);
3. the **simulation**: the built-in engine (SimAI_analytical in closed form).

``Prediction.flags()`` are the SimAI command-line flags of the same run.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..aiob import megatron_kernels as mk
from ..aiob.gpus import GpuSpec
from ..setup.training import TrainingSetup
from ..simulate.engine import Network, Ratios, simulate
from ..simulate.overlap import Overlap, megatron_overlap, pipeline_link_gbps
from ..workload import megatron
from ..workload.format import Workload

BREAKDOWN = ("compute_s", "exposed_tp_s", "exposed_dp_s", "pp_s", "bubble_s", "optimizer_s")


@dataclass(frozen=True)
class Cluster:
    """SimAI's network flags: GPUs per server, NICs per server, NVLink and NIC GB/s."""

    gpus_per_server: int
    nics_per_server: int
    nvlink_gbps: float
    nic_gbps: float


@dataclass(frozen=True)
class Prediction:
    """Seconds per iteration and its parts (they sum to ``total_s``), and what made them."""

    total_s: float
    compute_s: float  # every row's compute but the optimizer step
    exposed_tp_s: float
    exposed_dp_s: float
    pp_s: float
    bubble_s: float
    optimizer_s: float
    workload: Workload
    network: Network
    overlap: Overlap

    def breakdown(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in BREAKDOWN}

    def flags(self) -> list[str]:
        """SimAI_analytical's flags for the same run (with ``-w`` the workload, ``-r`` a prefix)."""
        return self.network.flags()


def predict(setup: TrainingSetup, gpu: GpuSpec, sw: mk.Software, cluster: Cluster,
            ratios: Ratios | None = None) -> Prediction:
    """The predicted iteration of ``setup`` (already configured by ``sw.configure``)."""
    stage = setup.pp - 1
    times = mk.row_times(setup, gpu, sw, parameters=megatron.local_parameters(setup, stage))
    sched = megatron.schedule(setup, stage=stage, times=times, pp_scatter_gather=sw.scatter_gather_pp)
    workload = sched.workload()
    plain = Network(gpus=setup.world_size, gpus_per_server=cluster.gpus_per_server,
                    nics_per_server=cluster.nics_per_server, nvlink_gbps=cluster.nvlink_gbps,
                    nic_gbps=cluster.nic_gbps)
    overlap = megatron_overlap(
        sched, plain, ratios,
        wgrad_gemm_us={k: w for k, (w, _) in times.gemm_us.items()},
        dgrad_gemm_us={k: d for k, (_, d) in times.gemm_us.items()},
        fwd_gemm_us=times.fwd_gemm_us,
        async_tp=sw.async_tp, overlap_grad_reduce=sw.overlap_grad_reduce,
        tp_comm_overlap=sw.tp_comm_overlap, overlap_p2p=sw.overlap_p2p,
        pp_link_gbps=pipeline_link_gbps(setup, cluster.gpus_per_server, cluster.nics_per_server,
                                        cluster.nvlink_gbps, cluster.nic_gbps),
        workload=workload,
    )
    network = Network(gpus=setup.world_size, gpus_per_server=cluster.gpus_per_server,
                      nics_per_server=cluster.nics_per_server, nvlink_gbps=cluster.nvlink_gbps,
                      nic_gbps=cluster.nic_gbps, **overlap.flags())
    sim = simulate(workload, network, ratios)
    c = sim.components
    assert c is not None  # the engine cuts a file short only in SimAI's bug-reproducing mode
    optimizer_us = sum(row.wg_compute for row in workload.rows if row.name in ("optimizer", "dp_param_allgather")) / 1000
    return Prediction(
        total_s=sim.total_us / 1e6,
        compute_s=(c["compute"] - optimizer_us) / 1e6,
        exposed_tp_s=c["exposed_tp"] / 1e6,
        exposed_dp_s=(c["exposed_dp"] + c["exposed_dp_ep"]) / 1e6,
        pp_s=c["exposed_pp"] / 1e6,
        bubble_s=c["bubble"] / 1e6,
        optimizer_s=optimizer_us / 1e6,
        workload=workload, network=network, overlap=overlap,
    )
