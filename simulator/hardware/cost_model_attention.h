// Attention of a batch for the cost model (part of hardware/cost_model.cpp's translation unit,
// included at the end of cost_model_impl.h): decode from the measured table (the serving hot
// path: shares read from a table built at construction) or the roofline (latent attention
// always), fresh prompts as one batched call, chunks after a cached prefix one call each.
#pragma once

#include "hardware/cost_model_impl.h"

namespace sluice {

// Latent attention's heads assembled from their parts, a copy each (read once, written once; a
// kernel each, every layer). A prompt's tokens (fresh or a chunk, and training's; not absorbed)
// get whole keys: each head's non-rope part beside the one shared rotary key (vLLM's and
// Megatron-Core's torch.cat of k_nope and k_pe expanded over the heads), H (nope + rope) written
// from H nope + rope read; under PyTorch (Megatron-Core, Hugging Face) their queries too, each
// head's non-rope and rotary parts, H (nope + rope) both ways (vLLM's prefill turns the rotary
// part of its projected query in place). A decode's absorbed query is each head's latent-space
// part beside its rotary part, H x latent (kv_lora_rank + rope) both ways: vLLM's FlashMLA path
// concatenates them in every profile (SGLang writes them into one buffer; not modelled). A
// chunk's cached context is mla_context's. `queries`: the decodes' query tokens (1 + drafts
// each); the prompts' tokens are read from `prompts`.
template <class Sink>
void CostModel::Impl::mla_concat(std::span<const SeqWork> prompts, double queries, Sink& sink, double L) const {
  if (!mla) return;
  double prompt = 0;
  for (const SeqWork& s : prompts)
    if (s.new_tokens > 1) prompt += s.new_tokens;
  const double rope = m.qk_rope_head_dim, nope = m.head_dim;
  Part p = copies_part(Op::MlaConcat, {prompt * (H * (2 * nope + rope) + rope) * b,
                                       impl != Implementation::Fused ? prompt * 2 * H * (nope + rope) * b : 0, queries * 2 * H * latent * b});
  if (p.kernels > 0) sink(p.times(L));
}

// The cached context behind a prompt chunk (a later chunk of a chunked prefill, or the part of a
// prompt a prefix cache held): the cache holds only its latent, and the prefill's multi-head
// attention needs whole keys and values, so the engine builds them again for every chunk
// (vLLM's _compute_prefill_context; SGLang's chunked-prefix path does the same): the context's
// latent gathered from the paged cache into a workspace (read at the cache's bytes, written at
// the activations'), up-projected through the latent's up-projection (kv_b, the same weights as
// the chunk's own: gemm.kv_b_context, one GEMM over every chunk's context, as vLLM batches the
// prefills' contexts through one workspace; its splitting of contexts longer than the workspace
// is not modelled), each head's key assembled from its non-rope part and the shared rotary key
// (as a prompt's), and the chunk's attention over the context merged with its attention over
// itself (merge_attn_states: both outputs read, one written; vLLM merges every prompt token of
// the batch once any prompt has a context). The copies are one op, three kernels a layer
// (elementwise.mla_context), four in FP8 or FP4, where the latent rows are quantized for the
// GEMM as every GEMM input is (quant_parts, which counts the new tokens only). (The attention
// over the context itself is the chunk's prefill part, which already sees context + chunk.)
template <class Sink>
void CostModel::Impl::mla_context(std::span<const SeqWork> prompts, Sink& sink, double L) const {
  if (!mla) return;
  double context = 0, tokens = 0;
  for (const SeqWork& s : prompts)
    if (s.new_tokens > 1) context += s.context, tokens += s.new_tokens;
  if (context <= 0) return;
  sink(layer_gemm(Op::KVBContext, lkv_b, context).times(L));
  const double rope = m.qk_rope_head_dim, nope = m.head_dim, lora = m.kv_lora_rank;
  const bool quantized = prec == Precision::FP8 || prec == Precision::FP4;
  sink(copies_part(Op::MlaContext, {context * latent * (kvb + b), quantized ? context * lora * (b + ab) : 0,
                                    context * (H * (2 * nope + rope) + rope) * b, tokens * 3 * H * m.v_head_dim * b})
           .times(L));
}

template <class Sink, bool kDetail>
void CostModel::Impl::attention_parts(std::span<const SeqWork> batch, long nd, Sink& sink, double L, long drafted, bool paged_context) const {
  if (nd > 0) {
    double t = 0, flops = 0, bytes = 0, floor_ns = 0;  // floor: a measured kernel's least time
    Src src = Src::Roofline;
    File file = File::None;
    if (decode && dplan.group >= 0) {
      const auto& g = decode->groups()[static_cast<size_t>(dplan.group)];
      size_t lo = 0, hi = 0;
      double w = 0;
      if (static_cast<size_t>(nd) < dbracket.size()) {  // the rows around nd, computed at construction
        const Bracket& br = dbracket[static_cast<size_t>(nd)];
        lo = br.lo;
        hi = br.hi;
        w = br.w;
      } else {
        decode->bracket(g, static_cast<double>(nd), &lo, &hi, &w);
      }
      const auto& rl = g.rows[lo];
      const auto& rh = g.rows[hi];
      const double r = dplan.len_scale;
      double s_lo = 0, s_hi = 0, lmax = 0, lsum = 0;
      bool out = !dplan.exact || static_cast<double>(nd) > g.rows.back().batch;
      // The hot loop: each decode sequence's share on the two batch rows around nd, summed
      // in batch order (the same sums, term for term, as DecodeTable::share gives them).
      const Share sl(rl), sh(rh);
      const bool two = hi != lo;
      if constexpr (!kDetail) {
        // Shares read from dshare (the same values, computed at construction) for contexts
        // it holds; the longest length from the longest context (l grows with it, and so
        // does its rounded product with r).
        const double* tl = dshare.data() + lo * static_cast<size_t>(dshare_ctx);
        const double* th = dshare.data() + hi * static_cast<size_t>(dshare_ctx);
        const auto n = static_cast<unsigned>(dshare_ctx);
        int cmax = -1;
        int64_t keys = 0;  // the keys read, where derive() or an FP8 cache needs them (as integers: exact)
        // One loop per case, its tests out of the loop: every sequence decodes (the steady
        // decode of a serving replica) or not, one row or two, keys counted or not. The sums
        // are the same.
        auto sum = [&]<bool kAllDecode, bool kTwo, bool kKeys>() {
          for (const SeqWork& s : batch) {
            if (!kAllDecode && s.new_tokens != 1) continue;
            const int c = s.context;
            cmax = c > cmax ? c : cmax;
            if (kKeys) keys += c + 1;
            if (static_cast<unsigned>(c) < n) {
              s_lo += tl[c];
              if (kTwo) s_hi += th[c];
            } else {
              const double l = static_cast<double>(c + 1) * r;
              s_lo += sl(l);
              if (kTwo) s_hi += sh(l);
            }
          }
        };
        auto run = [&]<bool kKeys>() {
          if (static_cast<size_t>(nd) == batch.size()) {
            if (two) sum.template operator()<true, true, kKeys>();
            else sum.template operator()<true, false, kKeys>();
          } else if (two) {
            sum.template operator()<false, true, kKeys>();
          } else {
            sum.template operator()<false, false, kKeys>();
          }
        };
        if (moved_decode) run.template operator()<true>();
        else run.template operator()<false>();
        lsum = static_cast<double>(keys);  // (a double sum of the same integers: equal below 2^53)
        const double l = static_cast<double>(cmax + 1) * r;
        lmax = l > 0 ? l : 0;
      } else {
        for (const SeqWork& s : batch) {
          if (s.new_tokens != 1) continue;
          const double l = static_cast<double>(s.context + 1) * r;
          s_lo += sl(l);
          if (two) s_hi += sh(l);
          lmax = l > lmax ? l : lmax;
          lsum += s.context + 1;
          out = out || l < rl.knot.front() || l > rl.knot.back() || l < rh.knot.front() || l > rh.knot.back();
        }
      }
      t = w > 0 ? std::exp((1 - w) * std::log(s_lo) + w * std::log(s_hi)) : s_lo;
      t = costtab::DecodeTable::at_least_longest_alone(t, g, rl, rh, w, static_cast<double>(nd), lmax);
      t = t > g.min_ns ? t : g.min_ns;
      floor_ns = g.min_ns;
      src = out ? Src::Scaled : Src::Table;
      file = File::Decode;
      // (derive() and an FP8 cache move the part by its FLOPs and bytes: lsum, summed above.)
      if (kDetail || moved_decode) {
        flops = 4 * hd * H * lsum;
        bytes = b * hd * (2 * KV * lsum + 2 * H * static_cast<double>(nd));
      }
      if (kv8) [[unlikely]] {
        // The tables time a bf16 cache: an FP8 one reads half the keys' bytes (the ratio of the
        // two rooflines; the dequantization rides in the kernel).
        const double b8 = hd * (kvb * 2 * KV * lsum + b * 2 * H * static_cast<double>(nd));
        const double r0 = costtab::roof_ns(flops, bytes, ceil);
        if (r0 > 0) t = g.min_ns + std::max(0.0, t - g.min_ns) * costtab::roof_ns(flops, b8, ceil) / r0;  // the kernel's floor kept
        bytes = b8;
      }
    } else {
      // The keys read, summed as integers: the same value as a double sum (exact below 2^53)
      // without its chain of floating-point adds.
      int64_t keys = 0;
      for (const SeqWork& s : batch)
        if (s.new_tokens == 1) keys += s.context + 1;
      const double lsum = static_cast<double>(keys);
      if (mla) {
        // Absorbed latent attention: every head scores against the latent and its rotary key,
        // and sums the latent: one shared "key" of `latent` per token, read once.
        flops = 2 * H * (2 * latent - m.qk_rope_head_dim) * lsum;
        bytes = kvb * latent * lsum + b * 2 * H * latent * static_cast<double>(nd);
      } else {
        flops = 4 * hd * H * lsum;
        bytes = hd * (kvb * 2 * KV * lsum + b * 2 * H * static_cast<double>(nd));
      }
      t = roof(flops, bytes);
    }
    if (drafted > 0) [[unlikely]] {
      // Speculative verification: a sequence scores its 1 + d tokens in one call over the same
      // cache (a decode kernel taking several queries per sequence, as FlashAttention's and
      // FlashMLA's do): the keys are read once (d more of them), the FLOPs grow with the queries
      // (query i of 1 + d sees context + 1 + i keys). The plain decode's time (measured or
      // roofline) moved by the ratio of the two rooflines, a measured kernel's floor kept.
      const double per_key = mla ? 2 * H * (2 * latent - m.qk_rope_head_dim) : 4 * hd * H;
      const double key_bytes = mla ? kvb * latent : hd * kvb * 2 * KV;
      const double query_bytes = mla ? b * 2 * H * latent : hd * b * 2 * H;
      double keys = 0, scored = 0, queries = 0;
      for (const SeqWork& s : batch) {
        if (s.new_tokens != 1) continue;
        keys += s.context + 1;
        queries += 1 + s.drafts;
        scored += (1.0 + s.drafts) * (s.context + 1) + 0.5 * s.drafts * (s.drafts + 1);
      }
      const double f0 = per_key * keys, b0 = key_bytes * keys + query_bytes * static_cast<double>(nd);
      const double fv = per_key * scored, bv = key_bytes * (keys + static_cast<double>(drafted)) + query_bytes * queries;
      const double r0 = costtab::roof_ns(f0, b0, ceil);
      if (r0 > 0) t = floor_ns + std::max(0.0, t - floor_ns) * costtab::roof_ns(fv, bv, ceil) / r0;
      flops = fv;
      bytes = bv;
      if (src == Src::Table) src = Src::Scaled;
    }
    sink(Part{Op::AttnDecode, src, file, t * L, flops * L, bytes * L, L});
  }
  if (static_cast<size_t>(nd) == batch.size()) {
    mla_concat(std::span<const SeqWork>{}, nd + drafted, sink, L);
    return;
  }
  // Chunks after a cached prefix: one attention call each. Fresh prompts (no prefix) are one
  // batched call: it costs as a single prompt of the same causal FLOPs, sqrt(sum of l^2)
  // tokens (a batch fills the device as a longer prompt does), never less than its longest
  // prompt alone.
  double sq = 0, lmax = 0, n_fresh = 0;
  auto emit = [&](Part p, double kernels) {
    p.ns = in_step(p.ns, p.flops, p.bytes) * L;
    p.flops *= L;
    p.bytes *= L;
    p.kernels = kernels * L;
    sink(p);
  };
  for (const SeqWork& s : batch) {
    if (s.new_tokens <= 1) continue;
    if (s.context > 0 || !prefill || pgroup < 0) {
      emit(prefill_part(s.new_tokens, s.context), 1);
      continue;
    }
    const double l = s.new_tokens;
    sq += l * l;
    lmax = l > lmax ? l : lmax;
    n_fresh += 1;
  }
  if (n_fresh > 0) {
    Part p = prefill_part(n_fresh > 1 ? std::sqrt(sq) : lmax, 0);
    if (n_fresh > 1) {
      // FLOPs and bytes of the batch itself, not of the equivalent prompt.
      double flops = 0, bytes = 0;
      for (const SeqWork& s : batch)
        if (s.new_tokens > 1 && s.context == 0) {
          const Part q = prefill_part_work(s.new_tokens, 0);
          flops += q.flops;
          bytes += q.bytes;
        }
      p.ns = std::max(p.ns, prefill_part(lmax, 0).ns);
      p.flops = flops;
      p.bytes = bytes;
      p.src = Src::Scaled;
    }
    emit(p, 1);
  }
  // PyTorch: the attention output [B, heads, T, d] transposed back to [B, T, heads * d] and
  // reshaped is a copy once T > 1 (a decode step's is a view); one kernel per layer over the
  // batch's prefill tokens. vLLM's kernels write the output in place.
  if (impl != Implementation::Fused) {
    double tokens = 0;
    for (const SeqWork& s : batch)
      if (s.new_tokens > 1) tokens += s.new_tokens;
    if (tokens > 0) {
      sink(kernels_part(Op::AttnLayout, 1, 2 * tokens * H * hd * b).times(L));
    }
  }
  mla_concat(batch, nd + drafted, sink, L);
  if (paged_context) mla_context(batch, sink, L);
}

}  // namespace sluice
