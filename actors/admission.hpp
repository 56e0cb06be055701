// A run's admission: the records that make a run exist, written in one atomic
// batch by whichever site admits it (a plain start, the run's actor when the
// admission rides in its first write, a token actor for a start with a
// token). Data goes down: a start carries what its caller's Idempotency-Key
// needs as plain values (start_answer); the site writes the key's record
// into that same batch, so the run and its key are durable together or not
// at all. Internal to the node; not for embedding applications.
#pragma once

#include <cstdint>
#include <optional>

#include "durin/run.hpp"
#include "persistence/requests.hpp"
#include "persistence/store.hpp"

namespace durin::actors {

// How a start's caller is answered, and under which key the answer is kept.
struct start_answer {
  // The caller's Idempotency-Key; none: nothing is kept.
  std::optional<persistence::start_key> key;
  // The caller is answered once the run first waits or ends. Its admission
  // then writes only a marker naming the run, and the batch that first
  // records the run waiting or ended keeps the answer (the run as that batch
  // writes it, HTTP 200): a waited no-op start costs one fsync. Otherwise the
  // admission keeps the answer at once (the pending run, HTTP 202), or a
  // marker when it is too large to keep.
  bool when_settled = false;
};

// What a run's admission writes, for add_admission.
struct admission {
  const persistence::run_record& run;
  const run_info& info;  // the run as the start answers it
  // The token record that keys the start (a start hook, an instance id, a
  // command id), written with the run: one owner or none, both or neither.
  const persistence::token_record* token = nullptr;
  const start_answer* answer = nullptr;  // may be null
  std::int64_t now_ms = 0;
  // The batch writes a newer record of the run itself (the run's first
  // events and status): the admission then adds only the rest.
  bool run_in_batch = false;
};

// Adds a run's admission to `batch`: the run record, its active marker, the
// token that keys it and its key's record. Every admission site builds its
// batch here, so a run is admitted the same way on every path.
void add_admission(persistence::write_batch& batch, const admission& what);

// Adds the kept answer of a start answered once its run settles to the
// batch that first records `run` waiting or ended. False when it is too
// large to keep (the marker stays; the caller keeps the answer itself).
bool add_settled_answer(persistence::write_batch& batch,
                        const persistence::start_key& key, std::int64_t now_ms,
                        const run_info& run);

}  // namespace durin::actors
