// The hook side of the run engine: claims, payloads, disposal and the loss
// of a token, as durable calls replayed like any other.
#include <cctype>
#include <charconv>
#include <ctime>
#include <set>
#include <stdexcept>

#include "actors/identity.hpp"
#include "actors/run_engine.hpp"
#include "base/time_text.hpp"
#include "durin/ids.hpp"
#include "durin/limits.hpp"

namespace durin::actors {

namespace {

using persistence::event_kind;
using persistence::event_record;

using limits::token_bytes_max;

std::string webhook_token() {
  static constexpr char digits[] = "0123456789abcdefghijklmnopqrstuv";
  std::random_device entropy;
  std::string token = "wh_";
  for (int i = 0; i < 32; ++i) {
    token += digits[entropy() % 32];
  }
  return token;
}

// A caller's hook token: an id a route can name (durin/ids.hpp) of at most
// token_bytes_max bytes, outside the namespace reserved for instance and
// command ids.
void check_caller_token(const std::string& token) {
  if (is_reserved_token(token)) {
    throw invalid_argument_error(
        "a hook token may not begin with byte 0x1F (reserved for instance "
        "and command ids)");
  }
  if (auto problem = id_problem("a hook token", token, token_bytes_max);
      !problem.empty()) {
    throw invalid_argument_error(problem);
  }
}

}  // namespace

result<std::int64_t> retain_until(const json& spec, std::int64_t from_ms,
                                  std::int64_t cap_ms) {
  if (spec.is_null()) {
    return std::int64_t{0};
  }
  auto beyond_cap = [cap_ms] {
    return make_error(errc::invalid_argument,
                      "minRetention exceeds the cap of " +
                          std::to_string(cap_ms / 86'400'000) + " days (" +
                          std::to_string(cap_ms) + " ms)");
  };
  std::int64_t until = 0;
  if (spec.is_number()) {
    auto ms = spec.get<double>();
    if (ms < 0) {
      return make_error(errc::invalid_argument,
                        "minRetention must not be negative");
    }
    // Compared before the conversion: 1e300 ms must not overflow.
    if (ms > static_cast<double>(cap_ms)) {
      return beyond_cap();
    }
    until = from_ms + static_cast<std::int64_t>(ms);
  } else if (spec.is_string()) {
    auto text = spec.get<std::string>();
    if (auto ms = time_text::parse_duration_ms(text)) {
      if (*ms > static_cast<double>(cap_ms)) {
        return beyond_cap();
      }
      until = from_ms + static_cast<std::int64_t>(*ms);
    } else if (auto absolute = time_text::parse_rfc3339_ms(text)) {
      until = *absolute;
    } else {
      return make_error(errc::invalid_argument,
                        "minRetention '" + text +
                            "' is neither a duration (\"30 days\", \"2h\", "
                            "\"500ms\") nor an RFC 3339 time");
    }
  } else {
    return make_error(errc::invalid_argument,
                      "minRetention must be a duration string, a number of "
                      "milliseconds or an RFC 3339 time");
  }
  if (until - from_ms > cap_ms) {
    return beyond_cap();
  }
  return until;
}

std::size_t run_engine::hook_create(detail::hook_request request) {
  refuse_in_query("ctx.create_hook");
  hook_entry entry;
  auto index = hooks_.size();
  if (!request.webhook && !record_.start_token.empty() &&
      request.token == record_.start_token) {
    // The start hook: bound, not registered; no call, no history.
    const char* misplaced = !request.metadata.is_null()        ? "metadata"
                            : !request.min_retention.is_null() ? "min_retention"
                            : request.force                    ? "force"
                                                               : nullptr;
    if (misplaced != nullptr) {
      throw invalid_argument_error(
          std::string("create_hook with the run's start token takes no '") +
          misplaced + "': it belongs on the start");
    }
    entry.token = request.token;
    entry.state = hook_entry::claim::owned;
    hooks_.push_back(std::move(entry));
    return index;
  }
  if (!request.webhook) {
    check_caller_token(request.token);
  }
  auto until =
      retain_until(request.min_retention, now(), env_.retention_max_ms);
  if (!until) {
    throw invalid_argument_error(until.error().message);
  }
  auto number = next_call_++;
  entry.call = number;
  entry.token = request.token;
  if (stopped() || !check_replay(number, call_kind::hook_create,
                                 request.webhook ? "" : request.token)) {
    hooks_.push_back(std::move(entry));
    return index;
  }
  if (const auto* rec = recorded(number)) {
    const auto& event = *rec->events.front();
    entry.token = event.name;
    auto data = decode_payload(event.data);
    if (data.is_object() && data["owner"].is_string()) {
      entry.state = hook_entry::claim::conflict;
      entry.owner = data["owner"].get<std::string>();
    } else {
      entry.state = hook_entry::claim::owned;
    }
    hooks_.push_back(std::move(entry));
    return index;
  }
  if (request.webhook) {
    // About one draw per shard; bounded, in case a map ever answered no.
    entry.token = webhook_token();
    for (int draw = 0; draw < 1 << 16 && env_.token_is_home &&
                       !env_.token_is_home(entry.token);
         ++draw) {
      entry.token = webhook_token();
    }
  }
  entry.claim = hook_claim{record_.id,
                           number,
                           encode_payload(request.metadata),
                           *until,
                           request.force,
                           request.webhook,
                           record_.spec_version};
  hooks_.push_back(std::move(entry));
  send_claim(hooks_.back());
  return index;
}

const std::string& run_engine::hook_token(std::size_t hook) const {
  return hooks_.at(hook).token;
}

void run_engine::on_claim_outcome(const claim_outcome& outcome) {
  if (stopped()) {
    return;
  }
  for (std::size_t i = 0; i < hooks_.size(); ++i) {
    auto& entry = hooks_[i];
    if (entry.call != outcome.call || entry.token != outcome.token ||
        entry.state != hook_entry::claim::pending) {
      continue;
    }
    if (!outcome.owned && outcome.owner == "unknown") {
      // The token's write failed (indefinite): ask again.
      send_claim(entry);  // the same claim, with all its options
      return;
    }
    json data = {{"owner", outcome.owned ? json() : json(outcome.owner)}};
    stage({.kind = event_kind::hook_created,
           .call = entry.call,
           .at_ms = now(),
           .name = entry.token,
           .data = encode_payload(data)});
    ++staged_values_;  // effects wait until the claim's record is durable
    entry.state =
        outcome.owned ? hook_entry::claim::owned : hook_entry::claim::conflict;
    entry.owner = outcome.owned ? std::string() : outcome.owner;
    if (pending_.hook == i && pending_.kind == call_kind::hook_conflict) {
      pending_.out->value = outcome.owned ? json() : json(outcome.owner);
      resume_parked();
    } else if (pending_.hook == i && pending_.kind == call_kind::hook_next) {
      if (try_next_payload(entry, pending_.out)) {
        resume_parked();
      } else if (entry.state == hook_entry::claim::owned) {
        // A read begun before the claim was answered: subscribe now, and
        // write the claim's record, so the run can idle (and passivate)
        // on the hook as a read begun after it does.
        subscribe(entry);
        flush_then([] {});
      }
    }
    return;
  }
}

bool run_engine::hook_conflict(std::size_t hook, detail::call_outcome* out) {
  if (stopped()) {
    return false;
  }
  auto& entry = hooks_.at(hook);
  switch (entry.state) {
    case hook_entry::claim::owned:
      out->value = nullptr;
      return true;
    case hook_entry::claim::conflict:
      out->value = entry.owner;
      return true;
    case hook_entry::claim::pending:
      break;
  }
  pending_ = pending_call::of(call_kind::hook_conflict, 0, out);
  pending_.hook = hook;
  return false;
}

bool run_engine::hook_next(std::size_t hook, detail::call_outcome* out) {
  auto number = next_call_++;
  auto& entry = hooks_.at(hook);
  if (stopped() || !check_replay(number, call_kind::hook_next, entry.token)) {
    return false;
  }
  if (const auto* rec = recorded(number)) {
    const auto& event = *rec->events.front();
    auto data = decode_payload(event.data);
    if (event.kind == event_kind::hook_lost) {
      out->failed = true;
      out->error_code = data.value("code", std::string("hook-conflict"));
      out->error_message = data.value("owner", std::string());
      return true;
    }
    if (data.contains("end")) {
      out->value = nullptr;
      return true;
    }
    entry.consumed = data.value("sequence", std::uint64_t{0});
    out->value = json{{"payload", data["payload"]}};
    return true;
  }
  pending_ = pending_call::of(call_kind::hook_next, number, out);
  pending_.hook = hook;
  if (entry.state != hook_entry::claim::pending &&
      try_next_payload(entry, out)) {
    pending_ = pending_call{};
    return true;
  }
  if (entry.state == hook_entry::claim::owned) {
    // Payloads left unread here lie beyond a gap: scan for what is before.
    auto left = arrived_.find(entry.token);
    subscribe(entry, left != arrived_.end() && !left->second.empty());
  }
  stage_status(run_status::waiting);
  // Writes what is staged (the payloads read so far, the status waiting)
  // now or right after the write in flight: nothing else may come to carry
  // it while the run waits on the outside world.
  flush_then([] {});
  return false;
}

// Decides the pending read of `entry` from what is known now. REQUIRES:
// pending_ describes that read. True (and recorded) when decided.
bool run_engine::try_next_payload(hook_entry& entry,
                                  detail::call_outcome* out) {
  auto record_read = [&](event_kind kind, json data) {
    stage({.kind = kind,
           .call = pending_.call,
           .at_ms = now(),
           .name = entry.token,
           .data = encode_payload(data)});
    ++staged_values_;
    stage_status(run_status::running);
  };
  if (entry.state == hook_entry::claim::conflict) {
    record_read(event_kind::hook_lost,
                {{"code", "hook-conflict"}, {"owner", entry.owner}});
    out->failed = true;
    out->error_code = "hook-conflict";
    out->error_message = entry.owner;
    return true;
  }
  if (entry.disposed) {
    record_read(event_kind::hook_payload, {{"end", true}});
    out->value = nullptr;
    return true;
  }
  auto& buffer = arrived_[entry.token];
  while (!buffer.empty() && buffer.begin()->first <= entry.consumed) {
    buffer.erase(buffer.begin());
  }
  bool lost = !entry.lost_to.empty();
  // The next payload is the one after the last consumed, or one a scan
  // read: a scan from the last consumed on reads every payload of the run
  // in order, so nothing it did not deliver lies between. A pushed payload
  // beyond a gap waits for a scan (the pushes before it were lost, or it is
  // a take-over's first, whose sequence does not start at 1).
  bool next_known =
      !buffer.empty() && (buffer.begin()->first == entry.consumed + 1 ||
                          buffer.begin()->second.scanned);
  if (next_known && (!lost || buffer.begin()->first <= entry.lost_after)) {
    auto sequence = buffer.begin()->first;
    auto bytes = std::move(buffer.begin()->second.bytes);
    buffer.erase(buffer.begin());
    json payload;
    try {
      payload = decode_payload(bytes);
    } catch (const json::exception&) {
      payload = nullptr;
    }
    entry.consumed = sequence;
    record_read(event_kind::hook_payload,
                {{"sequence", sequence}, {"payload", payload}});
    out->value = json{{"payload", std::move(payload)}};
    return true;
  }
  if (lost && entry.consumed >= entry.lost_after) {
    record_read(event_kind::hook_lost,
                {{"code", "hook-force-claimed"}, {"owner", entry.lost_to}});
    out->failed = true;
    out->error_code = "hook-force-claimed";
    out->error_message = entry.lost_to;
    return true;
  }
  return false;
}

void run_engine::on_hook_payload(const hook_delivery& delivery) {
  if (stopped()) {
    return;
  }
  auto [at, fresh] = arrived_[delivery.token].try_emplace(
      delivery.sequence, arrived_payload{delivery.payload, delivery.scanned});
  if (!fresh && delivery.scanned) {
    at->second.scanned = true;  // a push, then the same payload scanned
  }
  if (pending_.kind == call_kind::hook_next) {
    auto& entry = hooks_.at(pending_.hook);
    if (entry.token != delivery.token ||
        entry.state == hook_entry::claim::pending) {
      return;
    }
    if (try_next_payload(entry, pending_.out)) {
      resume_parked();
    } else if (!delivery.scanned && entry.state == hook_entry::claim::owned &&
               entry.lost_to.empty() && !entry.disposed &&
               delivery.sequence > entry.consumed + 1) {
      subscribe(entry, true);  // a gap: read what lies before from the inbox
    }
  }
}

void run_engine::on_hook_lost(const hook_loss& loss) {
  if (stopped()) {
    return;
  }
  for (std::size_t i = 0; i < hooks_.size(); ++i) {
    auto& entry = hooks_[i];
    if (entry.token != loss.token || entry.state != hook_entry::claim::owned ||
        entry.disposed) {
      continue;
    }
    entry.lost_to = loss.new_owner;
    entry.lost_after = loss.last_sequence;
    if (pending_.kind == call_kind::hook_next && pending_.hook == i &&
        try_next_payload(entry, pending_.out)) {
      resume_parked();
    }
  }
}

void run_engine::hook_dispose(std::size_t hook) {
  refuse_in_query("a hook's dispose");
  if (stopped()) {
    return;
  }
  auto& entry = hooks_.at(hook);
  if (entry.disposed) {
    return;
  }
  auto number = next_call_++;
  if (!check_replay(number, call_kind::hook_dispose, entry.token)) {
    return;
  }
  entry.disposed = true;
  if (recorded(number) != nullptr) {
    return;
  }
  stage({.kind = event_kind::hook_disposed,
         .call = number,
         .at_ms = now(),
         .name = entry.token});
  if (entry.state == hook_entry::claim::owned && entry.lost_to.empty()) {
    token_message message;
    message.what = token_message::kind::dispose;
    message.token = entry.token;
    message.notice = owner_notice{record_.id, now()};
    flush_then([this, message] { output_.token_messages.push_back(message); });
  }
}

bool run_engine::begin_watch(const std::string& run_id, bool until_end,
                             detail::call_outcome* out) {
  refuse_in_query("ctx.run");
  auto number = next_call_++;
  std::string name = (until_end ? "run-result:" : "run-status:") + run_id;
  if (stopped() || !check_replay(number, call_kind::value, name)) {
    return false;
  }
  if (const auto* rec = recorded(number)) {
    out->value = decode_payload(rec->events.front()->data);
    return true;
  }
  auto record_state = [this, number, name](const json& state) {
    stage({.kind = event_kind::value_recorded,
           .call = number,
           .at_ms = now(),
           .name = name,
           .data = encode_payload(state)});
    ++staged_values_;
  };
  auto state =
      env_.read_run ? env_.read_run(run_id) : std::optional<json>(json());
  if (state) {
    // A run not found (no status) is as final as an ended one.
    auto status = parse_run_status(state->value("status", std::string()));
    bool ended = !status || is_terminal(*status);
    if (!until_end || ended) {
      record_state(*state);
      out->value = std::move(*state);
      return true;
    }
  }
  // Reported when it ends, or, read on another node, as it is now.
  pending_ = pending_call::of(call_kind::watch, number, out);
  pending_.watched = run_id;
  pending_.watched_until_end = until_end;
  output_.watches.push_back({run_id, until_end});
  return false;
}

void run_engine::on_watched_run(const std::string& run_id, const json& state) {
  if (stopped() || pending_.kind != call_kind::watch ||
      pending_.watched != run_id) {
    return;
  }
  stage({.kind = event_kind::value_recorded,
         .call = pending_.call,
         .at_ms = now(),
         .name = (pending_.watched_until_end ? "run-result:" : "run-status:") +
                 run_id,
         .data = encode_payload(state)});
  ++staged_values_;
  pending_.out->value = state;
  resume_parked();
}

std::optional<run_watch> run_engine::pending_watch() const {
  if (stopped() || pending_.kind != call_kind::watch) {
    return std::nullopt;
  }
  return run_watch{pending_.watched, pending_.watched_until_end};
}

void run_engine::subscribe(hook_entry& entry, bool again) {
  if (entry.subscribed && !again) {
    return;
  }
  entry.subscribed = true;
  token_message message;
  message.what = token_message::kind::subscribe;
  message.token = entry.token;
  message.subscribe = subscription{record_.id, entry.consumed + 1};
  send(std::move(message));
}

std::vector<token_message> run_engine::hook_requests_again() const {
  std::vector<token_message> out;
  if (stopped()) {
    return out;
  }
  for (std::size_t i = 0; i < hooks_.size(); ++i) {
    const auto& entry = hooks_[i];
    token_message message;
    message.token = entry.token;
    if (entry.state == hook_entry::claim::pending &&
        !entry.claim.run_id.empty()) {
      message.what = token_message::kind::claim;
      message.claim = entry.claim;
    } else if (pending_.kind == call_kind::hook_next && pending_.hook == i &&
               entry.state == hook_entry::claim::owned && entry.subscribed &&
               !entry.disposed) {
      message.what = token_message::kind::subscribe;
      message.subscribe = subscription{record_.id, entry.consumed + 1};
    } else {
      continue;
    }
    out.push_back(std::move(message));
  }
  return out;
}

void run_engine::send(token_message message) {
  output_.token_messages.push_back(std::move(message));
}

void run_engine::send_claim(const hook_entry& entry) {
  token_message message;
  message.what = token_message::kind::claim;
  message.token = entry.token;
  message.claim = entry.claim;
  send(std::move(message));
}

void run_engine::announce_end() {
  auto tokens = tokens_held_at_end();
  output_.ending_tokens.assign(tokens.begin(), tokens.end());
}

std::set<std::string> run_engine::tokens_held_at_end() const {
  std::set<std::string> tokens;
  // A run that continues as new hands its start token to its successor.
  bool handing_over = continue_input_.has_value() && !cancelled_;
  if (!record_.start_token.empty() && !handing_over) {
    tokens.insert(record_.start_token);
  }
  for (auto& entry : hooks_) {
    if (entry.state == hook_entry::claim::owned && !entry.disposed) {
      tokens.insert(entry.token);
    }
  }
  for (auto& entry : hooks_) {
    if (entry.disposed) {
      tokens.erase(entry.token);
    }
  }
  return tokens;
}

void run_engine::notify_tokens_of_end() {
  for (auto& token : tokens_held_at_end()) {
    token_message message;
    message.what = token_message::kind::owner_end;
    message.token = token;
    message.notice = owner_notice{record_.id, record_.completed_at_ms};
    output_.token_messages.push_back(std::move(message));
  }
}

}  // namespace durin::actors
