// The training job's class, shared by the files that define its parts (internal to the
// training workload: everything else uses training.h): training.cpp runs iterations (compute,
// hand-offs, collectives), training_plan.cpp plans token slices and estimates a schedule,
// training_recovery.cpp handles failures, checkpoints and restarts, training_steady.cpp
// fast-forwards repeated iterations.
#pragma once
#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/busy_profile.h"
#include "network/flow.h"
#include "workloads/training/training.h"
#include "workloads/training/training_tape.h"

namespace sluice::training::detail {

CostOptions cost_options(const TrainingConfig& c);

class TrainingJob final : public Workload, public EventHandler, public net::FlowSink {
 public:
  TrainingJob(std::string name, TrainingConfig cfg, World& world, std::vector<int> devices);

  // Megatron's rank order: tensor parallel fastest, then data parallel, then pipeline stages.
  void map_devices(const std::vector<int>& devices);

  void start(World& w) override;
  bool holds_world() const override { return c_.iterations > 0 && !done_; }
  void finish(World& w) override;

  void on_devices_changed(World& w, const std::vector<int>& devices, bool up) override;
  void before_devices_fail(World& w, const std::vector<int>& devices) override;
  void report(Recorder& rec, bool scoped) const override;
  std::string metrics_key() const override { return "training"; }
  WorkUnits work_done() const override;
  const TrainingResults& results() const { return res_; }

  void on_event(Engine& e, uint32_t kind, uint32_t arg) override;

  void on_flow_done(Engine&, uint64_t tag) override;

 private:
  enum : uint32_t { kCompute = 1, kIterationEnd = 2, kCheckpointDone = 3, kRestart = 4, kWatchdog = 5, kRecover = 6, kSkipDone = 7, kOptimizerDone = 8, kCpRing = 9, kCpTail = 10, kPartialGuard = 11 };
  enum class State { Running, Checkpointing, Recovering };
  // Schedules an event of this generation `delay_ns` from now (a failure voids it).
  void schedule(uint32_t kind, int64_t delay_ns, uint32_t arg = 0) {
    world_.engine().schedule_in(SimTime::ns(delay_ns), Priority::Compute, this, kind, arg, Generation(gen_));
  }
  // A pass of one unit: a micro-batch, or with token slicing one slice of one micro-batch
  // (unit = micro-batch x slices + slice).
  struct Op {
    bool forward;
    int mb;  // the unit
  };
  struct Stage {
    Stage() = default;
    Stage(Stage&&) = default;  // moved only (it owns collectives in flight)
    Stage& operator=(Stage&&) = default;
    Stage(const Stage&) = delete;
    Stage& operator=(const Stage&) = delete;
    std::vector<Op> order;
    size_t next = 0;
    bool busy = false;
    std::vector<char> f_in, b_in;
    // Its hand-offs go out on one communication stream, in order: one at a time, the rest wait.
    struct Send {
      int to, mb;
      bool grad;
    };
    std::deque<Send> outbox;
    bool sending = false;
    int64_t busy_ns = 0, op_start_ns = 0, last_end_ns = 0;
    // The op's tensor-parallel all-reduces: one fused ring per context-parallel rank.
    std::vector<std::unique_ptr<net::Collective>> tp_collectives;
    int tp_left = 0;
    // Context parallelism (training_cp.cpp): the op's ring of keys and values (one all-gather
    // ring per tensor-parallel rank over the CP ranks), what the op still waits for (its
    // compute, its ring), when each ended, and the ring's time past the compute this iteration.
    std::vector<std::unique_ptr<net::Collective>> cp_ring;
    int cp_wait = 0, cp_ring_left = 0;
    int64_t cp_attention_ns = 0;  // the op's attention (before a straggler's factor)
    int64_t cp_ring_start_ns = 0, cp_compute_end_ns = 0, cp_ring_end_ns = 0, cp_exposed_ns = 0;
    // moe.alltoall_overlap: the op holding the stage (its index in `order`), ops done this
    // iteration, and the op released to its all-to-alls while the next one computes (at most
    // one: its index, -1 for none, and when it started); when that op's all-to-alls were on the
    // fabric (-1: not yet started / not yet ended); the computing op's work left (ns at full
    // speed) and the instant it was counted to (finish_compute).
    size_t running = 0, done = 0;
    int released = -1;
    int64_t released_start_ns = 0, released_compute_end_ns = 0;
    int64_t xfer_start_ns = -1, xfer_end_ns = -1;
    double work_left_ns = 0;
    int64_t work_at_ns = 0;
    // ZeRO-3 (training_zero3.cpp): the running op's compute in layers, each waiting for its own
    // gather: the layer computing (or next to), how many, the op's whole compute (ns), whether it
    // waits for a gather and since when, and the op's time spent so waiting (not busy).
    int seg = 0, segs = 1;
    bool seg_wait = false;
    int64_t seg_total_ns = 0, seg_wait_since_ns = 0, op_wait_ns = 0;
    int64_t seg_attention_ns = 0;  // with context parallelism: the op's attention, of seg_total_ns (unslowed, as cp_begin takes it)
  };

