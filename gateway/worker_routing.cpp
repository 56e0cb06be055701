// The worker routes across a cluster's nodes (gateway/worker_routing.hpp):
// a batched report split by its items' shards, a poll visiting every
// serving node, the tasks view merged. Each is a small state machine whose
// steps never block: a step hands its next part to the local task service
// or to a forward and goes on in that part's answer.
#include "gateway/worker_routing.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/attempt_id.hpp"
#include "durin/limits.hpp"
#include "gateway/wire_format.hpp"
#include "gateway/worker_detail.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "services/task_service.hpp"

namespace durin::gateway {

using namespace worker_detail;
using clock_type = std::chrono::steady_clock;

namespace {

// The other nodes a poll's answer took tasks from, by one shard each
// serves (what this node's task service holds of the poll it knows itself).
struct poll_origin {
  std::vector<std::uint32_t> shards;
};

// The body of an answer, parsed; discarded JSON when it is not JSON.
json body_of(const http_response& response) {
  return json::parse(response.body, nullptr, false);
}

// The same request with another body, to send to another node (headers
// kept: a forward carries no framing of its own).
wire::http_request with_body(const wire::http_request& http, const json& body) {
  wire::http_request out;
  out.method = http.method;
  out.target = http.target;
  for (const auto& header : http.headers) {
    if (header.first != "content-length") {
      out.headers.push_back(header);
    }
  }
  out.body = body.dump();
  return out;
}

}  // namespace

struct worker_routing::state {
  runtime& node;
  placement& where;
  std::atomic<std::uint64_t> polls{0};  // rotates each poll's order

  // The remembered origins, by origin_key, and their order: an entry of
  // the order whose number is not its key's current one is stale.
  struct remembered {
    poll_origin origin;
    std::uint64_t number = 0;
  };
  std::mutex mutex;
  std::unordered_map<std::string, remembered> origins;
  std::deque<std::pair<std::string, std::uint64_t>> origin_order;
  std::uint64_t remembered_count = 0;

  state(runtime& n, placement& w) : node(n), where(w) {}

  services::task_service& tasks() {
    return *runtime_access::services(node).tasks;
  }

  static std::string origin_key(const std::string& tenant,
                                const poll_fields& fields) {
    return std::to_string(tenant.size()) + ":" + tenant + "\n" + fields.worker +
           "\n" + fields.poll_id;
  }

  std::optional<poll_origin> origin_of(const std::string& key) {
    std::lock_guard lock(mutex);
    auto found = origins.find(key);
    if (found == origins.end()) {
      return std::nullopt;
    }
    return found->second.origin;
  }

  // Remembers which other nodes gave a poll's tasks, when any did (what
  // this node's task service holds of a poll it tells itself).
  void remember(const std::string& key, poll_origin origin) {
    std::lock_guard lock(mutex);
    if (origin.shards.empty()) {
      origins.erase(key);  // its order entry is stale now
      return;
    }
    const auto number = ++remembered_count;
    origins.insert_or_assign(key, remembered{std::move(origin), number});
    origin_order.emplace_back(key, number);
    // Bounded by the order, stale entries included: at most
    // poll_origins_max remembered.
    while (origin_order.size() > poll_origins_max) {
      auto& [oldest, oldest_number] = origin_order.front();
      auto found = origins.find(oldest);
      if (found != origins.end() && found->second.number == oldest_number) {
        origins.erase(found);
      }
      origin_order.pop_front();
    }
  }
};

namespace {

using routing_state = worker_routing::state;

// ---- polls -----------------------------------------------------------------

// One poll, from its first round to its answer. Its steps run one at a
// time (each starts the next only from its own answer), so its fields need
// no lock.
class cluster_poll : public std::enable_shared_from_this<cluster_poll> {
 public:
  cluster_poll(std::shared_ptr<routing_state> routing, worker_request work,
               poll_fields fields, std::string queue, wire::http_request http,
               principal caller, reply_fn reply)
      : routing_(std::move(routing)),
        work_(std::move(work)),
        fields_(std::move(fields)),
        queue_(std::move(queue)),
        http_(std::move(http)),
        caller_(std::move(caller)),
        reply_(std::move(reply)),
        deadline_(clock_type::now() +
                  std::chrono::milliseconds(fields_.wait_ms)),
        key_(routing_state::origin_key(work_.tenant, fields_)) {}

