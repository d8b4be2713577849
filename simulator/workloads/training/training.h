// A training job on the world: iterations of a catalog model with tensor parallelism inside
// each pipeline stage, pipeline stages under GPipe or 1F1B over micro-batches, and data
// parallelism across pipeline replicas. Compute comes from the cost model; every transfer
// (TP all-reduces, activations and gradients between stages, the DP gradient all-reduce) is a
// flow on the world's fabric, every time it happens.
#pragma once
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hardware/cost_model.h"
#include "network/collective.h"
#include "recorder/training_results.h"
#include "workloads/training/terapipe.h"
#include "world/world.h"

namespace sluice::training {

enum class Schedule { GPipe, OneFOneB };

// Token-level slicing of each sequence (TeraPipe): slices of a micro-batch enter the pipeline
// one after another (GPipe order: every forward, then the backwards in reverse slice order).
struct SlicingConfig {
  SlicingPolicy policy = SlicingPolicy::None;
  int slices = 1;          // uniform: this many slices
  int granularity = 8;     // slice lengths in steps of this many tokens
  double candidate_gap = 1e-3;  // terapipe: see TeraPipeOptions
};

struct TrainingConfig {
  ModelSpec model;
  HardwareSpec hardware;
  int tp = 1, pp = 1, dp = 1;
  // Context parallelism (Megatron's CP, ring attention): each sequence split over this many
  // ranks per (replica, stage), each holding 2 of its 2 cp chunks (i and 2cp - 1 - i: causal
  // attention's work balanced); every layer's keys and values go around the CP ring as flows
  // while its attention runs; gradients are reduced over dp x cp. Devices: tp x cp x pp x dp,
  // tensor parallel fastest, then context parallel, then data parallel, then pipeline stages.
  int cp = 1;
  // How the keys and values move (Megatron's --cp-comm-type): p2p, ring attention, each step's
  // block arriving while the previous block's attention runs (the last block's attention after
  // the ring); allgather, Llama 3's choice, every rank's keys and values gathered first and
  // then all of the attention (the gather exposed; the backward reduce-scatters their gradients
  // after its attention, timed as one exposed exchange of the same bytes before it).
  enum class CpComm { P2P, AllGather };
  CpComm cp_comm = CpComm::P2P;
  Schedule schedule = Schedule::OneFOneB;
  int micro_batches = 1;       // m per pipeline replica per iteration
  int micro_batch_size = 1;    // sequences per micro-batch
  // ZeRO stage over the data-parallel replicas: 0 none; 1 the optimizer state sharded
  // (Megatron's distributed optimizer: gradients reduce-scattered, each replica updates its
  // shard, the parameters all-gathered); 2 the gradients sharded too (memory only: the same
  // traffic as 1); 3 the parameters sharded too (training_zero3.cpp).
  int zero = 0;
  // ZeRO-3: layers whose gathers may run ahead of the one computing (FSDP prefetches one; each
  // more hides more of a pipeline's waits and holds one more layer's parameters whole).
  int zero3_prefetch = 1;
  // Expert parallelism of a mixture-of-experts model (Megatron-Core's EP): the experts spread
  // over groups of this many consecutive data-parallel replicas (1: every replica holds every
  // expert); with context parallelism, of consecutive dp x cp ranks, context-parallel fastest
  // (Megatron-Core's folding). Every MoE layer's forward and backward moves its tokens by two
  // all-to-alls inside the group; expert gradients are all-reduced over the expert-data-parallel
  // group (the dp x cp / ep ranks holding the same experts), the rest over all dp x cp
  // (CostModel: MoeOptions::data_parallel_ep).
  int ep = 1;
  MoeOptions::Routing routing = MoeOptions::Routing::Uniform;  // uniform or zipf over the experts
  double zipf_s = 1.0;
  // moe.alltoall_overlap: an op's all-to-alls run while its stage computes the next op when that
  // goes the other way (TrainingJob::release_to_exchange), the compute at overlap_stretch().
  bool alltoall_overlap = false;
  // moe.token_dispatcher: alltoall sends a row per (token, expert) pair (Megatron-Core's alltoall
  // dispatcher); flex (false) a token once per device its experts are on (DeepEP).
  bool rows_per_expert = false;
  // The linear layers' GEMMs (forward, input and weight gradients): bf16, or fp8 (E4M3 at the
  // device's FP8 rate, the MoE dispatch in FP8, as DeepSeek-V3 trained and Transformer Engine
  // runs it). Master weights, gradients and optimizer state keep their types (memory unchanged).
  Precision precision = Precision::BF16;
  // Interleaved 1F1B (Megatron): each pipeline rank holds this many model chunks, the model
  // cut into pp x v virtual stages (virtual stage j on rank j mod pp); 1: plain 1F1B.
  int virtual_stages = 1;
  int sequence = 2048;
  int iterations = 1;          // 0: runs as long as the other workloads
  bool recompute = false;      // full activation recomputation (one more forward in the backward)
  // Multi-token prediction modules trained beside the model (DeepSeek-V3: 1; Megatron-Core's
  // mtp_num_layers), on the last pipeline stage: each one more decoder layer of the model's last
  // kind, a 2h -> h projection, and its own pass through the shared embedding and LM head.
  int mtp_layers = 0;
  // Megatron's cross_entropy_loss_fusion (its native fused vocabulary-parallel cross-entropy):
  // the loss in 3 kernels forward and 1 backward instead of 6 and 2 (TrainingJob::loss_ns).
  bool loss_fusion = false;
  // Dropout in training (Megatron's attention_dropout / hidden_dropout above 0, its GPT default of
  // 0.1): the one-byte masks of the attention's and the MLP's output dropout are kept for the
  // backward (Korthikanti et al.'s sbh each a layer). false: none, as for models whose reference
  // code has no dropout (Llama, Mixtral, DeepSeek-V3): PyTorch's dropout at p = 0 returns its
  // input and saves no mask. Unset: the model's (ModelSpec::dropout); dropout_masks() reads it.
  std::optional<bool> dropout;
  bool dropout_masks() const { return dropout.value_or(model.dropout); }
  // Decoder layers on the first and the last pipeline stage (0: the even split), as Megatron's
  // decoder_first/last_pipeline_num_layers; the stages between split the rest.
  int first_stage_layers = 0, last_stage_layers = 0;
  net::CollectiveKind dp_algorithm = net::CollectiveKind::AllReduceRing;
  net::CollectiveKind tp_algorithm = net::CollectiveKind::AllReduceRing;  // ring, NVLS or auto
  std::string tables_dir;
  std::shared_ptr<const HardwareSpec> tables_device;  // derived tables: the device they were measured on
  double cost_time_scale = 1;  // every kernel time x this: an end of the cost model's error band (CostOptions::time_scale)
  std::string cost_source;                            // how it is costed, in words (CostSource::describe)
  double optimizer_bytes_per_param = 28;  // Adam, mixed precision: read and write fp32 master, m, v and bf16 weight
  // Failures: a failure stops the job; it restarts from its last checkpoint.
  int64_t checkpoint_interval_ns = 0;  // 0: no checkpoints (a failure loses everything since the start)
  int64_t checkpoint_write_ns = 0;     // the job pauses this long to write one (checkpoint_to: pause)
  // checkpoint_to: storage: every device writes its share of the checkpoint (the model's
  // weights and Adam state once, spread over all the job's devices) to the cluster's storage
  // servers as flows on the fabric; the write lasts until the last byte lands.
  bool checkpoint_to_storage = false;
  // Hot spares: whole servers the job holds idle (their device indices, each server's in
  // order); a failed server is swapped for a healthy spare at once (one in its own rack when
  // there is one), and the repaired server joins the spares.
  int spare_servers = 0;
  std::vector<std::vector<int>> spares;
  int64_t restart_ns = 0;              // from healthy devices to training again (reload, re-init)
  int64_t collective_timeout_ns = 0;   // a transfer making no progress this long fails the job (its group is cut off)
  std::array<int, 3> slice_cubes{0, 0, 0};  // the TPU slice shape in cubes when placed as a slice (it may re-form there)
  bool slice_twisted = false;               // and whether it is wired twisted where its shape allows (place.twisted)
  SlicingConfig slicing;
};

// Devices a job runs on: tp x cp x pp x dp.
inline int job_devices(const TrainingConfig& c) { return c.tp * c.cp * c.pp * c.dp; }
// Parameters one device of pipeline rank `rank` holds: its chunks' decoder layers split over
// tp (latent attention's down projections whole), 1/ep of their routed experts (`experts`; with
// ep = 1 they count as dense and shard with the rest), the embedding on the first rank, the LM
// head and final norm on the last (a tied embedding on both when they differ, as Megatron holds it).
struct RankParameters {
  double dense = 0, experts = 0;
  double total() const { return dense + experts; }
};
RankParameters rank_parameters(const TrainingConfig& c, int rank);
// Decoder layers pipeline rank `rank` holds, over its chunks (MTP modules not counted).
int rank_layers(const TrainingConfig& c, int rank);
// The pipeline rank holding the most parameters (the first of equals).
int heaviest_rank(const TrainingConfig& c);
// Parameters one device of the heaviest rank holds.
double params_per_device(const TrainingConfig& c);
// The most routed experts' parameters a device holds, over the ranks (1/ep of its layers' under
// expert parallelism; 0 without it, when every device holds every expert and they shard like the rest).
double expert_params_per_device(const TrainingConfig& c);
// The most, over the ranks, of the parameters whose optimizer state (ZeRO-1) and gradients (ZeRO-2) a device keeps:
// ZeRO shards each parameter over the ranks that hold it, the dense ones over dp x cp, a
// device's experts over its expert-data-parallel group of dp x cp / ep (Megatron-Core's
// distributed optimizer with expert parallelism). Times bytes_per_param: their bytes.
double sharded_params_per_device(const TrainingConfig& c, double bytes_per_param = 1);
// The same for one rank's parameters.
double sharded_params_per_device(const RankParameters& p, const TrainingConfig& c, double bytes_per_param = 1);
// What one device writes of a checkpoint: the model's weights and fp32 Adam state (master,
// m, v: 12 bytes a parameter) once, every expert included, spread evenly over all the job's
// devices (Megatron's distributed checkpoint, PyTorch DCP).
double checkpoint_bytes_per_device(const TrainingConfig& c);
// One micro-batch's activations kept by one layer on one tensor-parallel rank, after
// Korthikanti et al. (2022, with sequence parallelism) with FlashAttention's kernels (the
// attention the cost model times): no s x s scores, queries, keys and values by their widths
// (grouped-query attention), the MLP's by its width and kind, a mixture-of-experts layer's by
// the experts a token visits (layers averaged over the model's dense and MoE layers). A GPT
// layer (f = 4h): (34·s·b·h + 4·a·s·b) / tp.
double layer_activation_bytes(const TrainingConfig& c);
// Model FLOPs a token costs in an iteration (forward and backward), what MFU counts: 6 x the
// parameters it passes through (a mixture of experts: its k experts'), plus attention's
// 12 x layers x hidden x sequence (QK^T and AV, not halved for the causal mask, as Megatron
// counts it); latent attention at its own widths, 6 x layers x sequence x heads x
// (head_dim + rope + v_head_dim).
double model_flops_per_token(const TrainingConfig& c);
// The fullest pipeline rank's memory per device: its parameters' states, and activations for the
// micro-batches it holds at once (GPipe: all m; 1F1B: at most pp - r on rank r), of its own
// layers: layer_activation_bytes per layer, or 2·s·b·h per layer with full recomputation; / cp;
// on the last rank the loss's fp32 softmax of each head's logits (s·b / cp x vocab / tp x 4 bytes)
// for the micro-batches whose backward has not run.
TrainingMemory training_memory(const TrainingConfig& c);
// The job as its report names it (recorder/training_results.h).
TrainingSetup training_setup(const TrainingConfig& c);
// The checks a job's shape must pass, each failing at its key: tensor parallelism divides the
// heads (in `parallel`), no more stages than layers, the sequence within the context (in `job`).
void check_training_shape(const TrainingConfig& c, const Params& job, const Params& parallel);


// A training job on `devices` of `world` (placed and claimed by the caller, in rank order):
// for studies that place jobs themselves (workloads/cluster/pod_study.cpp). After
// world.run(), training_results() gives what it measured.
std::unique_ptr<Workload> make_training_job(const std::string& name, TrainingConfig cfg, World& world, std::vector<int> devices);
// The results of a job made by make_training_job; throws std::invalid_argument for another workload.
const TrainingResults& training_results(const Workload& job);

}  // namespace sluice::training
