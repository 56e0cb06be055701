// durin::runtime's calls: starts (services/start.cpp), resumes, reads,
// waits on the run-event hub, lists merged across shards, cancels. Opening
// is in runtime_open.cpp.
#include "durin/runtime.hpp"
#include "durin/ids.hpp"
#include "durin/limits.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "actors/admission.hpp"
#include "actors/identity.hpp"
#include "actors/run_actor.hpp"
#include "actors/run_engine.hpp"
#include "actors/token_actor.hpp"
#include "actors/type_ids.hpp"
#include "durin/caf.hpp"
#include "persistence/keys.hpp"
#include "persistence/run_query.hpp"
#include "services/node.hpp"
#include "services/runtime_access.hpp"
#include "services/runtime_impl.hpp"
#include "services/start.hpp"

namespace durin {

namespace {

using limits::identity_bytes_max;
constexpr std::size_t input_bytes_max = limits::payload_bytes_max;
constexpr std::size_t hook_token_bytes_max = limits::token_bytes_max;
constexpr auto cancel_answer_timeout = std::chrono::seconds(30);

// Records a list examines at most per page (filters may skip many).
constexpr std::size_t list_scan_max = 100'000;

}  // namespace

runtime::runtime(std::unique_ptr<runtime_impl> impl) : impl_(std::move(impl)) {}

runtime::~runtime() = default;
void runtime::start_async(std::string_view flow, json input,
                          const start_options& options,
                          std::function<void(result<run_info>)> done) {
  services::start_run(impl_->services,
                      {.flow = std::string(flow),
                       .input = std::move(input),
                       .options = options},
                      std::move(done));
}

void runtime::resume_hook_async(std::string_view token, json payload,
                                const resume_options& options,
                                std::function<void(result<std::string>)> done) {
  if (impl_->closing) {
    done(make_error(errc::shutting_down, "the runtime is closing"));
    return;
  }
  if (auto problem =
          id_length_problem("a hook token", token, hook_token_bytes_max);
      !problem.empty()) {
    done(make_error(errc::invalid_argument, problem));
    return;
  }
  if (options.resume_id.size() > limits::resume_id_bytes_max ||
      options.command_id.size() > limits::resume_id_bytes_max) {
    done(make_error(errc::invalid_argument,
                    "a resume id (command id) is at most " +
                        std::to_string(limits::resume_id_bytes_max) +
                        " bytes"));
    return;
  }
  if (!options.command_id.empty() && !options.resume_id.empty() &&
      options.command_id != options.resume_id) {
    done(make_error(errc::invalid_argument,
                    "a resume's command id is its resume id: set one, or "
                    "both to the same value"));
    return;
  }
  if (actors::is_reserved_token(token)) {
    done(make_error(errc::hook_not_found,
                    "no run can receive payloads for that token"));
    return;
  }
  auto bytes = actors::encode_payload(payload);
  if (bytes.size() > input_bytes_max) {
    done(make_error(errc::invalid_argument,
                    "payload is " + std::to_string(bytes.size()) +
                        " bytes encoded; the limit is " +
                        std::to_string(input_bytes_max)));
    return;
  }
  actors::resume_request request{std::move(bytes), options.resume_id.empty()
                                                       ? options.command_id
                                                       : options.resume_id};
  auto& services = impl_->services;
  auto address = persistence::keys::token(options.tenant, token);
  auto& tokens = services.tokens_of(address);
  services.relay->ask<std::string>(tokens, std::move(address), std::move(done),
                                   actors::resume_atom::value,
                                   std::move(request));
}

result<std::string> runtime::resume_hook(std::string_view token, json payload,
                                         const resume_options& options) {
  auto answer = std::make_shared<std::promise<result<std::string>>>();
  auto future = answer->get_future();
  resume_hook_async(token, std::move(payload), options,
                    [answer](result<std::string> outcome) {
                      answer->set_value(std::move(outcome));
                    });
  if (future.wait_for(cancel_answer_timeout) != std::future_status::ready) {
    return make_error(errc::timeout,
                      "the resume was not confirmed in time; retry it with "
                      "the same resume id");
  }
  return future.get();
}

result<hook_info> runtime::get_hook_by_token(std::string_view token,
                                             std::string_view tenant) const {
  if (auto problem =
          id_length_problem("a hook token", token, hook_token_bytes_max);
      !problem.empty()) {
    return make_error(errc::invalid_argument, problem);
  }
  if (actors::is_reserved_token(token)) {
    return make_error(errc::hook_not_found,
                      "no hook holds that token (byte 0x1F is reserved)");
  }
  return actors::read_hook(impl_->services, tenant, token);
}

result<run_info> runtime::get_instance(std::string_view instance_id,
                                       std::string_view tenant) const {
  if (auto problem =
          id_length_problem("an instance id", instance_id, identity_bytes_max);
      !problem.empty()) {
    return make_error(errc::invalid_argument, problem);
  }
  auto hook = actors::read_hook(impl_->services, tenant,
                                actors::instance_token(instance_id));
  if (hook && hook->state == "active") {
    auto run = get(hook->owner_run_id, tenant);
    if (run && !is_terminal(run->status)) {
      return run;
    }
  }
  if (!hook && hook.error().code != errc::hook_not_found) {
    return hook.error();
  }
  return make_error(errc::run_not_found, "no active run holds instance '" +
                                             std::string(instance_id) + "'");
}

result<run_info> runtime::start(std::string_view flow, json input,
                                const start_options& options) {
  std::promise<result<run_info>> answer;
  auto future = answer.get_future();
  start_async(flow, std::move(input), options,
              [&answer](result<run_info> outcome) {
                answer.set_value(std::move(outcome));
              });
  return future.get();
}

result<run_info> runtime::get(std::string_view run_id,
                              std::string_view tenant) const {
  return impl_->get(run_id, tenant);
}

namespace {

// Waits for the run-event hub to tell `what` of the run, or answers at once
// when the run is already there (subscribed first, so nothing is missed
// between the read and the wait).
result<run_info> await_run(services::node& node, std::string_view run_id,
                           std::string_view tenant,
                           services::run_events::until what,
                           std::chrono::milliseconds timeout) {
  struct waiter {
    std::mutex mutex;
    std::condition_variable done;
    std::optional<run_info> run;
  };
  auto state = std::make_shared<waiter>();
  std::string id(run_id);
  auto& events = node.events;
  auto subscription =
      events.subscribe(id, what, [state](const services::run_event& event) {
        std::lock_guard<std::mutex> lock(state->mutex);
        state->run = event.run;
        state->done.notify_all();
      });
  auto now = services::get_run(node, run_id, tenant);
  bool there = now && (is_terminal(now->status) ||
                       (what == services::run_events::until::settled &&
                        (now->status == run_status::waiting ||
                         now->status == run_status::blocked)));
  if (!now || there) {
    events.unsubscribe(id, subscription);
    return now;
  }
  std::unique_lock<std::mutex> lock(state->mutex);
  bool told = state->done.wait_for(lock, timeout,
                                   [&] { return state->run.has_value(); });
  lock.unlock();
  events.unsubscribe(id, subscription);
  if (told) {
    return std::move(*state->run);
  }
  return make_error(errc::timeout,
                    "run " + id +
                        (what == services::run_events::until::ended
                             ? " did not end within "
                             : " neither ended nor waited within ") +
                        std::to_string(timeout.count()) + " ms; it goes on");
}

}  // namespace

result<run_info> runtime::wait(std::string_view run_id,
                               std::chrono::milliseconds timeout,
                               std::string_view tenant) const {
  return await_run(impl_->services, run_id, tenant,
                   services::run_events::until::ended, timeout);
}

result<run_info> runtime::wait_settled(std::string_view run_id,
                                       std::chrono::milliseconds timeout,
                                       std::string_view tenant) const {
  return await_run(impl_->services, run_id, tenant,
                   services::run_events::until::settled, timeout);
}

namespace {

status check_run_filter(const run_filter& filter) {
  if (filter.limit == 0 || filter.limit > 1000) {
    return make_error(errc::invalid_argument, "limit must be 1 to 1000; got " +
                                                  std::to_string(filter.limit));
  }
  // A cursor is the last run id of a page. Anything else used to list an
  // arbitrary slice (often nothing) as though it were the end.
  if (!filter.cursor.empty() &&
      !services::shard_map::is_run_id(filter.cursor)) {
    return make_error(errc::invalid_argument,
                      "cursor must be a nextCursor a list of runs gave (a run "
                      "id: \"run_\" and 26 characters)");
  }
  if (filter.page_bytes_max < 1024 || filter.page_bytes_max > (1U << 30)) {
    return make_error(errc::invalid_argument,
                      "page_bytes_max must be 1 KiB to 1 GiB; got " +
                          std::to_string(filter.page_bytes_max));
  }
  return {};
}

// Every served shard's page, merged newest first. Each shard is scanned from
// the same cursor (ids sort by creation time across shards). A shard that
// stopped early (its page full, or its scan or byte budget spent) has unseen
// runs only below its own cursor: nothing at or below the highest such
// cursor (`floor`) may be given, so the next page starts there without a gap.
struct merged_scan {
  struct listed {
    persistence::run_record record;
    std::size_t bytes = 0;  // stored size, as the store's budget counts it
  };
  std::vector<listed> runs;
  std::string floor;
};

result<merged_scan> scan_served_shards(services::node& node,
                                       const run_filter& filter,
                                       const persistence::run_query& query) {
  std::optional<run_status> stored_status = filter.status;
  if (stored_status == run_status::blocked) {
    stored_status.reset();  // not stored: filtered by the caller
  }
  merged_scan merged;
  for (auto& shard : node.shards) {
    if (services::node::serves_no_more(*shard)) {
      continue;  // a cluster: listed by the node that serves it
    }
    auto scan = shard->store->scan_runs(
        filter.cursor, stored_status, filter.flow, filter.limit, list_scan_max,
        filter.tenant, filter.page_bytes_max, filter.schedule_id, &query);
    if (!scan) {
      return scan.error();
    }
    if (!scan->next_before_id.empty() && scan->next_before_id > merged.floor) {
      merged.floor = scan->next_before_id;
    }
    for (std::size_t i = 0; i < scan->runs.size(); ++i) {
      merged.runs.push_back({std::move(scan->runs[i]), scan->run_bytes[i]});
    }
  }
  std::sort(
      merged.runs.begin(), merged.runs.end(),
      [](const auto& a, const auto& b) { return a.record.id > b.record.id; });
  return merged;
}

}  // namespace

result<run_page> runtime::list(const run_filter& filter) const {
  if (auto checked = check_run_filter(filter); !checked) {
    return checked.error();
  }
  // Parsed once, typed by this node's view of the tenant's attributes, and
  // evaluated inside every shard's scan.
  auto& node = impl_->services;
  auto query = persistence::parse_run_query(
      filter.query, [&node, &tenant = filter.tenant](std::string_view name) {
        return node.search.type_of(tenant, name);
      });
  if (!query) {
    return query.error();
  }
  auto merged = scan_served_shards(node, filter, *query);
  if (!merged) {
    return merged.error();
  }
  const auto& floor = merged->floor;
  run_page page;
  std::size_t taken = 0;
  std::size_t bytes = 0;  // as a store counts a page: the run that crosses
                          // the cap is the page's last
  for (auto& [record, stored_bytes] : merged->runs) {
    if (!floor.empty() && record.id < floor) {
      break;  // that shard's own runs below its cursor are unseen
    }
    if (taken == filter.limit || bytes >= filter.page_bytes_max) {
      break;
    }
    ++taken;
    bytes += stored_bytes;
    page.next_cursor = record.id;
    auto info = actors::describe_run(record);
    if (!is_terminal(info.status)) {
      if (auto reason = node.runs_of(info.id).blocked(info.id)) {
        info.status = run_status::blocked;
        info.blocked_reason = *reason;
      }
    }
    if (filter.status == run_status::blocked &&
        info.status != run_status::blocked) {
      continue;
    }
    page.runs.push_back(std::move(info));
  }
  if (taken < merged->runs.size() || !floor.empty()) {
    // More below the last run given; with none given, go on below the
    // floor (it is below the cursor of this page: each page moves on).
    if (taken == 0) {
      page.next_cursor = floor;
    }
  } else {
    page.next_cursor.clear();  // every shard is done
  }
  return page;
}

result<std::vector<history_event>> runtime::history(
    std::string_view run_id, std::string_view tenant) const {
  auto info = get(run_id, tenant);
  if (!info) {
    return info.error();
  }
  auto events =
      impl_->services.shard_of_run(run_id).store->load_history(run_id);
  if (!events) {
    return events.error();
  }
  std::vector<history_event> out;
  out.reserve(events->size());
  std::string id(run_id);
  for (std::size_t i = 0; i < events->size(); ++i) {
    out.push_back(actors::describe_event(id, i + 1, (*events)[i]));
  }
  return out;
}

result<run_info> runtime::cancel(std::string_view run_id, std::string reason,
                                 std::string_view tenant) {
  cancel_options options;
  options.tenant = std::string(tenant);
  options.reason = std::move(reason);
  return cancel(run_id, options);
}

result<run_info> runtime::cancel(std::string_view run_id,
                                 const cancel_options& options) {
  return cancel_or_terminate(run_id, options, false);
}

result<run_info> runtime::terminate(std::string_view run_id,
                                    const cancel_options& options) {
  return cancel_or_terminate(run_id, options, true);
}

result<run_info> runtime::cancel_or_terminate(std::string_view run_id,
                                              const cancel_options& options,
                                              bool terminate) {
  if (options.reason.size() > limits::reason_bytes_max) {
    return make_error(
        errc::invalid_argument,
        "a reason is at most " + std::to_string(limits::reason_bytes_max) +
            " bytes; got " + std::to_string(options.reason.size()));
  }
  if (auto problem = services::command_id_problem(options.command_id);
      !problem.empty()) {
    return make_error(errc::invalid_argument, std::move(problem));
  }
  auto outcome = cancel_once(run_id, options, terminate);
  if (outcome || outcome.error().code != errc::run_finished ||
      options.command_id.empty()) {
    return outcome;
  }
  // A repeat of the command that ended the run: that outcome again.
  auto events = history(run_id, options.tenant);
  auto ended_as = terminate ? "run-terminated" : "run-cancelled";
  if (events && !events->empty() && events->back().kind == ended_as &&
      events->back().detail.value("commandId", std::string()) ==
          options.command_id) {
    return get(run_id, options.tenant);
  }
  return outcome;
}

result<run_info> runtime::cancel_once(std::string_view run_id,
                                      const cancel_options& options,
                                      bool terminate) {
  auto now = get(run_id, options.tenant);
  if (!now) {
    return now.error();
  }
  if (is_terminal(now->status)) {
    return make_error(errc::run_finished,
                      "run " + now->id + " has already ended as " +
                          std::string(to_string(now->status)));
  }
  auto answer = std::make_shared<std::promise<result<run_info>>>();
  auto future = answer->get_future();
  auto& services = impl_->services;
  services.relay->ask<run_info>(
      services.runs_of(now->id), now->id,
      [answer](result<run_info> outcome) {
        answer->set_value(std::move(outcome));
      },
      actors::cancel_atom::value,
      actors::cancel_request{options.reason, options.command_id, terminate});
  if (future.wait_for(cancel_answer_timeout) != std::future_status::ready) {
    return make_error(errc::timeout,
                      "the cancel of run " + now->id +
                          " was not confirmed in time; it may still apply");
  }
  return future.get();
}

void runtime::notify_on_finish(std::string_view run_id,
                               const caf::actor& listener) {
  auto sent = std::make_shared<std::atomic<bool>>(false);
  auto send_once = [sent, listener](const run_info& info) {
    if (!sent->exchange(true)) {
      caf::anon_send(listener, run_finished_atom::value, info);
    }
  };
  std::string id(run_id);
  auto& events = impl_->services.events;
  auto subscription = events.subscribe(
      id, services::run_events::until::ended,
      [send_once](const services::run_event& event) { send_once(event.run); });
  auto now = get(run_id);
  if (now && is_terminal(now->status)) {
    events.unsubscribe(id, subscription);
    send_once(*now);
  }
}

services::node& runtime_access::services(runtime& rt) {
  return rt.impl_->services;
}

std::size_t runtime::active_run_actors() const {
  std::size_t active = 0;
  for (const auto& shard : impl_->services.shards) {
    active += shard->runs->active();
  }
  return active;
}

caf::actor_system& runtime::system() {
  return *impl_->system;
}

std::int64_t runtime::now_ms() const {
  return impl_->services.clock->now_ms();
}

}  // namespace durin