  void start() {
    if (!fields_.poll_id.empty()) {
      // A repeat (a lost answer): this node holds tasks of the poll, or
      // remembers the other nodes that gave it some. Only those are asked
      // first, so every task it holds comes back and a node that holds
      // none of it claims nothing new before the holders were asked.
      const bool held_here =
          !routing_->tasks().held(fields_.worker, fields_.poll_id).empty();
      auto origin = routing_->origin_of(key_);
      if (held_here || origin) {
        repeat_ = true;
        if (held_here) {
          sources_.push_back(local_source);
        }
        if (origin) {
          sources_.insert(sources_.end(), origin->shards.begin(),
                          origin->shards.end());
        }
        next_ = 0;
        visit();
        return;
      }
    }
    begin_round();
  }

 private:
  // A source of tasks: this node's task service, or the node serving a
  // shard.
  static constexpr std::int64_t local_source = -1;

  std::size_t missing() const {
    return fields_.max_tasks > tasks_.size() ? fields_.max_tasks - tasks_.size()
                                             : 0;
  }

  // Every source once, from a rotated start.
  void begin_round() {
    sources_.clear();
    sources_.push_back(local_source);
    for (const auto& other : routing_->where.other_nodes()) {
      sources_.push_back(other.shard);
    }
    const auto turn = routing_->polls.fetch_add(1) % sources_.size();
    std::rotate(sources_.begin(),
                sources_.begin() + static_cast<std::ptrdiff_t>(turn),
                sources_.end());
    next_ = 0;
    visit();
  }

  // Asks the next source for what is missing; after the last, the round
  // ends.
  void visit() {
    while (next_ < sources_.size() && missing() > 0) {
      const auto source = sources_[next_++];
      if (source == local_source) {
        claim_here();
        continue;
      }
      auto self = shared_from_this();
      const auto shard = static_cast<std::uint32_t>(source);
      json body = {{"workerId", fields_.worker_id},
                   {"waitMs", 0},
                   {"maxTasks", missing()}};
      if (!fields_.poll_id.empty()) {
        body["pollRequestId"] = fields_.poll_id;
      }
      routing_->where.forward(shard, with_body(http_, body), caller_,
                              [self, shard](http_response answer) {
                                self->on_peer(shard, answer);
                              });
      return;  // goes on in on_peer
    }
    end_round();
  }

  // This node's tasks now, without waiting (poll_async answers a poll of
  // waitMs 0 before it returns).
  void claim_here() {
    std::vector<services::claimed_task> claimed;
    (void)routing_->tasks().poll_async(
        work_.tenant, queue_, fields_.worker, fields_.poll_id, 0, missing(),
        work_.parked_polls_max,
        [&claimed](std::vector<services::claimed_task> got) {
          claimed = std::move(got);
        });
    take_local(claimed);
  }

  void take_local(const std::vector<services::claimed_task>& claimed) {
    if (claimed.empty()) {
      return;
    }
    for (const auto& task : claimed) {
      tasks_.push_back(task_json(task));
    }
  }

  // A peer's answer: its tasks, or nothing when it did not answer (a
  // forward that failed claimed nothing there, or its leases run out).
  void on_peer(std::uint32_t shard, const http_response& answer) {
    if (answer.status == 200) {
      auto body = body_of(answer);
      if (body.is_object() && body.contains("tasks") &&
          body["tasks"].is_array() && !body["tasks"].empty()) {
        origin_.shards.push_back(shard);
        for (auto& task : body["tasks"]) {
          tasks_.push_back(std::move(task));
        }
      }
    }
    visit();
  }

  void end_round() {
    if (!tasks_.empty()) {
      return finish();
    }
    if (repeat_) {
      // What the repeated poll held has ended everywhere: a fresh poll.
      repeat_ = false;
      return begin_round();
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline_ - clock_type::now())
                          .count();
    if (left <= 0) {
      return finish();
    }
    park(routing_->where.other_nodes().empty()
             ? left
             : std::min<std::int64_t>(left, poll_slice_ms));
  }

