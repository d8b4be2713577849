// The pieces an iteration's cost is summed from (hardware/cost_model_impl.h and the files it
// includes; cost_model.cpp alone includes them, so they keep internal linkage): the operations,
// their sources, one part of an iteration, the sinks that sum or list parts, and the decode
// table's share function without its search loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hardware/tables.h"

namespace sluice {

namespace {

using costtab::Ceilings;
using costtab::Estimate;

enum class Op : uint8_t {
  Embed, Qkv, O, GateUp, Down, AttnPrefill, AttnDecode, AttnLayout, KvWrite, Norm, Rope, RopeAngles, Act, Residual,
  FinalNorm, LmHead, Argmax, Sampling, AllReduce, AllGather, PpSend, Glue, Router, TopK, Experts, SharedGateUp, SharedDown, AllToAll, Quant, QA, QB, KVA, KVB,
  MtpProj, MlaConcat, KVBContext, MlaContext, Count
};
enum class Src : uint8_t { Table, Scaled, Roofline, Analytic, Network, Fitted };
enum class File : uint8_t { None, Gemm, Decode, Prefill, Slice, Elementwise };

const char* file_name(File f) {
  switch (f) {
    case File::Gemm: return "gemm.csv";
    case File::Decode: return "attention_decode.csv";
    case File::Prefill: return "attention_prefill.csv";
    case File::Slice: return "attention_slice.csv";
    case File::Elementwise: return "elementwise.csv";
    case File::None: break;
  }
  return "";
}

// One operation's contribution, before names and strings are attached.
struct Part {
  Op op;
  Src src;
  File file;
  double ns, flops, bytes;
  double kernels = 1;
  bool at_precision = false;  // costed against the precision's ceilings (pceil): derive() moves it by them
  // n of it (n layers, n calls): its time, FLOPs, bytes and kernels n times over.
  Part& times(double n) {
    ns *= n, flops *= n, bytes *= n, kernels *= n;
    return *this;
  }
};

// Sums parts (the hot path).
struct SumSink {
  double total = 0;
  void operator()(const Part& p) { total += p.ns; }
};

// Collects parts merged by (op, source) (the breakdown).
struct ListSink {
  std::vector<Part> parts;
  void operator()(const Part& p) {
    for (auto& q : parts)
      if (q.op == p.op && q.src == p.src && q.file == p.file) {
        q.ns += p.ns;
        q.flops += p.flops;
        q.bytes += p.bytes;
        q.kernels += p.kernels;
        return;
      }
    parts.push_back(p);
  }
};

// DecodeTable::share without its search loop: a row's segment is the number of inner knots
// below l (the knots ascend strictly), counted without a branch per knot, so a batch of mixed
// lengths costs no mispredicted branches. Same value as share(row, l), bit for bit.
struct Share {
  const double *k, *a, *b;
  size_t last;
  double floor;
  explicit Share(const costtab::DecodeTable::Row& r)
      : k(r.knot.data()), a(r.a.data()), b(r.b.data()), last(r.a.size() - 1), floor(r.floor_ns) {}
  double operator()(double l) const {
    size_t s = 0;
    for (size_t j = 1; j <= last; ++j) s += l > k[j] ? 1 : 0;
    const double v = a[s] + b[s] * l;
    return v > floor ? v : floor;
  }
};

constexpr long kCacheSize = 16384;  // token counts (M) and sampled rows (R) cached per model

}  // namespace

}  // namespace sluice