  int slot(int d, int s) const { return d * c_.pp + s; }
  // Ops per rank and direction: a unit of each of its chunks (index chunk x units + unit).
  int rank_units() const { return units_ * c_.virtual_stages; }
  // The virtual stage an op of slot sl on unit index u runs: its chunk's, on the slot's rank.
  int virtual_stage(int sl, int u) const { return u / units_ * c_.pp + sl % c_.pp; }
  // The slot of the same replica `step` ranks on (wrapping: interleaving hands the last rank's
  // chunk to the first rank's next).
  int neighbour(int sl, int step) const { return sl - sl % c_.pp + (sl % c_.pp + step + c_.pp) % c_.pp; }
  int64_t fwd_ns(int s, int slice) const { return fwd_ns_[static_cast<size_t>(s * n_slices_ + slice)]; }
  int64_t bwd_ns(int s, int slice) const { return bwd_ns_[static_cast<size_t>(s * n_slices_ + slice)]; }
  // A pass's backward from its forward: twice it, three times recomputing.
  int64_t backward_of(int64_t forward_ns) const { return forward_ns * (c_.recompute ? 3 : 2); }
  // One pass of virtual stage vs over `rows` tokens whose layers' forward (the LM heads over
  // every row on the last) the cost model gives as `layers_ns`: its forward and backward as the
  // schedule runs them, and the loss within them. The backward is twice the forward (three
  // times recomputing) but for the last stage's LM heads (never recomputed: Megatron's full
  // recomputation checkpoints the decoder layers) and the cross-entropy (loss_ns), whose
  // backward is its own.
  struct PassNs {
    int64_t forward = 0, backward = 0, loss = 0;  // loss: the cross-entropy's forward + backward
  };
  PassNs pass_of(int vs, double rows, int64_t layers_ns) const;
  // pass_of's figures into fwd_ns_ and bwd_ns_ at `at`, its loss added to loss_ns_ (the plans').
  void set_pass(size_t at, int vs, double rows, int64_t layers_ns) {
    const PassNs p = pass_of(vs, rows, layers_ns);
    fwd_ns_[at] = p.forward;
    bwd_ns_[at] = p.backward;
    loss_ns_ += p.loss;
  }
  // Megatron's vocabulary-parallel cross-entropy over `rows` tokens of every LM head on the last
  // stage (the main one and each MTP module's) over the rank's vocab / tp logits: forward and
  // backward, ns (training_plan.cpp says which kernels).
  std::pair<double, double> loss_ns(double rows) const;
  // A stage's forward of a slice as the schedule runs it: the cost model's ns, at least 1.
  static int64_t pass_ns(double cost_ns) { return std::max<int64_t>(1, std::llround(cost_ns)); }
  double unit_tokens(int unit) const {
    return static_cast<double>(c_.micro_batch_size) * slice_len_[static_cast<size_t>(unit % n_slices_)];
  }

  // For each stage boundary of replica 0, what handing over activations costs when the
  // fabric carries nothing else: every tensor-parallel rank sends its share at once over its
  // route, so a link that k of them cross gives each 1/k of it. The slicing DP's estimate of a
  // slice's hand-off (the simulation itself times every send as flows).
  void measure_handoffs();
  // The same for a stage's tensor-parallel ring (replica 0, stage 0; every stage's ring has the
  // same shape): the ring's slowest edge, and a step's route latency.
  void measure_tp_ring();
  // A pass's tensor-parallel collectives on stage s over `tokens` tokens (tp_pass), as the fused ring
  // the simulation runs (2(n-1)/n of the bytes over the slowest edge, every step's latency).
  double tp_ns(double tokens, int s, bool forward) const;
  // One direction of the slowest boundary for `tokens` tokens: each rank's share of the activations.
  double handoff_ns(double tokens) const;