  // Waits here without a thread for up to `wait_ms`: a task enqueued here
  // answers it at once; at the slice's end a new round asks the others.
  void park(std::int64_t wait_ms) {
    // Whichever of poll_async's return and its answer comes second goes on.
    struct parking {
      std::mutex mutex;
      bool returned = false;
      bool answered = false;
      std::vector<services::claimed_task> claimed;
    };
    auto call = std::make_shared<parking>();
    auto self = shared_from_this();
    auto how = routing_->tasks().poll_async(
        work_.tenant, queue_, fields_.worker, fields_.poll_id, wait_ms,
        missing(), work_.parked_polls_max,
        [self, call](std::vector<services::claimed_task> claimed) {
          std::unique_lock lock(call->mutex);
          call->answered = true;
          if (!call->returned) {
            call->claimed = std::move(claimed);
            return;
          }
          lock.unlock();
          self->woken(claimed, false);
        });
    std::unique_lock lock(call->mutex);
    call->returned = true;
    if (how == services::poll_parking::over_limit) {
      lock.unlock();
      if (!parked_once_) {
        return reply(too_many_polls(work_.parked_polls_max));
      }
      return finish();  // it waited already: the worker polls again
    }
    parked_once_ = true;
    if (!call->answered) {
      return;  // goes on in the answer
    }
    auto claimed = std::move(call->claimed);
    lock.unlock();
    // Answered empty before it returned although it may wait: polls are
    // released (the node stops).
    woken(claimed, how == services::poll_parking::answered && claimed.empty());
  }

  void woken(const std::vector<services::claimed_task>& claimed,
             bool released) {
    take_local(claimed);
    if (!tasks_.empty() || released) {
      return finish();
    }
    if (clock_type::now() >= deadline_) {
      return finish();
    }
    begin_round();
  }

  void finish() {
    if (!fields_.poll_id.empty()) {
      routing_->remember(key_, std::move(origin_));
    }
    json list = json::array();
    for (auto& task : tasks_) {
      list.push_back(std::move(task));
    }
    reply(poll_answer(fields_.batched, std::move(list)));
  }

  void reply(http_response response) {
    auto answer = std::move(reply_);
    answer(std::move(response));
  }

  std::shared_ptr<routing_state> routing_;
  worker_request work_;
  poll_fields fields_;
  std::string queue_;
  wire::http_request http_;
  principal caller_;
  reply_fn reply_;
  clock_type::time_point deadline_;
  std::string key_;

  std::vector<std::int64_t> sources_;  // shards, or local_source
  std::size_t next_ = 0;
  bool repeat_ = false;
  bool parked_once_ = false;
  std::vector<json> tasks_;
  poll_origin origin_;
};

// ---- batched reports -------------------------------------------------------

// The parts of one batched report on their way; answered when the last
// part is.
class report_split {
 public:
  report_split(std::vector<std::string> attempt_ids, reply_fn reply)
      : attempt_ids_(std::move(attempt_ids)),
        results_(attempt_ids_.size()),
        reply_(std::move(reply)) {}

  // How many parts will answer (call before any is sent).
  void expect(std::size_t parts) { parts_left_ = parts; }

  // One part's answer, for the items at `indices`.
  void settle(const std::vector<std::size_t>& indices,
              const http_response& part) {
    auto body = body_of(part);
    const bool whole = part.status == 200 && body.is_object() &&
                       body.contains("results") && body["results"].is_array() &&
                       body["results"].size() == indices.size();
    std::unique_lock lock(mutex_);
    for (std::size_t k = 0; k < indices.size(); ++k) {
      const auto i = indices[k];
      results_[i] = whole ? std::move(body["results"][k])
                          : failed_item(attempt_ids_[i], part.status, body);
    }
    if (--parts_left_ > 0) {
      return;
    }
    lock.unlock();
    answer();
  }

  // Once every part answered, or at once when no item could be sent.
  void answer() {
    json list = json::array();
    {
      std::lock_guard lock(mutex_);
      for (auto& result : results_) {
        list.push_back(std::move(result));
      }
    }
    reply_(json_response(200, {{"results", std::move(list)}}));
  }

  // An item whose shard has no owner now: nothing was done.
  void unavailable(std::size_t index, std::uint32_t shard,
                   std::int64_t retry_after_s) {
    std::lock_guard lock(mutex_);
    results_[index] = {
        {"attemptId", attempt_ids_[index]},
        {"code", "shard-unavailable"},
        {"shard", shard},
        {"message", "shard " + std::to_string(shard) +
                        " has no live owner now; nothing was recorded, "
                        "report again after " +
                        std::to_string(retry_after_s) + " s"}};
  }

 private:
  // An item of a part its node did not answer for (no "recorded": the
  // worker sends it again; a repeat of a recorded one is answered stale).
  static json failed_item(const std::string& attempt_id, unsigned status,
                          const json& body) {
    json out = {{"attemptId", attempt_id}};
    const bool described = body.is_object() && body.contains("code");
    out["code"] = described ? body["code"] : json("forward-failed");
    out["message"] = described && body.contains("message")
                         ? body["message"]
                         : json("the node serving this attempt answered " +
                                std::to_string(status));
    if (described && body.contains("shard")) {
      out["shard"] = body["shard"];
    }
    return out;
  }

