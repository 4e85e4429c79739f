"""One setup's iteration time as SimAI's model gives it, fed with Megatron's real work.

The prediction goes through SimAI's own inputs only, so a user's SimAI gives the same
numbers from the same files:

1. the **workload**: the Megatron schedule (``workload/megatron.py``) of the last pipeline
   stage (it holds the output layer and the loss: the slowest stage sets the pace of the
   1F1B schedule), with full recompute as rows, the interleaved schedule in the header's
   ``vpp``, DP as an all-reduce or the distributed optimizer's pair, and every row's compute
   from the kernel model (``aiob/megatron_kernels.py``), the optimizer step included; with
   context parallelism a CP rank's kernels and, in the core attention's row, the exchange
   it waits for (``with_cp_exchange``);
2. the **flags**: the network's ``-g_p_s -n_p_s -nv -nic``, and ``-tp_o -dp_o -pp_o`` for
   what Megatron overlaps and for the pipeline sends (``simulate/overlap.py``);
3. the **simulation**: the built-in engine (SimAI_analytical in closed form).

``Prediction.flags()`` are the SimAI command-line flags of the same run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..aiob import megatron_kernels as mk
from ..aiob.gpus import GpuSpec
from ..setup.network import Network
from ..setup.training import TrainingSetup
from ..simulate.engine import Ratios, simulate
from ..simulate.overlap import Overlap, megatron_overlap, pipeline_link_gbps
from ..workload import megatron
from ..workload import megatron_context_parallel as context_parallel
from ..workload.format import Workload

BREAKDOWN = ("compute_s", "exposed_tp_s", "exposed_dp_s", "pp_s", "bubble_s", "optimizer_s")


# What NCCL's collectives reach of a link's line rate, as NCCL's maintainers give it:
# NVLink, "with the protocol overhead (~20%)" 370 of NVLink4's 450 GB/s (NVIDIA/nccl-tests
# issue 212) and about 160 of an A800's 200 (NVIDIA/nccl issue 412); InfiniBand, "24GB/s is
# the peak performance per 200G NIC" (NVIDIA/nccl-tests issue 119; NVIDIA/nccl issue 1576:
# 192 GB/s all-reduce bus bandwidth on a DGX A100's eight 200 Gb/s NICs).
NVLINK_EFFICIENCY = 0.80
NIC_EFFICIENCY = 0.96
# SimAI divides bytes by 2^30 and by its bandwidth flags: its "GB/s" are GiB/s.
GB_IN_SIMAI_UNITS = 1e9 / 2**30


@dataclass(frozen=True)
class Cluster:
    """The network: GPUs and NICs per server, and the datasheets' NVLink and NIC bandwidths
    (GB/s, 10^9 bytes, per direction per GPU and per NIC)."""

    gpus_per_server: int
    nics_per_server: int
    nvlink_gbps: float
    nic_gbps: float

    def simai_gbps(self) -> tuple[float, float]:
        """SimAI's ``-nv`` and ``-nic``: what NCCL reaches of each link, in SimAI's unit."""
        return (self.nvlink_gbps * NVLINK_EFFICIENCY * GB_IN_SIMAI_UNITS,
                self.nic_gbps * NIC_EFFICIENCY * GB_IN_SIMAI_UNITS)


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


# Rows of the last stage that the other stages do not have: SimAI's bubble leaves them out.
LAST_STAGE_ONLY = ("optimizer", "output_layer", "output_layer_wgrad_gather", "cross_entropy_max",
                   "cross_entropy_target", "cross_entropy_sum_exp")
BUBBLE_EXEMPT = "embedding_layer"  # the one row name SimAI's bubble skips


def off_the_bubble(workload: Workload) -> Workload:
    """``workload`` with the last stage's own rows (the output layer, the loss, the
    optimizer step) under SimAI's ``embedding_layer`` name, which its bubble skips.

    SimAI's bubble is (p - 1) / (v ga) times the rows' compute and communication: the fill
    and drain at the pace of the simulated (last) stage. But the last stage is the one that
    waits: the first micro-batch reaches it after passing the p - 1 stages before it, the
    last one's gradients leave it for the same p - 1 stages, none of which holds the output
    layer, the cross entropy or (once per iteration, after the drain) the optimizer step.
    Skipping those rows makes SimAI's bubble the other stages' fill and drain exactly (the
    first stage's embedding, a gather, is left out with them)."""
    rows = tuple(replace(row, name=BUBBLE_EXEMPT) if row.name in LAST_STAGE_ONLY else row
                 for row in workload.rows)
    return replace(workload, rows=rows)


def with_cp_exchange(times: mk.RowTimes, setup: TrainingSetup, cluster: Cluster) -> mk.RowTimes:
    """``times`` with the CP exchange that the attention waits for added to the core
    attention's row (``attention_proj``): forward to its forward, backward (and, with
    selective recompute, the forward's again) to its input gradient.

    SimAI's workload has no CP group, so the exchange cannot be a row; as time the
    attention spends, it reaches SimAI's compute and its bubble as it reaches the GPU
    (``workload/megatron_context_parallel.exposed_us``). The link is what NCCL reaches
    of NVLink or of the rank's NIC share, as for every other collective here."""
    if setup.cp == 1:
        return times
    nvlink = cluster.nvlink_gbps * NVLINK_EFFICIENCY
    nic = cluster.nic_gbps * NIC_EFFICIENCY
    link = context_parallel.link_gbps(setup, cluster.gpus_per_server, cluster.nics_per_server, nvlink, nic)
    fwd_us, bwd_us = context_parallel.exposed_us(setup, times.cp_step_us, link)
    if setup.recompute_mode == "selective":
        bwd_us += fwd_us
    f, i, w = times.rows["attention_proj"]
    return replace(times, rows={**times.rows, "attention_proj": (f + fwd_us, i + bwd_us, w)})


def _fewest_digits(gbps: float) -> float | int:
    return int(gbps) if gbps.is_integer() else gbps


def predict(setup: TrainingSetup, gpu: GpuSpec, sw: mk.Software, cluster: Cluster,
            ratios: Ratios | None = None) -> Prediction:
    """The predicted iteration of ``setup`` (already configured by ``sw.configure``)."""
    stage = setup.pp - 1
    times = with_cp_exchange(mk.row_times(setup, gpu, sw, parameters=megatron.local_parameters(setup, stage)),
                             setup, cluster)
    sched = megatron.schedule(setup, stage=stage, times=times, pp_scatter_gather=sw.scatter_gather_pp)
    as_scheduled = sched.workload()
    workload = off_the_bubble(as_scheduled) if setup.pp > 1 else as_scheduled
    nvlink, nic = (round(x, 3) for x in cluster.simai_gbps())
    # The flags in the fewest digits (-nv 150, not 150.0), as the validation's commands.sh gives them.
    plain = Network(gpus=setup.world_size, gpus_per_server=cluster.gpus_per_server,
                    nics_per_server=cluster.nics_per_server, nvlink_gbps=_fewest_digits(nvlink),
                    nic_gbps=_fewest_digits(nic))
    overlap = megatron_overlap(
        sched, plain, ratios,
        wgrad_gemm_us={k: w for k, (w, _) in times.gemm_us.items()},
        dgrad_gemm_us={k: d for k, (_, d) in times.gemm_us.items()},
        fwd_gemm_us=times.fwd_gemm_us,
        async_tp=sw.async_tp, overlap_grad_reduce=sw.overlap_grad_reduce,
        tp_comm_overlap=sw.tp_comm_overlap, overlap_p2p=sw.overlap_p2p,
        pp_link_gbps=pipeline_link_gbps(setup, cluster.gpus_per_server, cluster.nics_per_server, nvlink, nic),
        workload=workload,
    )
    network = replace(plain, **overlap.flags())
    sim = simulate(workload, network, ratios)
    c = sim.components
    assert c is not None  # the engine cuts a file short only in SimAI's bug-reproducing mode
    optimizer_us = sum(row.wg_compute for row in as_scheduled.rows if row.name in ("optimizer", "dp_param_allgather")) / 1000
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