  // The forward/backward phase of one iteration with these slices, as the schedule runs it on
  // an otherwise idle fabric: every stage takes its ops in schedule order, each once its input
  // has arrived (the previous stage's activations or the next stage's gradients; the last
  // stage's backward after its own forward), for its compute and then its tensor-parallel
  // all-reduces. Sends do not hold a stage, but a stage's sends leave one after another and a
  // stage receives one after another (its links carry them in turn: where hand-offs take longer
  // than compute, as over one 25 Gb/s NIC, they queue). Returns the last stage op's end.
  double schedule_ns(const std::vector<int>& lengths);
  static constexpr int kMaxUniformSlices = 64;  // uniform slicings judged beside the DP's candidates

  // The slices of a micro-batch's sequences (policy none: the whole sequence as one) and each
  // stage's forward time of each: slice i of l tokens after c costs f(l, c) on every stage
  // (cost model: the stage's own layers, attention over the c cached tokens, the LM head over
  // every token on the last stage; for the formula also its tensor-parallel all-reduces), its
  // backward 2f (3f recomputing; the schedule itself also has the loss and the LM head's
  // exemption from recomputation, pass_of). The policies choose
  // lengths by TeraPipe's formula over the m micro-batches, T = m sum a + (K-1) max t, with
  // f, b the slowest stage's and x the slice's hand-off: t = f + b + 2x (one slice's way down
  // and back up the pipeline) and a = max(f, x) + max(b, x) (a stage sends while it computes
  // the next slice, so per slice it is held by the slower of the two); x = 0 on one stage.
  void plan_slices();

  // The order in which stage s runs its forward (F) and backward (B) passes. Token slicing
  // runs under GPipe over units: slices of a micro-batch in order, backwards in reverse unit
  // order, so a slice's backward follows the later slices' on its stage (they hand it the
  // gradient of its keys and values) and the next stage's backward of the same slice.
  std::vector<Op> schedule_order(int s) const { return schedule_order(s, units_); }
  std::vector<Op> schedule_order(int s, int m) const;

  void start_iteration();

  void try_run(int sl);

