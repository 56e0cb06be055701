// Runs across nodes: the long poll of GET /v1/runs/{id}?waitMs=, and the
// port through which a run reaches runs of shards other nodes serve
// (services/remote_runs.hpp): each call is the request a client would send,
// forwarded to the run's owner like any other (placement::forward), from a
// caller of the run's own tenant. What the owner answers becomes the
// runtime's result: a 2xx the run, a refusal its error, anything else (no
// owner, a forward timed out, the owner stopping) an outcome not known for
// certain, which the asking run tries again.
#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>

#include <deque>
#include <mutex>
#include <unordered_map>

#include "gateway/api.hpp"
#include "services/hook_mail.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "services/start.hpp"

namespace durin::gateway {

using clock_type = std::chrono::steady_clock;

// ---- GET /v1/runs/{id}?waitMs= ---------------------------------------------

struct api::run_wait {
  reply_fn reply;
  std::string run_id;
  std::string tenant;
  clock_type::time_point deadline;
  std::uint64_t subscription = 0;
  std::atomic<bool> answered{false};
};

void api::get_run(const request_ptr& r, reply_fn reply) {
  const std::string& id = r->params[0];
  std::int64_t wait_ms = 0;
  for (const auto& [name, value] : r->query) {  // waitMs, the only one
    auto [end, problem] =
        std::from_chars(value.data(), value.data() + value.size(), wait_ms);
    if (problem != std::errc() || end != value.data() + value.size() ||
        wait_ms < 0 || wait_ms > options_.wait_ms_max) {
      reply(bad_request("waitMs must be a number of milliseconds from 0 to " +
                        std::to_string(options_.wait_ms_max)));
      return;
    }
  }
  if (wait_ms == 0 || run_waits_released_.load()) {
    auto run = node_.get(id, r->caller.tenant);
    reply(run ? run_response(200, *run) : error_response(run.error()));
    return;
  }
  // Subscribed before the run is read: an end between the two is seen by
  // one or the other.
  auto& events = runtime_access::services(node_).events;
  auto wait = std::make_shared<run_wait>();
  wait->reply = std::move(reply);
  wait->run_id = id;
  wait->tenant = r->caller.tenant;
  wait->deadline = clock_type::now() + std::chrono::milliseconds(wait_ms);
  metrics_.run_wait_parked();
  wait->subscription =
      events.subscribe(id, services::run_events::until::ended,
                       [this, wait](const services::run_event& event) {
                         answer_wait(*wait, run_response(200, event.run));
                       });
  auto run = node_.get(id, wait->tenant);
  if (!run || is_terminal(run->status)) {
    if (!wait->answered.load()) {
      events.unsubscribe(id, wait->subscription);
      answer_wait(*wait,
                  run ? run_response(200, *run) : error_response(run.error()));
    }
    return;
  }
  run_waits_->add(std::move(wait));
}

void api::answer_wait(run_wait& wait, http_response response) {
  if (!wait.answered.exchange(true)) {
    metrics_.run_wait_answered();
    wait.reply(std::move(response));
  }
}

void api::on_run_wait_tick(std::shared_ptr<run_wait>& wait) {
  if (wait->answered.load()) {
    return;
  }
  if (clock_type::now() < wait->deadline && !run_waits_released_.load()) {
    run_waits_->add(std::move(wait));
    return;
  }
  runtime_access::services(node_).events.unsubscribe(wait->run_id,
                                                     wait->subscription);
  // The run goes on (or its shard left this node meanwhile: the poller
  // asks again, and is forwarded to the new owner).
  auto run = node_.get(wait->run_id, wait->tenant);
  answer_wait(*wait,
              run ? run_response(200, *run) : error_response(run.error()));
}

void api::release_run_waits() {
  run_waits_released_.store(true);  // the next tick answers every wait
}

// ---- the port ---------------------------------------------------------------

namespace {

// A run as its node answered it (run_info::to_json), as far as a run that
// asked reads it: its id, status, output and error.
result<run_info> run_of(const http_response& response) {
  auto body = json::parse(response.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return make_error(errc::start_outcome_unknown,
                      "another node answered a body that is not JSON");
  }
  run_info run;
  run.id = body.value("id", std::string());
  auto status = parse_run_status(body.value("status", std::string()));
  if (run.id.empty() || !status) {
    return make_error(errc::start_outcome_unknown,
                      "another node answered a run without an id or status");
  }
  run.status = *status;
  run.flow = body.value("flow", std::string());
  run.output = body.value("output", json());
  run.parent_run_id = body.value("parentRunId", std::string());
  if (body.contains("error") && body["error"].is_object()) {
    run.error = run_error{body["error"].value("code", std::string()),
                          body["error"].value("message", std::string())};
  }
  return run;
}

// The runtime's error for an answer that is not a run: the refusal it
// names (a 4xx), else `unknown` (no owner, a timeout, the owner stopping:
// the outcome is not known for certain).
error error_of(const http_response& response, errc unknown) {
  auto body = json::parse(response.body, nullptr, false);
  std::string code;
  std::string message =
      "another node answered " + std::to_string(response.status);
  if (!body.is_discarded() && body.is_object()) {
    code = body.value("code", std::string());
    message = body.value("message", message);
  }
  error out{unknown, message, {}};
  if (response.status >= 500 || response.status < 400) {
    return out;
  }
  out.code = errc::invalid_argument;
  for (auto candidate = static_cast<int>(errc::invalid_argument);
       candidate <= static_cast<int>(errc::unavailable); ++candidate) {
    if (to_code(static_cast<errc>(candidate)) == code) {
      out.code = static_cast<errc>(candidate);
    }
  }
  if (!body.is_discarded() && body.is_object()) {
    out.run_id = body.value("conflictingRunId", std::string());
  }
  return out;
}

}  // namespace

class api::remote_port final : public services::remote_runs {
 public:
  remote_port(api& owner, placement& where)
      : api_(owner),
        where_(where),
        mail_again_(mail_again_period,
                    [this](std::string& lane) { send_next(lane); }) {}

