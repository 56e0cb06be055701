#include "services/start.hpp"

// GCC 12 reports the error side of a result<run_info> moved through a
// std::function's call as maybe uninitialized (a known false positive with
// std::variant when the call is inlined); the code reads it only when set.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "actors/identity.hpp"
#include "actors/run_engine.hpp"
#include "actors/token_actor.hpp"
#include "durin/ids.hpp"
#include "durin/limits.hpp"
#include "persistence/keys.hpp"
#include "services/node.hpp"

namespace durin::services {

namespace {

using limits::flow_name_bytes_max;
using limits::identity_bytes_max;
using limits::metadata_bytes_max;
using limits::run_id_bytes_max;
using limits::tenant_bytes_max;
constexpr std::size_t input_bytes_max = limits::payload_bytes_max;
constexpr std::size_t hook_token_bytes_max = limits::token_bytes_max;
using done_fn = std::function<void(result<run_info>)>;

// The token that keys a start: the caller's hook, else the instance id's,
// else the command id's (held for command_retention); none for a plain start.
result<std::optional<start_hook>> start_token_of(
    const start_options& options, const runtime_options& configured) {
  // An instance id is named in routes (/v1/instances/{id}); a command id
  // only travels in bodies, so only its length is bounded.
  if (!options.instance_id.empty()) {
    if (auto problem = id_problem("an instance id", options.instance_id,
                                  identity_bytes_max);
        !problem.empty()) {
      return make_error(errc::invalid_argument, std::move(problem));
    }
  }
  if (auto problem = command_id_problem(options.command_id); !problem.empty()) {
    return make_error(errc::invalid_argument, std::move(problem));
  }
  if (options.hook) {
    if (!options.instance_id.empty()) {
      return make_error(errc::invalid_argument,
                        "instance_id and hook cannot both be set: the hook's "
                        "token already keys the start");
    }
    if (actors::is_reserved_token(options.hook->token)) {
      return make_error(errc::invalid_argument,
                        "hook.token may not begin with byte 0x1F (reserved "
                        "for instance and command ids)");
    }
    if (auto problem =
            id_problem("hook.token", options.hook->token, hook_token_bytes_max);
        !problem.empty()) {
      return make_error(errc::invalid_argument, std::move(problem));
    }
    return std::optional<start_hook>(options.hook);
  }
  if (!options.instance_id.empty()) {
    return std::optional<start_hook>(start_hook{
        actors::instance_token(options.instance_id), nullptr, nullptr});
  }
  if (!options.command_id.empty()) {
    auto keep =
        std::min(configured.command_retention, configured.retention_max);
    return std::optional<start_hook>(
        start_hook{actors::command_token(options.command_id),
                   json(keep.count()), nullptr});
  }
  return std::optional<start_hook>();
}

// duplicate_policy::return_existing_active: a start refused by an active
// holder of its instance id (hook-conflict naming it) answers that run.
void answer_existing_or(const node& node, const std::string& tenant,
                        const done_fn& done, result<run_info>&& outcome) {
  if (!outcome.ok() && outcome.error().code == errc::hook_conflict) {
    auto holder = get_run(node, outcome.error().run_id, tenant);
    if (holder && !is_terminal(holder->status)) {
      done(std::move(holder));
      return;
    }
  }
  done(std::move(outcome));
}

// What refuses a start before anything is drawn or written: a closing
// node, bad names, an unknown flow, input the flow cannot take.
status check_start(const node& node, const start_request& start) {
  if (node.closing) {
    return make_error(errc::shutting_down, "the runtime is closing");
  }
  const auto& tenant = start.options.tenant;
  if (tenant.empty() || tenant.size() > tenant_bytes_max) {
    return make_error(
        errc::invalid_argument,
        "a tenant is 1 to " + std::to_string(tenant_bytes_max) + " bytes");
  }
  const auto& flow = start.flow;
  if (flow.empty() || flow.size() > flow_name_bytes_max) {
    return make_error(
        errc::invalid_argument,
        "a flow name is 1 to 128 bytes; got " + std::to_string(flow.size()));
  }
  const auto* entry = node.flows.find_flow(flow);
  if (entry == nullptr) {
    return make_error(errc::flow_not_found,
                      "no flow registered under '" + flow + "'");
  }
  try {
    entry->check_input(start.input);
  } catch (const json::exception& e) {
    return make_error(
        errc::invalid_input,
        "input for flow '" + flow + "' does not convert: " + e.what());
  }
  if (auto problem = search_attributes_problem("", start.options.search);
      !problem.empty()) {
    return make_error(errc::invalid_argument, problem);
  }
  return {};
}

result<persistence::run_record> new_record(
    node& node, const start_request& start,
    const std::optional<start_hook>& keyed) {
  persistence::run_record record;
  record.id = start.run_id;
  record.flow = start.flow;
  record.status = run_status::pending;
  record.input = actors::encode_payload(start.input);
  if (record.input.size() > input_bytes_max) {
    return make_error(errc::invalid_argument,
                      "input is " + std::to_string(record.input.size()) +
                          " bytes encoded; the limit is " +
                          std::to_string(input_bytes_max));
  }
  record.created_at_ms = node.clock->now_ms();
  record.tenant = start.options.tenant;
  if (node.options.spec_version != 0) {
    record.spec_version = node.options.spec_version;
  }
  if (keyed) {
    record.start_token = keyed->token;
  }
  record.schedule_id = start.schedule_id;
  record.occurrence_ms = start.occurrence_ms;
  record.parent_run_id = start.parent_run_id;
  record.parent_close = start.parent_close;
  if (auto problem =
          actors::encode_memo(start.options.memo, "memo", record.memo);
      !problem.empty()) {
    return make_error(errc::invalid_argument, problem);
  }
  // Last: a start refused above fixes no type here (in a cluster, what
  // start_run agreed stays agreed). Settled by start_agreed's answer.
  if (auto claimed =
          node.search.claim_for_start(record.tenant, start.options.search);
      !claimed) {
    return claimed.error();
  }
  record.search = start.options.search;
  return record;
}

// A start keyed by a token: the token's actor admits the run with the
// token's record in one write, or refuses it (held, a repeated command).
void start_with_token(node& node, persistence::run_record record,
                      const start_hook& hook, run_info info,
                      start_request start, done_fn done) {
  // The token may be an instance's or a command's (a reserved byte first):
  // a caller's own was checked as an id in start_token_of.
  if (auto problem =
          id_length_problem("hook.token", hook.token, hook_token_bytes_max);
      !problem.empty()) {
    done(make_error(errc::invalid_argument, problem));
    return;
  }
  auto until = actors::retain_until(hook.min_retention, record.created_at_ms,
                                    node.options.retention_max.count());
  if (!until) {
    done(until.error());
    return;
  }
  auto metadata = actors::encode_payload(hook.metadata);
  if (metadata.size() > metadata_bytes_max) {
    done(make_error(errc::invalid_argument,
                    "hook.metadata is " + std::to_string(metadata.size()) +
                        " bytes encoded; the limit is " +
                        std::to_string(metadata_bytes_max)));
    return;
  }
  persistence::token_record token;
  token.tenant = record.tenant;
  token.token = hook.token;
  token.owner_run = record.id;
  token.start_hook = true;
  token.created_at_ms = record.created_at_ms;
  token.retain_until_ms = *until;
  token.metadata = std::move(metadata);
  token.owner_spec_version = record.spec_version;
  token.owner_command = start.options.command_id;
  auto* at = &node;
  auto address = persistence::keys::token(record.tenant, hook.token);
  // Runs on the node's reply relay, once the token's actor decided (and,
  // when it admitted the run, started it).
  auto admitted = [at, run_id = record.id, info = std::move(info),
                   done = std::move(done)](result<run_info> outcome) mutable {
    if (outcome && outcome->id != run_id) {
      done(std::move(outcome));  // a repeated command's first run
      return;
    }
    if (outcome) {
      done(std::move(info));
      return;
    }
    // If the admission did land, the run must not wait for a restart:
    // activation finds out.
    if (outcome.error().code == errc::start_outcome_unknown) {
      at->runs_of(run_id).activate(run_id);
    }
    done(std::move(outcome));
  };
  actors::start_claim claim{std::move(record),
                            std::move(token),
                            std::move(start.answer),
                            std::move(start.first_events),
                            std::move(start.message_scope),
                            std::move(start.message_key)};
  node.relay->ask<run_info>(node.tokens_of(address), address,
                            std::move(admitted),
                            actors::start_claim_atom::value, std::move(claim));
}

// A plain start answered once its run settles: the admission rides in the
// run's first write (its first steps, or its end), one fsync in series
// fewer. Nothing the run does is seen before that write lands.
void start_in_first_write(node& node, persistence::run_record record,
                          run_info info, actors::start_answer settle,
                          done_fn done) {
  auto id = record.id;
  auto& runs = node.runs_of(id);
  node.relay->ask_fresh<run_info>(
      runs, std::move(id), std::move(done), actors::admit_atom::value,
      actors::fresh_run{std::move(record), std::move(settle), std::move(info)});
}

void start_plain(node& node, persistence::run_record record, run_info info,
                 const actors::start_answer& answer, done_fn done) {
  auto& home = node.shard_of_run(record.id);
  auto batch = home.store->batch();
  actors::add_admission(batch, {.run = record,
                                .info = info,
                                .answer = &answer,
                                .now_ms = node.clock->now_ms()});
  auto* at = &node;
  home.committer->submit(
      std::move(batch),
      [at, record = std::move(record), info = std::move(info),
       done = std::move(done)](const status& outcome) mutable {
        if (!outcome) {
          done(make_error(
              errc::storage_error,
              "the admission of run " + record.id +
                  " may or may not be durable: " + outcome.error().message));
          return;
        }
        activate_fresh(*at, {std::move(record), {}, {}});
        done(std::move(info));
      });
}

// The start's key lives in another shard than its run (a start token and
// a key that hash apart): the key's marker naming the run is made durable
// there first, then the run is admitted in its own shard without it; the
// answer is kept by the gateway afterwards, in the key's shard. A crash in
// between leaves a marker naming a run that does not exist: the retry
// starts that very run id (gateway/start_route.cpp). On one node a write
// of another shard; between nodes, the message a later issue sends.
void start_after_remote_key(node& node, start_request start, done_fn done) {
  auto key = std::move(*start.answer.key);
  start.answer.key.reset();
  auto* at = &node;
  auto pending = std::make_shared<start_request>(std::move(start));
  // A start refused for certain (no run admitted) leaves nothing for its
  // key: the marker is removed before the refusal is answered. An outcome
  // not known (a failed write) keeps it: the run may exist.
  done = [at, address = key.address,
          done = std::move(done)](result<run_info> outcome) mutable {
    if (outcome.ok() || outcome.error().code == errc::storage_error ||
        outcome.error().code == errc::start_outcome_unknown ||
        outcome.error().code == errc::shutting_down) {
      done(std::move(outcome));
      return;
    }
    auto refused = std::make_shared<result<run_info>>(std::move(outcome));
    remove_key_marker(*at, address, [refused, done = std::move(done)] {
      done(std::move(*refused));
    });
  };
  write_key_marker(
      node, key, pending->run_id,
      [at, pending, done = std::move(done)](const status& written) mutable {
        if (!written) {
          done(make_error(errc::storage_error,
                          "the request key of a start could not be written: " +
                              written.error().message));
          return;
        }
        start_run(*at, std::move(*pending), std::move(done));
      });
}

}  // namespace

bool activate_fresh(node& node, actors::fresh_run run) {
  auto id = run.record.id;
  return node.runs_of(id).with_new_actor(
      id, [&](const actors::run_actor& actor) {
        caf::anon_send(actor, actors::activate_atom::value, std::move(run));
      });
}

void write_key_marker(node& node, const persistence::start_key& key,
                      const std::string& run_id,
                      std::function<void(const status&)> done) {
  auto& key_home = node.shard_of_key(key.address);
  auto batch = key_home.store->batch();
  (void)persistence::add_request(
      batch, key.address,
      persistence::in_flight_marker(key, node.clock->now_ms(), run_id));
  key_home.committer->submit(std::move(batch), std::move(done));
}

void remove_key_marker(node& node, const persistence::request_address& address,
                       std::function<void()> done) {
  auto& key_home = node.shard_of_key(address);
  auto erase = key_home.store->batch();
  persistence::remove_request(erase, address);
  key_home.committer->submit(
      std::move(erase), [done = std::move(done)](const status&) { done(); });
}

std::uint32_t start_shard(const node& node, const start_options& options) {
  auto keyed = start_token_of(options, node.options);
  if (keyed && *keyed && (*keyed)->token.size() <= hook_token_bytes_max) {
    return node.map.of_token(
        persistence::keys::token(options.tenant, (*keyed)->token));
  }
  return static_cast<std::uint32_t>(-1);  // any
}

std::string draw_run_id(node& node, const start_request& start) {
  auto shard = start_shard(node, start.options);
  if (shard == static_cast<std::uint32_t>(-1)) {
    // A plain start: in its key's shard when it has one, so the key's
    // record rides in the admission; else anywhere.
    shard = start.answer.key ? node.map.of_key(start.answer.key->address)
                             : node.any_shard();
  }
  return node.new_run_id(shard);
}

bool key_kept_with_admission(const node& node, const start_request& start) {
  return start.answer.key && node.map.of_key(start.answer.key->address) ==
                                 node.map.of_run(start.run_id);
}

// The rest of a start whose attributes' types this node knows.
void start_agreed(node& node, start_request start, done_fn done) {
  const auto& options = start.options;
  auto keyed = start_token_of(options, node.options);
  if (!keyed) {
    done(keyed.error());
    return;
  }
  if (start.run_id.empty()) {
    start.run_id = draw_run_id(node, start);
  }
  if (start.answer.key && !key_kept_with_admission(node, start)) {
    start_after_remote_key(node, std::move(start), std::move(done));
    return;
  }
  if (*keyed && !options.instance_id.empty() &&
      options.on_duplicate == duplicate_policy::return_existing_active) {
    done = [at = &node, tenant = options.tenant,
            done = std::move(done)](result<run_info> outcome) {
      answer_existing_or(*at, tenant, done, std::move(outcome));
    };
  }
  if (*keyed && options.command_id.empty()) {
    // A held token refuses the start before a run id is even drawn (a
    // command's repeat needs the token's actor: it compares command ids).
    auto& token = (*keyed)->token;
    if (!token.empty() && token.size() <= hook_token_bytes_max) {
      auto owner =
          node.held.holder(persistence::keys::token(options.tenant, token),
                           node.clock->now_ms());
      if (owner) {
        done(actors::token_held_error(token, *owner));
        return;
      }
    }
  }
  auto record = new_record(node, start, *keyed);
  if (!record) {
    done(record.error());
    return;
  }
  if (!record->search.empty()) {
    // The types this start claimed last only if its run is (or may be)
    // admitted: a refused start (a held token, a duplicate) fixes none.
    // A repeated command is answered its first run: this start admitted
    // nothing, so its types stay unfixed.
    done = [at = &node, tenant = record->tenant, search = record->search,
            run_id = record->id,
            done = std::move(done)](result<run_info> outcome) {
      at->search.settle_start(
          tenant, search,
          outcome ? outcome->id == run_id
                  : start_outcome_indefinite(outcome.error().code));
      done(std::move(outcome));
    };
  }
  auto info = actors::describe_run(*record);
  info.input = std::move(start.input);
  if (*keyed) {
    start_with_token(node, std::move(*record), **keyed, std::move(info),
                     std::move(start), std::move(done));
  } else if (start.answer.when_settled) {
    start_in_first_write(node, std::move(*record), std::move(info),
                         std::move(start.answer), std::move(done));
  } else {
    start_plain(node, std::move(*record), std::move(info), start.answer,
                std::move(done));
  }
}

bool start_outcome_indefinite(errc code) {
  return code == errc::storage_error || code == errc::shutting_down ||
         code == errc::start_outcome_unknown || code == errc::timeout;
}

void start_run(node& node, start_request start, done_fn done) {
  if (auto checked = check_start(node, start); !checked) {
    done(checked.error());
    return;
  }
  // A name new to this node is agreed with the cluster first, off this
  // thread (it may be a run actor's): the start goes on where it answers.
  auto tenant = start.options.tenant;
  auto search = start.options.search;
  node.search.agree(tenant, search,
                    [&node, start = std::move(start),
                     done = std::move(done)](status agreed) mutable {
                      if (!agreed) {
                        done(agreed.error());
                        return;
                      }
                      start_agreed(node, std::move(start), std::move(done));
                    });
}

result<run_info> get_run(const node& node, std::string_view run_id,
                         std::string_view tenant) {
  if (run_id.empty() || run_id.size() > run_id_bytes_max) {
    return make_error(
        errc::invalid_argument,
        "a run id is 1 to 128 bytes; got " + std::to_string(run_id.size()));
  }
  auto record = node.shard_of_run(run_id).store->get_run(run_id);
  if (!record) {
    return record.error();
  }
  // Another tenant's run is indistinguishable from no run at all.
  if (!*record || (*record)->tenant != tenant) {
    return make_error(errc::run_not_found,
                      "no run with id '" + std::string(run_id) + "'");
  }
  auto info = actors::describe_run(**record);
  if (!is_terminal(info.status)) {
    if (auto reason = node.shard_of_run(info.id).runs->blocked(info.id)) {
      info.status = run_status::blocked;
      info.blocked_reason = *reason;
    }
  }
  return info;
}

std::string command_id_problem(std::string_view command_id) {
  // Only its length: a command id travels in bodies, never in a route.
  return command_id.empty() ? std::string()
                            : id_length_problem("a command id", command_id,
                                                identity_bytes_max);
}

}  // namespace durin::services