  void compute_done(int sl);
  // The op's compute (and under context parallelism its ring) is done: its tensor-parallel
  // all-reduces, one fused ring per context-parallel rank.
  void tp_allreduces(int sl);
  // The op's compute and tensor-parallel all-reduces are done: with expert parallelism and MoE
  // layers on its stage, it joins its EP group's all-to-alls (alltoall_arrive), else it is done.
  void comm_done(int sl);
  // moe.alltoall_overlap: the op `oi` just done computing may leave its all-to-alls to run while
  // the stage computes its next op: when that one goes the other way (a forward beside a
  // backward, as Megatron-Core's overlap and DeepSeek's DualPipe pair them) and no other op's
  // all-to-alls are out. Time the stage waits idle while they run counts as busy, as an op's
  // all-to-alls count when it holds the stage through them.
  bool release_to_exchange(int sl, size_t oi) const;
  // moe.alltoall_overlap: the compute event of slot sl's op. Its work ran at 1 / overlap_stretch()
  // while a released op's all-to-alls were on the fabric: true when it is done, else the rest
  // is scheduled (at the rate it runs now) and false.
  bool finish_compute(int sl);
  // Slot sl reached the all-to-alls of its current op. Once every slot of its EP groups has
  // (ep_slots() of them; they run the same schedule, so the op's index names the same op on
  // each), the dispatch and combine of every MoE layer of the op's stage start as one fused
  // all-to-all per EP group and tensor-parallel rank (a route latency per layer,
  // CollectiveOptions::fused_count); when all are done, every member slot's op is done.
  void alltoall_arrive(int sl, size_t oi);
  // Expert parallelism's groups, as Megatron-Core folds them: a stage's dp x cp ranks of one
  // tensor-parallel rank, in rank order (context-parallel fastest: u = d cp + c), cut into
  // groups of ep consecutive ranks. A group spans ep_slots() replicas (slots) whole, or, when
  // ep < cp, a slot holds cp / ep groups. The ranks holding the same experts (u mod ep alike)
  // are expert_replicas() many: the expert-data-parallel group.
  int ep_slots() const { return std::max(1, c_.ep / c_.cp); }
  int expert_replicas() const { return c_.dp * c_.cp / c_.ep; }
  // A (group of slots, pipeline rank) pair's index, for slot sl.
  int ep_group_slot(int sl) const { return sl / c_.pp / ep_slots() * c_.pp + sl % c_.pp; }
  // A unit's exchanges' worth of all-to-alls per iteration: its forward's and its backward's, and
  // the recomputed forward's under full recomputation.
  int exchanges_per_unit() const { return c_.recompute ? 3 : 2; }
  // The layers (virtual) stage vs runs: its decoder layers and, on the last, the multi-token
  // prediction modules' (each a layer's all-reduces, ring attention and latencies).
  int layers_run(int vs) const {
    const LayerRange r = cost_.stage_range(vs);
    return r.count + r.mtp;
  }
  // The tensor-parallel collectives a pass of virtual stage vs runs, fused into one ring per op,
  // as all-reduces' worth (a reduce-scatter or an all-gather counts half: half the steps' latencies
  // and half the bytes a device sends per buffer byte; training runs Megatron's sequence
  // parallelism, so the ends below are those):
  //   - the decoder layers' two a layer (each an all-gather and a reduce-scatter), and with expert
  //     parallelism a shared expert's output on each MoE layer besides (CostModel::tp_allreduce_bytes
  //     carries their bytes); a backward under full recomputation runs them twice (the recomputed
  //     forward's own, then the backward's);
  //   - on the first stage, the embedding's reduce-scatter into the sequence-parallel region
  //     (forward; its backward an all-gather), never recomputed; with learned positions
  //     (GPT-3) Megatron all-reduces the embedding instead and splits it (an all-reduce forward,
  //     the split's all-gather backward);
  //   - on the last, each LM head's all-gather of the sequence before it (forward; a
  //     reduce-scatter of its input's gradient backward) and its cross-entropy's all-reduces of
  //     per-token fp32 scalars (forward: the logits' max, the target's logit and the sum of
  //     exponentials, three; two with loss_fusion, which sends the last two as one);
  //   - each multi-token prediction module's embedding (as the first stage's), its projection's
  //     all-gather of its [embedding; hidden] input along the sequence (2h a token) and of its
  //     output across tp before the sequence is scattered again (forward; backward, the
  //     scatter's all-gather and the input gradient's reduce-scatter); the projection and its
  //     gathers sit in the module's checkpoint with its layer, so a recomputing backward runs
  //     the two gathers again (the embedding outside it does not).
  // Not run: the backward's re-gather of each column-parallel linear's sequence-parallel input
  // for its weight gradient (QKV and FC1 a layer, the LM heads, the MTP projection: about one
  // all-reduce's worth more a layer), which Megatron overlaps with the input gradient's GEMM:
  // its time is taken as hidden, and its bytes are not on the links.
  struct TpPass {
    double count = 0;   // all-reduces' worth (each pays a ring's steps' latencies)
    double layers = 0;  // times the layers' bytes (CostModel::tp_allreduce_bytes): 1, 2 recomputing
    double extra_per_token = 0;  // the rest, in all-reduce buffer bytes a token
    double bytes(const CostModel& cost, double tokens, int vs) const {
      return layers * cost.tp_allreduce_bytes(tokens, vs) + extra_per_token * tokens;
    }
  };
  TpPass tp_pass(int vs, bool forward) const;

  // A stage's hand-offs leave in the order its ops finish, one at a time (a pipeline engine
  // posts them on one NCCL stream, whose send kernels run in turn); each waits for the one
  // before it to arrive.
  void send(int from, int to, int mb, bool grad);
  void send_arrived(int from);
  void start_send(int from, int to, int mb, bool grad);

  // Op `oi` of slot sl is done (compute, all-reduces, all-to-alls): its hand-off, and the stage's next.
  void op_done(int sl, size_t oi);

  // Every replica finished stage s's backward: its gradients are all-reduced across the data
  // parallel replicas, one collective per tensor-parallel rank, while other stages still work.
  void stage_backward_done(int s);

  void optimizer_done();
  // Pipeline rank s's gradients are reduced over its data-parallel group; once every rank's (and
  // the embedding group's) are, the optimizer steps.
  void stage_reduced(int s);
  // Megatron's embedding group (finalize_model_grads, after the data-parallel reduction): with
  // pp > 1 the first and last pipeline ranks both hold the word embedding when the LM head is
  // tied to it or MTP modules read it, and all-reduce its gradient (vocab / tp x hidden a
  // device, the gradients' dtype) between them, one pair per (replica, CP rank, TP rank).
  bool embedding_group() const { return c_.pp > 1 && (c_.model.tied_embeddings || c_.mtp_layers > 0); }
  // What each device of the group all-reduces: its vocab / tp rows of the table (0 without a group).
  double embedding_grad_bytes() const {
    return embedding_group() ? static_cast<double>(c_.model.vocab) / c_.tp * c_.model.hidden * c_.model.dtype_bytes : 0.0;
  }
  void embedding_allreduce();