  std::vector<std::string> attempt_ids_;
  std::mutex mutex_;
  std::vector<json> results_;
  std::size_t parts_left_ = 0;
  reply_fn reply_;
};

// A checked batch's items by where their runs are served.
struct report_groups {
  std::vector<std::string> attempt_ids;  // every item's, in order
  std::vector<std::size_t> local;        // served here, or naming no run
  std::map<std::uint32_t, std::vector<std::size_t>> remote;  // by shard
  std::vector<std::pair<std::size_t, std::uint32_t>> unowned;
};

report_groups group_reports(routing_state& routing, const json& reports) {
  const auto& map = runtime_access::services(routing.node).map;
  report_groups out;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    out.attempt_ids.push_back(reports[i]["attemptId"].get<std::string>());
    const auto run = actors::run_of_attempt(out.attempt_ids.back());
    if (!run) {
      out.local.push_back(i);  // an id of before: answered here (not found)
      continue;
    }
    const auto shard = map.of_run(*run);
    switch (routing.where.locate(shard)) {
      case placement::where::here:
        out.local.push_back(i);
        break;
      case placement::where::there:
        out.remote[shard].push_back(i);
        break;
      case placement::where::nowhere:
        out.unowned.emplace_back(i, shard);
        break;
    }
  }
  return out;
}

// Splits a checked batch by the shards of its items' runs; false when every
// item is this node's (the local route answers it whole).
bool split_reports(const std::shared_ptr<routing_state>& routing,
                   const worker_request& work, const wire::http_request& http,
                   const principal& caller, reply_fn& reply) {
  const auto& reports = work.body["reports"];
  auto groups = group_reports(*routing, reports);
  if (groups.remote.empty() && groups.unowned.empty()) {
    return false;
  }
  auto split = std::make_shared<report_split>(std::move(groups.attempt_ids),
                                              std::move(reply));
  for (const auto& [index, shard] : groups.unowned) {
    split->unavailable(index, shard, routing->where.retry_after_s());
  }
  if (groups.local.empty() && groups.remote.empty()) {
    split->answer();  // no item could be sent anywhere
    return true;
  }
  split->expect(groups.remote.size() + (groups.local.empty() ? 0 : 1));
  auto part_body = [&](const std::vector<std::size_t>& indices) {
    json part = json::array();
    for (const auto i : indices) {
      part.push_back(reports[i]);
    }
    return json{{"workerId", work.body["workerId"]},
                {"reports", std::move(part)}};
  };
  for (const auto& [shard, indices] : groups.remote) {
    routing->where.forward(shard, with_body(http, part_body(indices)), caller,
                           [split, indices](http_response answer) {
                             split->settle(indices, answer);
                           });
  }
  if (!groups.local.empty()) {
    auto here = work;
    here.body = part_body(groups.local);
    answer_worker_route(routing->node, here,
                        [split, local = groups.local](http_response answer) {
                          split->settle(local, answer);
                        });
  }
  return true;
}

// ---- the tasks view --------------------------------------------------------

// This node's view as another node merges it: tagged with the node's id.
json tagged_view(const http_response& view, const std::string& node) {
  auto body = body_of(view);
  if (!body.is_object()) {
    return body;
  }
  body["node"] = node;
  if (body.contains("tasks") && body["tasks"].is_array()) {
    for (auto& task : body["tasks"]) {
      task["node"] = node;
    }
  }
  return body;
}

// Adds the counters of `from` to `into`, field by field.
void add_stats(json& into, const json& from) {
  if (!from.is_object()) {
    return;
  }
  for (const auto& [name, value] : from.items()) {
    if (value.is_number_unsigned()) {
      into[name] =
          into.value(name, std::uint64_t{0}) + value.get<std::uint64_t>();
    }
  }
}

// Every serving node's view, asked at once; answered when the last did.
class tasks_gather {
 public:
  tasks_gather(json local, std::vector<placement::node_shard> others,
               reply_fn reply)
      : local_(std::move(local)),
        others_(std::move(others)),
        views_(others_.size()),
        left_(others_.size()),
        reply_(std::move(reply)) {}

