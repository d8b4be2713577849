// The serving core's parts on their own: the front end (loads, request slots, admission, how a
// request ends) driven by a dispatcher written here, and the global scheduler (routing,
// parking, failover) over replicas built here, with no replica engine at all.
#include <doctest/doctest.h>

#include "test_support.h"

#include <optional>
#include <vector>

#include "config/node.h"
#include "engine/engine.h"
#include "registry/registry.h"
#include "workloads/serving/frontend.h"
#include "workloads/serving/global_scheduler.h"
#include "workloads/serving/router.h"

using namespace sluice;
using namespace sluice::serving;

namespace {

// Conversations given in full: open loop, each with its own arrival time and turns.
class FixedSource final : public WorkloadSource {
 public:
  FixedSource(std::vector<ConversationSpec> convs, int64_t think_ns) : convs_(std::move(convs)), think_ns_(think_ns) {
    arrival_.kind = ArrivalSpec::Kind::Poisson;
    for (const auto& c : convs_) total_ += static_cast<int64_t>(c.turns.size());
  }
  std::optional<ConversationSpec> next(int64_t) override {
    if (next_ >= convs_.size()) return std::nullopt;
    return convs_[next_++];
  }
  const ArrivalSpec& arrival() const override { return arrival_; }
  int64_t total_requests() const override { return total_; }
  int64_t think_time_ns() override { return think_ns_; }
  const std::vector<RequestClass>& classes() const override { return classes_; }
  std::vector<RequestClass> classes_;

 private:
  std::vector<ConversationSpec> convs_;
  size_t next_ = 0;
  int64_t think_ns_;
  int64_t total_ = 0;
  ArrivalSpec arrival_;
};

ConversationSpec conv(int64_t at, std::vector<TurnSpec> turns) {
  ConversationSpec c;
  c.arrival_ns = at;
  c.turns = std::move(turns);
  return c;
}

// Takes every request it is given; the test answers them.
struct Taker final : RequestDispatcher {
  std::vector<uint32_t> got;
  void dispatch(uint32_t id) override { got.push_back(id); }
};

struct Pool final : ReplicaPool {
  std::vector<int> asked;
  void request_schedule(int e) override { asked.push_back(e); }
};

}  // namespace

TEST_CASE("the serving front end alone: arrivals in order, a turn's history resent, every ending counted") {
  Engine engine(1);
  FixedSource src({conv(100, {{10, 5}, {20, 4}}), conv(200, {{30, 2}})}, /*think_ns=*/50);
  FrontEndOptions o;
  o.max_context = 1000;
  FrontEnd front(engine, src, o, nullptr);
  Taker taker;
  front.connect(&taker);
  bool done = false;
  front.start({}, [&] { done = true; });
  engine.run();
  REQUIRE(taker.got.size() == 2);  // the two first turns, in arrival order
  auto& reqs = front.requests();
  CHECK(reqs[taker.got[0]].arrival_ns == 100);
  CHECK(reqs[taker.got[1]].arrival_ns == 200);
  CHECK(front.counts().live == 2);
  // Answer the first turn at 300 ns: its conversation's second turn arrives after the think
  // time, resending the first turn's prompt and answer.
  Request& a = reqs[taker.got[0]];
  a.first_scheduled_ns = 150;
  a.first_token_ns = 250;
  a.last_token_ns = 300;
  const uint32_t a_slot = a.id;
  front.answered(a, 300);
  front.release(a_slot);
  engine.run();
  REQUIRE(taker.got.size() == 3);
  const Request& second = reqs[taker.got[2]];
  CHECK(second.arrival_ns == 350);
  CHECK(second.turn == 1);
  CHECK(second.history_tokens == 15);
  // The next turn is made as the answer is delivered, while the replica's queues may still
  // name the answered request: it takes a new slot, and the answered one is free after.
  CHECK(second.id != a_slot);
  // The other two end without an answer: one shed as too long, one failed.
  front.reject(reqs[taker.got[1]], FrontEnd::Rejection::TooLong);
  front.fail(reqs[taker.got[2]], 400);
  const RequestCounts& n = front.counts();
  CHECK(n.announced == 3);
  CHECK(n.completed == 3);
  CHECK(n.answered == 1);
  CHECK(n.rejected_too_long == 1);
  CHECK(n.failed == 1);
  CHECK(n.made == n.released);
  CHECK(n.live == 0);
  CHECK(n.live_high_water == 3);
  CHECK(front.last_failure_ns() == 400);
  CHECK(done);
}

