// durin::runtime's messages, updates and queries: checked here, then asked
// of the run's actor (actors/run_actor.hpp), which records and answers them
// after durability. A message by instance id goes to the instance's active
// run; with a start, the run is started for it with the message as its
// first event (its instance token's actor admits both in one write).
#include <future>
#include <random>

#include "actors/identity.hpp"
#include "actors/run_engine.hpp"
#include "durin/ids.hpp"
#include "durin/limits.hpp"
#include "durin/runtime.hpp"
#include "persistence/keys.hpp"
#include "services/node.hpp"
#include "services/runtime_impl.hpp"
#include "services/start.hpp"

namespace durin {

namespace {

constexpr auto answer_timeout = std::chrono::seconds(30);
// Rounds of start-or-deliver a message-with-start tries while the runs
// holding its instance keep ending under it.
constexpr int with_start_rounds_max = 8;

// Why the message's name, key or payload cannot be sent (empty: they can).
std::string message_problem(std::string_view name, std::string_view key,
                            const std::string& payload) {
  if (auto problem = actors::message_name_problem(name); !problem.empty()) {
    return problem;
  }
  if (key.size() > limits::identity_bytes_max) {
    return "an idempotency key (update id) is at most " +
           std::to_string(limits::identity_bytes_max) + " bytes; got " +
           std::to_string(key.size());
  }
  if (payload.size() > limits::payload_bytes_max) {
    return "payload is " + std::to_string(payload.size()) +
           " bytes encoded; the limit is " +
           std::to_string(limits::payload_bytes_max);
  }
  return {};
}

// Waits for the answer of one request to the run's actor.
template <class T, class... Ts>
result<T> ask_run(services::node& node, const std::string& run_id,
                  std::chrono::milliseconds timeout, Ts... xs) {
  auto answer = std::make_shared<std::promise<result<T>>>();
  auto future = answer->get_future();
  node.relay->ask<T>(
      node.runs_of(run_id), run_id,
      [answer](result<T> outcome) { answer->set_value(std::move(outcome)); },
      std::move(xs)...);
  if (future.wait_for(timeout) != std::future_status::ready) {
    return make_error(errc::timeout,
                      "run " + run_id +
                          " did not answer in time; the request may still "
                          "apply (send it again with the same key)");
  }
  return future.get();
}

message_receipt receipt_of(const actors::message_receipt& inner) {
  // A message recorded as its run's first event started that run.
  return {inner.run_id, inner.sequence, inner.sequence == 1};
}

// The receipt an earlier message with this key got, from the store of the
// instance's shard (where its runs live).
result<std::optional<message_receipt>> recorded_for_instance(
    services::node& node, const std::string& tenant,
    const std::string& instance_id, const std::string& scope,
    const std::string& key) {
  auto address =
      persistence::keys::token(tenant, actors::instance_token(instance_id));
  auto seen =
      node.shard_of_token(address).store->get_resume(tenant, scope, key);
  if (!seen) {
    return seen.error();
  }
  if (!*seen) {
    return std::optional<message_receipt>();
  }
  return std::optional<message_receipt>(message_receipt{
      (*seen)->owner_run, (*seen)->sequence, (*seen)->sequence == 1});
}

std::string drawn_update_id() {
  thread_local std::mt19937_64 draw{std::random_device{}()};
  static constexpr char digits[] = "0123456789abcdef";
  std::string id = "upd_";
  for (int i = 0; i < 24; ++i) {
    id += digits[draw() % 16];
  }
  return id;
}

}  // namespace

json message_receipt::to_json() const {
  return {{"runId", run_id}, {"sequence", sequence}, {"started", started}};
}

json update_receipt::to_json() const {
  json out = {{"runId", run_id},
              {"updateId", update_id},
              {"sequence", sequence},
              {"status", completed ? "completed" : "accepted"}};
  if (completed) {
    out["result"] = result;
  }
  return out;
}

result<message_receipt> runtime::send_message(std::string_view run_id,
                                              std::string_view name,
                                              json payload,
                                              const message_options& options) {
  auto bytes = actors::encode_payload(payload);
  if (auto problem = message_problem(name, options.idempotency_key, bytes);
      !problem.empty()) {
    return make_error(errc::invalid_argument, problem);
  }
  auto run = get(run_id, options.tenant);
  if (!run) {
    return run.error();
  }
  actors::message_request request{
      std::string(name), std::move(bytes), options.idempotency_key,
      options.idempotency_key.empty()
          ? std::string()
          : actors::run_message_scope(run->id, name)};
  auto answer = ask_run<actors::message_receipt>(
      impl_->services, run->id, answer_timeout, actors::message_atom::value,
      std::move(request));
  if (!answer) {
    return answer.error();
  }
  return receipt_of(*answer);
}

result<message_receipt> runtime::send_message_to_instance(
    std::string_view instance_id, std::string_view name, json payload,
    const message_options& options, std::optional<message_start> start) {
  auto bytes = actors::encode_payload(payload);
  if (auto problem = message_problem(name, options.idempotency_key, bytes);
      !problem.empty()) {
    return make_error(errc::invalid_argument, problem);
  }
  if (auto problem = id_length_problem("an instance id", instance_id,
                                       limits::identity_bytes_max);
      !problem.empty()) {
    return make_error(errc::invalid_argument, problem);
  }
  auto& node = impl_->services;
  std::string instance(instance_id);
  const auto& key = options.idempotency_key;
  auto scope = actors::instance_message_scope(instance, name);
  actors::message_request request{std::string(name), bytes, key,
                                  key.empty() ? std::string() : scope};
  for (int round = 0; round < with_start_rounds_max; ++round) {
    if (!key.empty()) {
      auto seen =
          recorded_for_instance(node, options.tenant, instance, scope, key);
      if (!seen) {
        return seen.error();
      }
      if (*seen) {
        return **seen;
      }
    }
    std::string holder;
    if (start) {
      // Started with the message as its first event, or refused naming
      // the run that holds the instance.
      services::start_request first;
      first.flow = start->flow;
      first.input = start->input;
      first.options.tenant = options.tenant;
      first.options.instance_id = instance;
      first.run_id = services::draw_run_id(node, first);
      json data = {{"payload", payload}};
      if (!key.empty()) {
        data["key"] = key;
      }
      first.first_events.push_back(
          {.kind = persistence::event_kind::message_received,
           .at_ms = node.clock->now_ms(),
           .name = std::string(name),
           .data = actors::encode_payload(data)});
      first.message_scope = key.empty() ? std::string() : scope;
      first.message_key = key;
      auto drawn = first.run_id;
      std::promise<result<run_info>> answer;
      auto future = answer.get_future();
      services::start_run(node, std::move(first),
                          [&answer](result<run_info> outcome) {
                            answer.set_value(std::move(outcome));
                          });
      auto started = future.get();
      if (started) {
        if (started->id == drawn) {
          return message_receipt{drawn, 1, true};
        }
        continue;  // its key was recorded meanwhile: read it again
      }
      if (started.error().code != errc::hook_conflict) {
        return started.error();
      }
      holder = started.error().run_id;
    } else {
      auto run = get_instance(instance, options.tenant);
      if (!run) {
        return run.error();
      }
      holder = run->id;
    }
    auto delivered = ask_run<actors::message_receipt>(
        node, holder, answer_timeout, actors::message_atom::value, request);
    if (delivered) {
      return receipt_of(*delivered);
    }
    if (delivered.error().code != errc::run_finished) {
      return delivered.error();
    }
    // The holder ended before the message was recorded: ask again (a
    // start now finds the instance free; without one, no run holds it).
  }
  return make_error(errc::timeout,
                    "runs holding instance '" + instance +
                        "' kept ending before the message was recorded; "
                        "send it again with the same idempotency key");
}

result<update_receipt> runtime::update(std::string_view run_id,
                                       std::string_view name, json args,
                                       const update_options& options) {
  auto id = options.update_id.empty() ? drawn_update_id() : options.update_id;
  auto bytes = actors::encode_payload(args);
  if (auto problem = message_problem(name, id, bytes); !problem.empty()) {
    return make_error(errc::invalid_argument, problem);
  }
  auto run = get(run_id, options.tenant);
  if (!run) {
    return run.error();
  }
  actors::message_request request{std::string(name),
                                  std::move(bytes),
                                  id,
                                  actors::update_scope(run->id),
                                  true,
                                  options.wait_completed};
  auto& node = impl_->services;
  auto answer = ask_run<actors::message_receipt>(
      node, run->id, options.timeout, actors::message_atom::value, request);
  if (!answer && answer.error().code == errc::timeout &&
      options.wait_completed) {
    // Not completed in time: its handle, as accepted (or refused) now.
    request.wait_completed = false;
    answer = ask_run<actors::message_receipt>(
        node, run->id, answer_timeout, actors::message_atom::value, request);
  }
  if (!answer) {
    return answer.error();
  }
  update_receipt out{answer->run_id, id, answer->sequence, answer->completed};
  if (answer->completed) {
    try {
      out.result = actors::decode_payload(answer->result);
    } catch (const json::exception&) {
      out.result = nullptr;
    }
  }
  return out;
}

result<json> runtime::query(std::string_view run_id, std::string_view name,
                            json args, std::string_view tenant) {
  auto bytes = actors::encode_payload(args);
  if (auto problem = message_problem(name, "", bytes); !problem.empty()) {
    return make_error(errc::invalid_argument, problem);
  }
  auto run = get(run_id, tenant);
  if (!run) {
    return run.error();
  }
  if (is_terminal(run->status)) {
    return make_error(errc::run_finished,
                      "run " + run->id + " has ended as " +
                          std::string(to_string(run->status)) +
                          "; only a run that has not ended answers queries");
  }
  auto answer = ask_run<std::string>(
      impl_->services, run->id, answer_timeout, actors::query_atom::value,
      actors::query_request{std::string(name), std::move(bytes)});
  if (!answer) {
    return answer.error();
  }
  try {
    return actors::decode_payload(*answer);
  } catch (const json::exception&) {
    return make_error(errc::internal, "a query's answer did not decode");
  }
}

}  // namespace durin