  void iteration_end(Engine& e);

  // What follows an iteration's end: done, a checkpoint, or the next iteration.
  void after_iteration(int64_t now);

  // --- Steady-state fast-forward ------------------------------------------------------------
  // An iteration that starts with nothing moving on the fabric (flows a failure left stalled
  // on dead links may sit there at rate 0), and during which no other handler
  // receives an event (none was pending before its end, and only handlers that run can add
  // one), ran alone: what it did depends on the world's state at its start, which it leaves
  // as it found it (its flows done, its collectives over), and not on the time it started
  // (the engine and fabric work in differences of time; a completion quantum is checked).
  // The next iteration, started the same way, repeats it exactly. Two such iterations in a
  // row that counted the same (time, events, flows, the fabric's exact ledger, bubble, busy
  // time) are the evidence that nothing hidden in the job's state differs; from then on, until
  // the next event another handler receives, a checkpoint is due, the job is done or the
  // run's horizon, the iterations are counted at once (skip_done) instead of simulated. Exact:
  // --no-fast-forward simulates every one and gives the same outputs (tests/test_training_ff.cpp).
  struct Counts {
    uint64_t events = 0, side = 0, flows = 0;
    int64_t dp_ns = 0, a2a_ns = 0, cp_ns = 0;
    net::FlowLedger fabric;
  };
  // What happened between two counts over ns: events (the watchdog's left out), flows, the
  // fabric's ledger. A steady iteration's and a checkpoint write's record.
  struct Span {
    int64_t ns = 0;
    uint64_t events = 0, flows = 0;
    net::FlowLedger fabric;
    bool operator==(const Span&) const = default;
  };
  static Span span(const Counts& from, const Counts& to, int64_t ns);
  struct Steady : Span {
    int64_t dp_ns = 0, a2a_ns = 0, cp_ns = 0;
    double bubble = 0;  // this iteration's term of bubble_sum_
    std::vector<double> busy;
    bool operator==(const Steady&) const = default;
  };
  Counts counts() const;
  void observe_start();
  void observe_end(int64_t now, double bubble_term);
  void next_iteration();
  // Counts iterations at once when the last one is known to repeat (see above). False: run
  // the next one.
  bool try_skip();
  void skip_done(Engine& e);
  // A restart, or the iteration after one another handler's event cut into, that finds the
  // world as the last proven steady iteration found it takes that iteration as its last one,
  // instead of simulating two to prove it again. The iteration is a function of the world's
  // state at its start (above); its state here is the fabric's shape (FlowSim::shape_digest:
  // every link's ends, state, bandwidth, capacity), the job's devices and their slowdowns, on
  // an empty fabric. False (another state, or no skip fits): simulate the iteration.
  uint64_t state_key() const;
  bool resume_steady();
  // Checkpoint writes to storage, the same way: a write that starts on an empty fabric and ends
  // before any other handler acts is a function of the world's state at its start. Two alike in
  // a row from one state prove it; a later write from that state is counted at once (one event
  // at its end, its ledger replayed) when it would end before any other handler's event, the
  // run's horizon and the watchdog's next instant. False: write it with flows.
  bool replay_checkpoint(int64_t now);
  void observe_checkpoint_end(Engine& e);

  // --- Partial iterations on tape (training_tape.cpp) ----------------------------------------
  // The iteration proven steady is taped (IterationTape: its counts instant by instant, its
  // flows); a later iteration from the same state that the next event in the world (a failure
  // of the job's own devices) will cut short is not simulated: the job stands for it up to the
  // failure and counts there what the tape counted before that instant. Exact, as the skip is:
  // a failure cuts every transfer of the job (FlowSim::cancel), so the cut iteration leaves
  // nothing behind but its counts (tests/test_training_ff.cpp compares --no-fast-forward).
  IterationTape::Scalars tape_counts() const;
  void start_tape();
  std::unique_ptr<IterationTape> stop_tape();
  void keep_tape(std::unique_ptr<IterationTape> t, const Steady& r);
  bool stand_in_partial();
  void replay_partial(int64_t now);
  std::unique_ptr<IterationTape> taping_, tape_;  // the iteration being taped; the proven one's
  uint64_t taping_key_ = 0, tape_key_ = 0;        // the states they started in
  bool standing_in_ = false;                       // no iteration simulated: the failure ahead cuts it
  int64_t stand_in_start_ = 0;