TEST_CASE("the front end sheds an arrival beyond the in-flight bound at once") {
  Engine engine(1);
  FixedSource src({conv(10, {{10, 5}}), conv(10, {{10, 5}}), conv(10, {{10, 5}})}, 0);
  FrontEndOptions o;
  o.max_context = 1000;
  o.max_in_flight = 1;
  FrontEnd front(engine, src, o, nullptr);
  Taker taker;
  front.connect(&taker);
  front.start({}, {});
  engine.run();
  // The first is in flight (never answered here); the next two find two in flight at their
  // arrival, more than the bound of one, and are turned away.
  CHECK(taker.got.size() == 1);
  CHECK(front.counts().rejected_overload == 2);
  CHECK(front.counts().completed == 2);
}

TEST_CASE("the global scheduler parks what no healthy replica can take, fails it after the failover timeout, and routes the rest when one is healthy") {
  Engine engine(1);
  FixedSource src({conv(10, {{10, 5}}), conv(20, {{10, 5}}), conv(1000, {{10, 5}}), conv(1100, {{2000, 5}})}, 0);
  FrontEndOptions o;
  o.max_context = 4096;
  FrontEnd front(engine, src, o, nullptr);
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int i = 0; i < 2; ++i) {
    replicas.push_back(std::make_unique<Replica>(64, 16, 0.0, false));
    replicas.back()->reqs = &front.requests();
    replicas.back()->set_health(false);
  }
  auto parsed = sluice::testing::registry().parse(load_yaml_string("least_outstanding", "t"), "router", "router");
  auto router = sluice::testing::registry().factory<RouterFactory>(*parsed.info)(parsed.params);
  Pool pool;
  GlobalScheduler global(engine, front, *router, replicas, pool, /*failover_timeout_ns=*/500);
  front.connect(&global);
  front.start({}, {});
  engine.run(SimTime::ns(515));
  // The first arrival (10 ns) waited 500 ns and failed at 510; the second waits until 520.
  CHECK(front.counts().failed == 1);
  CHECK(global.parked() == 1);
  CHECK(pool.asked.empty());
  replicas[1]->set_health(true);
  global.unpark_all();
  CHECK(global.parked() == 0);
  CHECK(pool.asked == std::vector<int>{1});
  CHECK(replicas[1]->routed == 1);
  CHECK(replicas[1]->waiting.size() == 1);
  engine.run();
  // The third arrives at 1000 ns with a healthy replica: routed, not parked.
  CHECK(pool.asked == std::vector<int>{1, 1});
  CHECK(replicas[1]->routed == 2);
  // The fourth is longer than any replica holds (64 blocks of 16 tokens): rejected, not queued.
  CHECK(front.counts().rejected_too_long == 1);
  CHECK(front.counts().completed == 2);
}

TEST_CASE("the global scheduler orders a waiting queue by class priority (first come first served within one) and sheds a request its TTFT objective has passed") {
  Engine engine(1);
  auto turn = [](int cls) {
    TurnSpec t{10, 5};
    t.class_id = cls;
    return t;
  };
  // Arrivals at 10, 20, 30, 40 ns: batch, interactive, batch, interactive.
  FixedSource src({conv(10, {turn(1)}), conv(20, {turn(0)}), conv(30, {turn(1)}), conv(40, {turn(0)})}, 0);
  src.classes_ = {RequestClass{"interactive", 0.5, 0, 100, 0}, RequestClass{"batch", 0.5, 1, 0, 0}};
  FrontEndOptions o;
  o.max_context = 4096;
  FrontEnd front(engine, src, o, nullptr);
  std::vector<std::unique_ptr<Replica>> replicas;
  replicas.push_back(std::make_unique<Replica>(64, 16, 0.0, false));
  replicas.back()->reqs = &front.requests();
  auto parsed = sluice::testing::registry().parse(load_yaml_string("round_robin", "t"), "router", "router");
  auto router = sluice::testing::registry().factory<RouterFactory>(*parsed.info)(parsed.params);
  Pool pool;  // never schedules: the queue only grows
  GlobalScheduler global(engine, front, *router, replicas, pool, 0);
  global.set_priority_order(true);
  global.set_shed_late({100, 0});  // interactive: TTFT objective 100 ns
  front.connect(&global);
  front.start({}, {});
  engine.run(SimTime::ns(100));
  std::vector<int32_t> order;
  for (uint32_t id : replicas[0]->waiting) order.push_back(front.requests()[id].class_id * 100 + static_cast<int32_t>(front.requests()[id].arrival_ns));
  CHECK(order == std::vector<int32_t>{20, 40, 110, 130});  // interactive first, each class in arrival order
  // The interactive request of 20 ns is still unscheduled at 120 ns: shed; the one of 40 ns at 140.
  engine.run();
  CHECK(front.counts().rejected_late == 2);
  CHECK(replicas[0]->waiting.size() == 2);
  CHECK(replicas[0]->routed == 2);
  CHECK(front.counts().completed == 2);
}