  void settle(std::size_t index, const http_response& view) {
    auto body = body_of(view);
    std::unique_lock lock(mutex_);
    if (view.status == 200 && body.is_object()) {
      views_[index] = std::move(body);
    }
    if (--left_ > 0) {
      return;
    }
    lock.unlock();
    answer();
  }

  // Once every other node answered, or when there is none.
  void answer() { reply_(json_response(200, merged())); }

 private:
  json merged() {
    json tasks = json::array();
    std::set<std::string> queues;
    json stats = json::object();
    json node_stats = json::object();
    json nodes = json::array();
    json unanswered = json::array();
    auto take = [&](json& view) {
      for (auto& task : view["tasks"]) {
        if (tasks.size() < limits::tasks_list_max) {
          tasks.push_back(std::move(task));
        }
      }
      for (const auto& queue : view["queues"]) {
        queues.insert(queue.get<std::string>());
      }
      add_stats(stats, view["stats"]);
      if (view.contains("nodeStats")) {
        add_stats(node_stats, view["nodeStats"]);
      }
      nodes.push_back(view["node"]);
    };
    const bool admin = local_.contains("nodeStats");
    take(local_);
    for (std::size_t i = 0; i < others_.size(); ++i) {
      auto& view = views_[i];
      if (view.is_object() && view.contains("tasks") &&
          view["tasks"].is_array() && view.contains("queues") &&
          view["queues"].is_array()) {
        if (!view.contains("node")) {
          view["node"] = others_[i].node;
        }
        take(view);
      } else {
        unanswered.push_back(others_[i].node);
      }
    }
    json out = {{"tasks", std::move(tasks)},
                {"queues", queues},
                {"stats", std::move(stats)},
                {"nodes", std::move(nodes)},
                {"unansweredNodes", std::move(unanswered)}};
    if (admin) {
      out["nodeStats"] = std::move(node_stats);
    }
    return out;
  }

  json local_;
  std::vector<placement::node_shard> others_;
  std::mutex mutex_;
  std::vector<json> views_;  // null: no answer
  std::size_t left_;
  reply_fn reply_;
};

void gather_tasks(const std::shared_ptr<routing_state>& routing,
                  const worker_request& work, const wire::http_request& http,
                  const principal& caller, reply_fn& reply) {
  auto here = handle_worker_route(routing->node, work);
  if (here.status != 200) {
    reply(std::move(here));
    return;
  }
  auto others = routing->where.other_nodes();
  auto gather = std::make_shared<tasks_gather>(
      tagged_view(here, routing->where.node_id()), others, std::move(reply));
  if (others.empty()) {
    gather->answer();
    return;
  }
  for (std::size_t i = 0; i < others.size(); ++i) {
    routing->where.forward(
        others[i].shard, http, caller,
        [gather, i](http_response answer) { gather->settle(i, answer); });
  }
}

}  // namespace

worker_routing::worker_routing(runtime& node, placement& where)
    : state_(std::make_shared<state>(node, where)) {}

worker_routing::~worker_routing() = default;

bool worker_routing::take(const worker_request& work,
                          const wire::http_request& http,
                          const principal& caller, bool forwarded,
                          reply_fn& reply) {
  const auto& p = work.path;
  const bool view = work.method == "GET" && p.size() == 2 && p[1] == "tasks" &&
                    work.query.count("runId") == 0;
  if (forwarded) {
    if (!view) {
      return false;  // the node that took it first spreads it
    }
    auto here = handle_worker_route(state_->node, work);
    reply(here.status == 200
              ? json_response(200, tagged_view(here, state_->where.node_id()))
              : std::move(here));
    return true;
  }
  if (view) {
    gather_tasks(state_, work, http, caller, reply);
    return true;
  }
  if (work.method != "POST") {
    return false;
  }
  if (p.size() == 3 && p[1] == "tasks" && p[2] == "report") {
    if (auto problem = check_reports(work)) {
      reply(std::move(*problem));
      return true;
    }
    return split_reports(state_, work, http, caller, reply);
  }
  if (p.size() == 4 && p[1] == "task-queues" && p[3] == "poll") {
    std::optional<http_response> problem;
    auto fields = read_poll(work, p[2], problem);
    if (!fields) {
      reply(std::move(*problem));
      return true;
    }
    auto poll = std::make_shared<cluster_poll>(
        state_, work, std::move(*fields), p[2], http, caller, std::move(reply));
    poll->start();
    return true;
  }
  return false;
}

}  // namespace durin::gateway