  bool elsewhere(std::uint32_t shard) const override {
    return where_.locate(shard) != placement::where::here;
  }

  void start(const services::start_request& request, run_done done) override {
    json body = {{"flow", request.flow},
                 {"input", request.input},
                 {"wait", false},
                 {"commandId", request.options.command_id}};
    if (!request.options.instance_id.empty()) {
      body["instanceId"] = request.options.instance_id;
    }
    if (!request.options.memo.is_null()) {
      body["memo"] = request.options.memo;
    }
    if (!request.options.search.empty()) {
      body["searchAttributes"] = to_json(request.options.search);
    }
    wire::http_request sub;
    sub.method = "POST";
    sub.target = "/v1/runs";
    sub.headers = {
        {"content-type", "application/json"},
        {"x-durin-run-id", request.run_id},
        {"x-durin-parent-run", request.parent_run_id},
        {"x-durin-parent-close", std::to_string(request.parent_close)}};
    sub.body = body.dump();
    auto run_id = request.run_id;
    send(request.options.tenant, run_id, std::move(sub),
         [run_id, done = std::move(done)](http_response response) {
           if (response.status < 300) {
             done(run_of(response));
             return;
           }
           auto why = error_of(response, errc::start_outcome_unknown);
           if (why.code == errc::hook_conflict && why.run_id == run_id) {
             // Its start token is held by this very run: an earlier try
             // admitted it.
             run_info admitted;
             admitted.id = run_id;
             done(std::move(admitted));
             return;
           }
           done(std::move(why));
         });
  }

  void read(const std::string& tenant, const std::string& run_id,
            bool until_end, run_done done) override {
    wire::http_request get;
    get.method = "GET";
    get.target = "/v1/runs/" + run_id;
    if (until_end) {
      get.target += "?waitMs=" + std::to_string(api_.options_.wait_ms_max);
    }
    send(tenant, run_id, std::move(get), answer_run(std::move(done)));
  }

  void post(services::hook_mail mail) override {
    // One lane per destination actor: its mail in order, one in flight.
    std::string lane =
        std::string(mail.to_token() ? "t" : "r") + mail.tenant + '\0' + mail.to;
    {
      std::lock_guard lock(mail_mutex_);
      auto& queue = lanes_[lane];
      queue.mail.push_back(std::move(mail));
      if (queue.busy) {
        return;
      }
      queue.busy = true;
    }
    send_next(lane);
  }

  void cancel(const std::string& tenant, const std::string& run_id,
              const actors::cancel_request& request, run_done done) override {
    wire::http_request post;
    post.method = "POST";
    post.target =
        "/v1/runs/" + run_id + (request.terminate ? "/terminate" : "/cancel");
    post.headers = {{"content-type", "application/json"}};
    post.body =
        json{{"reason", request.reason}, {"commandId", request.command_id}}
            .dump();
    send(tenant, run_id, std::move(post), answer_run(std::move(done)));
  }

 private:
  // A run's node answered a read or a cancel: the run, or why not (timeout
  // when not known for certain).
  static reply_fn answer_run(run_done done) {
    return [done = std::move(done)](http_response response) {
      if (response.status == 200) {
        done(run_of(response));
      } else {
        done(error_of(response, errc::timeout));
      }
    };
  }

  // The request as a caller of `tenant` would send it, to the node serving
  // the run's shard.
  void send(const std::string& tenant, const std::string& run_id,
            wire::http_request request, reply_fn answered) {
    principal caller;
    caller.tenant = tenant;
    caller.key_id = "node:runs";  // no key: a node's own run asked
    caller.role = key_role::operate;
    where_.forward(runtime_access::services(api_.node_).map.of_run(run_id),
                   std::move(request), caller, std::move(answered));
  }

