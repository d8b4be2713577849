// The last mile of a decoded token, shared by the event path's end of an iteration
// (serving_sim.cpp) and the steady-decode fast-forward (serving_steady.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "recorder/histogram.h"
#include "workloads/serving/request.h"

namespace sluice::serving::detail {

// One more token of a sequence in decode: its KV and count grow by one, it is detokenized
// after `t` on the replica's host thread and streamed; its gap since the last token is
// recorded. Returns when the client has it. (end_iteration, accept_drafts and decide_inline share it.)
[[gnu::always_inline]] inline int64_t deliver_decode_token(Request& q, int64_t& t, int64_t detok, int64_t stream,
                                                            LogHistogram::Runs& gaps) {
  q.computed += 1;
  ++q.generated;
  t += detok;
  const int64_t delivered = t + stream;
  const int64_t gap = delivered - q.last_token_ns;
  gaps.add(gap);
  q.max_gap_ns = std::max(q.max_gap_ns, gap);
  q.last_token_ns = delivered;
  return delivered;
}

}  // namespace sluice::serving::detail