  // --- Context parallelism (training_cp.cpp) ---------------------------------------------------
  // Each sequence cut into 2 cp chunks, CP rank i holding chunks i and 2cp - 1 - i (Megatron's
  // load balancing of causal attention); ring attention passes every rank's keys and values
  // around the CP ring while each layer's attention runs, so an op is its GEMMs and then the
  // slower of its attention and its ring, or (cp_comm: allgather) the ring and then the attention
  // (see training_cp.cpp).
  bool cp() const { return c_.cp > 1; }
  // Per virtual stage: the forward of a CP rank's two chunks (the slowest rank's), into
  // fwd_ns_, and the attention within it, into cp_attn_ns_.
  void plan_cp();
  // The op just started on slot sl: its compute runs `dur` ns of which `attention` are attention;
  // the ring starts after the rest (the layer's GEMMs before its attention).
  void cp_begin(int sl, int64_t dur, int64_t attention);
  // kCpRing: the ring of the op in progress starts (one all-gather ring of the stage's keys and
  // values per tensor-parallel rank, a route latency per layer; a backward twice it, the keys
  // and values again and their gradients, three times recomputing).
  void cp_start(int sl);
  // The op's rings are all done: p2p, the last block's attention (kCpTail); allgather, all of
  // the attention (kCompute).
  void cp_ring_done(int sl);
  // The op's compute or its ring's tail ended: once both have, its all-reduces.
  void cp_part_done(int sl, bool ring);
  // Bytes of keys and values one device gathers over a forward of the whole sequence on
  // virtual stage vs (its tensor-parallel share of the KV heads, every layer of the stage).
  double cp_kv_bytes(int vs) const;
  std::vector<int64_t> cp_attn_ns_;  // per virtual stage
  int64_t cp_ns_total_ = 0;          // the ring's time past compute, replica 0's busiest rank, summed over iterations

  // --- Failures -----------------------------------------------------------------------------
  // The work since the last checkpoint (or restart) is kept: it counts as useful.
  void keep_work(int64_t now);
  void checkpoint_done(Engine& e);
  // checkpoint_to: storage: every device's share as a flow to a storage server (device k to
  // server k mod servers); checkpoint_done when the last lands.
  void write_checkpoint();
  static constexpr uint64_t kCheckpointTarget = 0xFFFFFF;  // a flow tag's target field: a checkpoint write
  // A device of the job failed: everything in flight is void, the work since the last
  // checkpoint is lost, and the iterations after it will be done again.
  void fail_stop(World& w);
  bool all_up() const;
  bool computes_on(const std::vector<int>& devices) const;  // one of them is a device it computes on (not a spare)
  // Where to train again: the same devices once healthy; on a TPU pod slice, a slice re-formed
  // at once from healthy free cubes (OCS: the healthy cubes kept and a spare for each failed
  // one; static: any healthy contiguous free block), else the same cubes after repair.
  void recover(World& w);
  void reform(World& w);
  void restart_done(Engine& e);
  void arm_watchdog();
  // A transfer that makes no progress for the timeout (its group cut off by failed links)
  // fails the job for good.
  void watchdog(Engine& e);