  // Sends the lane's first mail: to the node serving its actor's shard, or
  // into the mailbox here once the shard is served here. Taken, the next
  // follows; not taken for certain, it is tried again after a period.
  void send_next(const std::string& lane) {
    for (;;) {
      services::hook_mail mail;
      {
        std::lock_guard lock(mail_mutex_);
        auto at = lanes_.find(lane);
        if (at == lanes_.end() || at->second.mail.empty()) {
          if (at != lanes_.end()) {
            lanes_.erase(at);
          }
          return;
        }
        mail = at->second.mail.front();
      }
      auto& services = runtime_access::services(api_.node_);
      const auto shard = services::shard_of(services.map, mail);
      if (where_.locate(shard) == placement::where::here) {
        auto delivered = services::deliver_hook_mail(services, mail);
        if (!delivered && delivered.error().code == errc::shutting_down) {
          mail_again_.add(std::string(lane));
          return;
        }
        taken(lane);  // or refused for good: never taken by trying again
        continue;
      }
      wire::http_request post;
      post.method = "POST";
      post.target = "/v1/internal/hook-mail";
      post.headers = {
          {std::string(hook_mail_kind_header), services::to_string(mail.what)},
          {std::string(hook_mail_to_header), mail.to}};
      post.body = std::move(mail.bytes);
      principal caller;
      caller.tenant = mail.tenant;
      caller.key_id = "node:hooks";  // no key: a node's own actor sent it
      caller.role = key_role::operate;
      where_.forward(
          shard, std::move(post), caller, [this, lane](http_response response) {
            // Not taken for certain: no owner, a timeout, a
            // stale owner, the owner stopping. Any other
            // refusal would be refused again.
            if (response.status >= 500 || response.status == not_owner_status) {
              mail_again_.add(std::string(lane));
              return;
            }
            if (response.status >= 300) {
              std::fprintf(stderr,
                           "durin: hook mail refused by its node: "
                           "%u %s\n",
                           response.status, response.body.c_str());
            }
            taken(lane);
            send_next(lane);
          });
      return;
    }
  }

  // The lane's first mail reached its actor's node.
  void taken(const std::string& lane) {
    std::lock_guard lock(mail_mutex_);
    auto at = lanes_.find(lane);
    if (at != lanes_.end() && !at->second.mail.empty()) {
      at->second.mail.pop_front();
    }
  }

  static constexpr std::chrono::milliseconds mail_again_period{200};

  struct mail_lane {
    std::deque<services::hook_mail> mail;
    bool busy = false;  // its first is being sent
  };

  api& api_;
  placement& where_;
  std::mutex mail_mutex_;
  std::unordered_map<std::string, mail_lane> lanes_;
  // Lanes whose first mail was not taken, sent again a period later.
  services::due_list<std::string> mail_again_;
};

std::optional<services::hook_mail> hook_mail_of(const wire::http_request& http,
                                                std::string tenant) {
  std::optional<services::hook_mail::kind> what;
  services::hook_mail mail;
  mail.tenant = std::move(tenant);
  for (const auto& [name, value] : http.headers) {
    if (name == hook_mail_kind_header) {
      what = services::parse_hook_mail_kind(value);
    } else if (name == hook_mail_to_header) {
      mail.to = value;
    }
  }
  if (!what || mail.to.empty()) {
    return std::nullopt;
  }
  mail.what = *what;
  return mail;
}

http_response api::take_hook_mail(request& r) {
  if (!r.forwarded) {
    return error_response(404, "not-found", "no route " + r.path_text);
  }
  auto mail = hook_mail_of(r.http, r.caller.tenant);
  if (!mail) {
    return bad_request(
        "hook mail names its kind and its actor (x-durin-hook-kind, "
        "x-durin-hook-to)");
  }
  mail->bytes = std::move(r.http.body);
  // place() checked that this node serves the actor's shard.
  if (auto delivered =
          services::deliver_hook_mail(runtime_access::services(node_), *mail);
      !delivered) {
    return error_response(delivered.error());
  }
  return json_response(202, json::object());
}

void api::set_remote_port() {
  auto& services = runtime_access::services(node_);
  if (placement_ == nullptr) {
    services.remote.store(nullptr, std::memory_order_release);
    return;
  }
  remote_ = std::make_shared<remote_port>(*this, *placement_);
  services.remote.store(remote_.get(), std::memory_order_release);
}

void api::clear_remote_port() {
  // Runs ask nothing more through it; one asking now still finds it (the
  // api outlives the runtime's actors), and forwards after the peers
  // stopped answer 503, tried again until the runtime closes.
  runtime_access::services(node_).remote.store(nullptr,
                                               std::memory_order_release);
}

}  // namespace durin::gateway
