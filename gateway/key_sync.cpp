// API keys and tenants across a cluster (gateway/key_sync.hpp): the
// records' wire form, the gate in front of authentication, a change sent to
// every live node, the internal routes that merge, and the exchange of
// whole tables after a node registers.
#include "gateway/key_sync.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace durin::gateway {

namespace {

using persistence::api_key_record;
using persistence::tenant_record;

constexpr std::size_t record_text_bytes_max = 1024;  // as auth_store takes

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---- the records' wire form: the secret's hash, never a secret -----------

json to_json(const tenant_record& tenant) {
  return {{"id", tenant.id},
          {"name", tenant.name},
          {"createdAtMs", tenant.created_at_ms}};
}

json to_json(const api_key_record& key) {
  return {{"id", key.id},
          {"tenant", key.tenant},
          {"name", key.name},
          {"secretSha256", key.secret_sha256},
          {"createdAtMs", key.created_at_ms},
          {"role", to_string(key.role)},
          {"revokedAtMs", key.revoked_at_ms}};
}

json to_json(const auth::key_table& table) {
  json tenants = json::array();
  for (const auto& tenant : table.tenants) {
    tenants.push_back(to_json(tenant));
  }
  json keys = json::array();
  for (const auto& key : table.keys) {
    keys.push_back(to_json(key));
  }
  return {{"tenants", std::move(tenants)}, {"apiKeys", std::move(keys)}};
}

bool text_field(const json& object, const char* name, std::string& out,
                bool may_be_empty) {
  if (!object.contains(name) || !object[name].is_string()) {
    return false;
  }
  out = object[name].get<std::string>();
  return out.size() <= record_text_bytes_max && (may_be_empty || !out.empty());
}

bool time_field(const json& object, const char* name, std::int64_t& out) {
  if (!object.contains(name) || !object[name].is_number_integer()) {
    return false;
  }
  out = object[name].get<std::int64_t>();
  return out >= 0;
}

bool is_sha256_hex(const std::string& text) {
  return text.size() == 64 &&
         text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::optional<tenant_record> tenant_from(const json& value) {
  tenant_record tenant;
  if (!value.is_object() || !text_field(value, "id", tenant.id, false) ||
      !text_field(value, "name", tenant.name, true) ||
      !time_field(value, "createdAtMs", tenant.created_at_ms)) {
    return std::nullopt;
  }
  return tenant;
}

std::optional<api_key_record> key_from(const json& value) {
  api_key_record key;
  std::string role;
  if (!value.is_object() || !text_field(value, "id", key.id, false) ||
      !text_field(value, "tenant", key.tenant, false) ||
      !text_field(value, "name", key.name, true) ||
      !text_field(value, "secretSha256", key.secret_sha256, false) ||
      !is_sha256_hex(key.secret_sha256) ||
      !time_field(value, "createdAtMs", key.created_at_ms) ||
      !time_field(value, "revokedAtMs", key.revoked_at_ms) ||
      !text_field(value, "role", role, false)) {
    return std::nullopt;
  }
  auto parsed = persistence::parse_key_role(role);
  if (!parsed) {
    return std::nullopt;
  }
  key.role = *parsed;
  return key;
}

// A table from {"tenants": [...], "apiKeys": [...]}: nullopt when any
// record is malformed or there are too many (nothing of it is merged).
std::optional<auth::key_table> table_from(const json& body) {
  if (!body.is_object() || !body.contains("tenants") ||
      !body["tenants"].is_array() || !body.contains("apiKeys") ||
      !body["apiKeys"].is_array() ||
      body["tenants"].size() > auth::table_records_max ||
      body["apiKeys"].size() > auth::table_records_max) {
    return std::nullopt;
  }
  auth::key_table table;
  for (const auto& value : body["tenants"]) {
    auto tenant = tenant_from(value);
    if (!tenant) {
      return std::nullopt;
    }
    table.tenants.push_back(std::move(*tenant));
  }
  for (const auto& value : body["apiKeys"]) {
    auto key = key_from(value);
    if (!key) {
      return std::nullopt;
    }
    table.keys.push_back(std::move(*key));
  }
  return table;
}

http_request internal_post(std::string target, const json& body) {
  return {"POST",
          std::move(target),
          {{"content-type", "application/json"}},
          body.dump()};
}

// The nodes that answered 200 and those that did not, by id.
struct spread_outcome {
  std::vector<std::string> answered;
  std::vector<std::string> missing;
};

spread_outcome sort_answers(
    const std::vector<placement::node_answer>& answers) {
  spread_outcome out;
  for (const auto& answer : answers) {
    (answer.response.status == 200 ? out.answered : out.missing)
        .push_back(answer.node);
  }
  return out;
}

std::string joined(const std::vector<std::string>& nodes) {
  std::string text;
  for (const auto& node : nodes) {
    text += (text.empty() ? "" : ", ") + node;
  }
  return text;
}

}  // namespace

// ---- the gate in front of authentication -----------------------------------

bool api::keys_in_step() const {
  if (placement_ == nullptr) {
    return true;
  }
  const auto registration = placement_->registration();
  return registration != 0 && keys_in_step_for() == registration &&
         placement_->live();
}

std::optional<http_response> api::keys_not_in_step() const {
  if (keys_in_step()) {
    return std::nullopt;
  }
  auto response = error_response(
      503, "keys-not-synced",
      "this node has not yet merged the cluster's API keys and tenants since "
      "it (re)joined, or holds no live lease now: nothing was done; retry "
      "in a moment, or on another node");
  response.headers.emplace_back("Retry-After", "1");
  return response;
}

// ---- a change sent to every live node --------------------------------------

std::optional<http_response> api::spread_keys(const auth::key_table& change,
                                              key_change kind,
                                              const principal& caller) {
  if (placement_ == nullptr) {
    return std::nullopt;
  }
  const auto timeout = std::chrono::milliseconds(options_.key_spread_ms);
  const auto request =
      internal_post("/v1/internal/key-records", to_json(change));
  auto outcome =
      sort_answers(placement_->ask_every_live_node(request, caller, timeout));
  if (outcome.missing.empty()) {
    return std::nullopt;
  }
  const std::string also = outcome.answered.empty()
                               ? std::string()
                               : " and on " + joined(outcome.answered);
  std::string message;
  if (kind == key_change::created) {
    // Its secret is shown once and never kept: a retry could not answer
    // this key again, so it goes, here and wherever it arrived, and the
    // retry makes another. Revoked wins wherever the two meet.
    auth::key_table withdrawn;
    for (auto key : change.keys) {
      key.revoked_at_ms = std::max<std::int64_t>(1, wall_ms());
      withdrawn.keys.push_back(std::move(key));
    }
    // A withdrawal that fails leaves a key whose secret nobody holds.
    (void)keys_.merge(withdrawn);
    (void)placement_->ask_every_live_node(
        internal_post("/v1/internal/key-records", to_json(withdrawn)), caller,
        std::min(timeout, std::chrono::milliseconds(1000)));
    message = "the new API key was written on this node" + also + ", not on " +
              joined(outcome.missing) +
              " in time; it was withdrawn and its secret never sent (a tenant "
              "made with it stays, without a key). Retry with the same "
              "Idempotency-Key: the retry makes it anew and sends it to every "
              "node";
  } else {
    message = "the revocation is durable on this node" + also + ", not on " +
              joined(outcome.missing) +
              " in time, where the key may still work. Retry (the same "
              "DELETE, or the same Idempotency-Key): the retry sends it to "
              "every node again";
  }
  json body = {{"code", "keys-not-propagated"},
               {"message", message},
               {"answeredNodes", outcome.answered},
               {"missingNodes", outcome.missing}};
  auto response = json_response(503, body);
  response.headers.emplace_back("Retry-After", "1");
  return response;
}

// ---- the internal routes ---------------------------------------------------

http_response api::merge_key_records(request& r) {
  if (!r.forwarded) {
    return error_response(404, "not-found", "no route " + r.path_text);
  }
  auto table = table_from(r.body);
  if (!table) {
    return bad_request(
        "a key-records body is {\"tenants\", \"apiKeys\"} of "
        "well-formed records");
  }
  auto merged = keys_.merge(*table);
  if (!merged) {
    return error_response(merged.error());
  }
  return json_response(200, {{"merged", *merged}});
}

http_response api::exchange_key_table(request& r) {
  if (!r.forwarded || placement_ == nullptr) {
    return error_response(404, "not-found", "no route " + r.path_text);
  }
  auto table = table_from(r.body);
  if (!table || !r.body.contains("registration") ||
      !r.body["registration"].is_number_integer()) {
    return bad_request(
        "a key-table body is {\"registration\", \"tenants\", "
        "\"apiKeys\"}");
  }
  const auto asker = r.body["registration"].get<std::int64_t>();
  // Once the asker is in this node's routing table, every change made here
  // from now on is sent to it; one made before is in the table answered.
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(options_.key_table_wait_ms);
  for (;;) {
    bool listed = false;
    for (const auto& node : placement_->live_nodes()) {
      listed = listed || node.registration == asker;
    }
    if (listed) {
      break;
    }
    if (std::chrono::steady_clock::now() >= until) {
      return error_response(503, "keys-not-synced",
                            "the asking node is not in this node's routing "
                            "table yet; ask again");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (auto merged = keys_.merge(*table); !merged) {
    return error_response(merged.error());
  }
  auto own = keys_.table();
  if (!own) {
    return error_response(own.error());
  }
  return json_response(200, to_json(*own));
}

// ---- the exchange after a registration -------------------------------------

status api::sync_keys(std::int64_t registration) {
  if (placement_ == nullptr) {
    return {};
  }
  // A routing table that lists this registration was read after it: every
  // node registered before this one is in it.
  bool listed = false;
  for (const auto& node : placement_->live_nodes()) {
    listed = listed || node.registration == registration;
  }
  if (!listed) {
    return make_error(errc::shutting_down,
                      "the routing table does not list this node's "
                      "registration yet");
  }
  auto own = keys_.table();
  if (!own) {
    return own.error();
  }
  auto body = to_json(*own);
  body["registration"] = registration;
  const auto answers = placement_->ask_every_live_node(
      internal_post("/v1/internal/key-table", body), principal{},
      std::chrono::milliseconds(options_.key_spread_ms));
  std::vector<std::string> missing;
  for (const auto& answer : answers) {
    auto parsed = json::parse(answer.response.body, nullptr, false);
    auto table = answer.response.status == 200 && !parsed.is_discarded()
                     ? table_from(parsed)
                     : std::nullopt;
    if (!table) {
      missing.push_back(answer.node);
      continue;
    }
    if (auto merged = keys_.merge(*table); !merged) {
      return merged.error();
    }
  }
  if (!missing.empty()) {
    return make_error(errc::shutting_down,
                      "no key table from " + joined(missing) + " yet");
  }
  keys_in_step_for_.store(registration, std::memory_order_release);
  return {};
}

// ---- key_sync: the thread
// ----------------------------------------------------

key_sync::key_sync(api& routes, placement& where, key_sync_options options)
    : routes_(routes),
      where_(where),
      options_(options),
      thread_([this] { loop(); }) {}

key_sync::~key_sync() {
  stop();
}

void key_sync::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

bool key_sync::wait_in_step(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, limit, [this] {
    const auto registration = where_.registration();
    return stopping_ ||
           (registration != 0 && routes_.keys_in_step_for() == registration);
  });
}

void key_sync::loop() {
  using clock = std::chrono::steady_clock;
  auto complained = clock::now();
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const auto registration = where_.registration();
    auto pause = options_.poll;
    if (registration != 0 && routes_.keys_in_step_for() != registration) {
      lock.unlock();
      auto synced = routes_.sync_keys(registration);
      if (!synced && clock::now() - complained >= options_.complain) {
        complained = clock::now();
        std::fprintf(stderr,
                     "durin: API keys not in step with the cluster yet (%s); "
                     "authenticated requests answer 503 keys-not-synced\n",
                     synced.error().message.c_str());
      }
      lock.lock();
      changed_.notify_all();
      if (!synced) {
        pause = options_.retry;
      }
    }
    changed_.wait_for(lock, pause, [this] { return stopping_; });
  }
}

}  // namespace durin::gateway