  TrainingConfig c_;
  World& world_;
  CostModel cost_;
  std::vector<std::vector<int>> nodes_;  // per (replica, stage): topology nodes of its tp ranks
  std::vector<char> active_;                    // per world device: 1 when the job computes on it (not a spare)
  // Hot spares: swaps each server of the job that has a failed device for a healthy spare
  // server (its own rack's first); one that finds none waits for its repair.
  void swap_spares(World& w);
  // `ns` of compute on devices_[first, first + n) (a slot's tp ranks: slot_first_device), at the
  // slowest one's speed.
  int64_t slowed(int64_t ns, size_t first, size_t n) const;
  size_t slot_first_device(int sl) const { return static_cast<size_t>(((sl % c_.pp) * c_.dp + sl / c_.pp) * c_.cp * c_.tp); }
  // Devices a slot (a replica's pipeline rank) runs on: its tp x cp ranks.
  int slot_devices() const { return c_.tp * c_.cp; }
  // The nodes that reduce stage s's gradients of tensor-parallel rank k: every replica's context-
  // parallel ranks (Megatron's data-parallel group with context parallelism), in rank order.
  std::vector<int> dp_group(int s, int k) const;
  // Expert-parallel group member j's expert-data-parallel group for stage s, tensor-parallel rank
  // k: replicas j, j + ep, ... (those holding the same experts).
  std::vector<int> expert_dp_group(int j, int s, int k) const;
  std::vector<Stage> stages_;
  std::vector<int> pending_;             // flows left per (stage slot, micro-batch, direction)
  std::vector<int64_t> fwd_ns_, bwd_ns_;  // per (stage, slice): stage x slices + slice
  int64_t loss_ns_ = 0;                   // one micro-batch's cross-entropy, forward and backward (all its slices)
  std::map<std::pair<int, int>, std::vector<double>> stage_cache_;  // slice_stage_ns by (tokens, prefix), for schedule_ns
  std::vector<int> slice_len_;            // tokens per slice (one slice: the sequence)
  int n_slices_ = 1, units_ = 1;          // slices per micro-batch; passes per stage and direction
  double handoff_ns_per_byte_ = 0, handoff_latency_ns_ = 0, ring_ns_per_byte_ = 0, ring_latency_ns_ = 0;
  std::vector<int> stage_bwd_done_, stage_dp_left_;
  std::vector<std::unique_ptr<net::Collective>> dp_live_;
  double tokens_ = 0, params_per_device_ = 0, dp_bytes_ = 0;
  // Expert parallelism: the expert gradients' bytes (reduced over the dp x cp / ep ranks holding
  // the same experts), the most over the pipeline ranks (reported).
  double expert_dp_bytes_ = 0;
  // Per pipeline rank, what a device's data-parallel collectives carry: its dense parameters'
  // bytes and its experts' (the first rank holds the embedding, the last the LM head, a rank
  // its layers' experts); dp_bytes_ is the rank holding the most parameters' (reported).
  std::vector<double> stage_dense_bytes_, stage_expert_bytes_;
  // Per (group of ep_slots() slots, pipeline rank): by op index (the members run the same
  // schedule), members arrived at the op's all-to-alls, those still running, their start and
  // collectives (one per EP group and tensor-parallel rank); the all-to-all time this iteration; the collectives, kept until a
  // later round starts and finds them finished. Without alltoall_overlap, one round at a time.
  struct Exchange {
    struct Round {
      int arrived = 0, left = 0;
      std::vector<std::unique_ptr<net::Collective>> collectives;
    };
    std::map<size_t, Round> rounds;
    // All-to-all time this iteration: while at least one round is on the fabric (rounds out
    // together count once), from when the first of them started.
    int64_t iteration_ns = 0, flying_since_ns = 0;
    int flying = 0;
    std::vector<std::unique_ptr<net::Collective>> live;  // ended rounds' collectives, freed when the next starts
  };
  std::vector<Exchange> a2a_;
  int64_t a2a_ns_total_ = 0;
  int64_t optimizer_ns_ = 0, iter_start_ns_ = 0, last_backward_ns_ = 0, dp_ns_total_ = 0;
  int gather_left_ = 0;  // ZeRO: parameter all-gathers still running
  // ZeRO-3 (training_zero3.cpp), by gathering unit (a layer of an op: a stage's units numbered
  // in op order, z3_base_ the first of each op, pp x (ops + 1)): per stage, the units whose
  // parameters are gathered and the gather's collectives still running; per (stage, unit), the
  // replicas that started it and that finished its backward; per stage, its gradient
  // reduce-scatters still running.
  std::vector<int> z3_base_, z3_gathered_, z3_gather_left_, z3_started_, z3_bwd_done_, z3_rs_left_;
  // Per stage: the next unit to gather, and the units every replica has started (a prefix).
  std::vector<int> z3_next_, z3_all_started_;
  bool zero3() const;
  void z3_begin_iteration();
  int z3_unit(int s, size_t op) const { return z3_base_[static_cast<size_t>(s) * (stages_[0].order.size() + 1) + op]; }
  int z3_units(int s) const { return z3_unit(s, stages_[0].order.size()); }
  // Stage s's unit `unit` in the per-(stage, unit) counts (z3_started_, z3_bwd_done_: pp rows of
  // the most units a stage has), and the op of its schedule the unit belongs to.
  size_t z3_at(int s, int unit) const {
    return static_cast<size_t>(s) * (z3_started_.size() / static_cast<size_t>(c_.pp)) + static_cast<size_t>(unit);
  }
  size_t z3_op(int s, int unit) const;
  // Starts stage s's collectives of one kind (returns how many) for one unit of its op `op`: the
  // dense parameters over its data-parallel replicas, and with expert groups a device's experts
  // over each one.
  int z3_collectives(net::CollectiveKind kind, int s, size_t op, uint64_t salt, const std::function<void()>& done);
  int z3_count() const;  // how many that is
  // The running op of slot sl: its compute of `ns` begins, in layers (an op takes its first once
  // that layer is gathered; with context parallelism each layer is its share of the op's GEMMs,
  // attention and ring, `ns` before a straggler's factor, which cp_begin applies); a layer ended
  // (false: that was the op's last); a waiting layer starts if its gather is done.
  void z3_begin_op(int sl, int64_t ns);
  void z3_unit_started(int s, int unit);
  bool z3_layer_done(int sl);
  void z3_resume(int sl);
  void z3_layer(int sl);
  void start_dp_collective(net::CollectiveKind kind, std::vector<int> group, double bytes, uint64_t salt, bool fused,
                           std::function<void(Engine&)> done);
  void z3_gather(int s, int unit);
  // Stage s's next gather, if none is on the fabric (one stream: FSDP's all-gathers run in turn)
  // and it is at most zero3_prefetch units ahead of those every replica has started.
  void z3_try_gather(int s);
  bool z3_ready(int sl, int unit) const;
  void z3_backward_done(int s, int unit);
  int stages_reduced_ = 0, iterations_done_ = 0, pid_ = 0;
  int ends_reduced_ = 0, embedding_left_ = 0;  // the first and last ranks reduced; embedding all-reduces in flight
  double bubble_sum_ = 0;
  BusyProfile busy_profile_;  // each iteration over its span at its stages' mean busy fraction (peak power)
  bool done_ = false;
  uint64_t flows_ = 0;
  TrainingResults res_;
  // Failures.
  std::vector<int> devices_;
  net::Graveyard graveyard_;  // collectives a failure cancelled, kept while their events may still come
  uint32_t gen_ = 0;
  State state_ = State::Running;
  bool faults_ = false, restart_pending_ = false, decide_pending_ = false;
  int kept_iterations_ = 0, measured_ = 0;
  int ckpt_left_ = 0;  // checkpoint flows still writing (checkpoint_to: storage)
  int64_t start_ns_ = 0, mark_ns_ = 0, ckpt_start_ns_ = 0, failed_at_ns_ = 0, progress_ns_ = 0, watchdog_at_ = 0;
  // Steady-state fast-forward (see try_skip).
  uint64_t side_events_ = 0;     // events of this job that are no iteration's work: the watchdog's
  bool start_alone_ = false;     // the iteration in progress started with nothing on the fabric
  bool last_alone_ = false;      // the last iteration ran alone (last_ holds what it counted)
  bool steady_ = false;          // ... and repeated the one before it exactly
  int64_t others_at_start_ = 0;  // the first event another handler had pending when it started
  int64_t clean_until_ = 0;      // no other handler acts before this time (from the last lone iteration)
  int64_t skipping_ = 0;         // iterations a pending kSkipDone stands for
  std::string cause_;            // the fault process whose failure the job recovers from
  Counts start_counts_;
  Steady last_;
  bool key_at_start_ok_ = false;  // the iteration in progress started on an empty fabric, in state key_at_start_
  uint64_t key_at_start_ = 0;
  bool ckpt_obs_ = false;        // the write in progress started on an empty fabric: observed
  uint64_t ckpt_obs_key_ = 0;    // ... in this state,
  int64_t ckpt_obs_others_ = 0;  // ... with another handler's first event then here,
  Counts ckpt_obs_counts_;       // ... and these counts
  bool ckpt_rec_ok_ = false, ckpt_proven_ = false, ckpt_replaying_ = false;
  uint64_t ckpt_rec_key_ = 0;  // the last observed write's state, and what it did
  Span ckpt_rec_;
  bool proven_ok_ = false;  // proven_ is a steady iteration (two alike in a row) started in state proven_key_
  uint64_t proven_key_ = 0;
  Steady proven_;
};

}  // namespace sluice::training::detail
