#include "actors/admission.hpp"

#include "base/json_text.hpp"

namespace durin::actors {

namespace {

// The HTTP statuses the gateway answers a start with (gateway/start_route):
// a background start's pending run, a waited start's settled run.
constexpr std::uint16_t admitted_status = 202;
constexpr std::uint16_t settled_status = 200;

}  // namespace

void add_admission(persistence::write_batch& batch, const admission& what) {
  if (!what.run_in_batch) {
    batch.put_run(what.run);
  }
  batch.put_active(what.run.id);
  if (what.token != nullptr) {
    batch.put_token(*what.token);
  }
  if (what.answer == nullptr || !what.answer->key) {
    return;
  }
  const auto& key = *what.answer->key;
  if (!what.answer->when_settled &&
      persistence::add_request(
          batch, key.address,
          persistence::kept_answer(key, what.now_ms, admitted_status,
                                   json_text(what.info.to_json())))
          .ok()) {
    return;
  }
  // A marker protects the run until its answer is kept: a retry after a
  // crash answers this run instead of starting another.
  (void)persistence::add_request(
      batch, key.address,
      persistence::in_flight_marker(key, what.now_ms, what.run.id));
}

bool add_settled_answer(persistence::write_batch& batch,
                        const persistence::start_key& key, std::int64_t now_ms,
                        const run_info& run) {
  return persistence::add_request(
             batch, key.address,
             persistence::kept_answer(key, now_ms, settled_status,
                                      json_text(run.to_json())))
      .ok();
}

}  // namespace durin::actors
