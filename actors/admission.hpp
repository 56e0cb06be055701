// The seam for node components embedded beside the runtime in one process
// (the HTTP gateway): they share the node's store and committer instead of
// opening their own, and may add records to a run's admission batch so that
// those records are durable exactly when the run is (both or neither).
//
// services::services_of(runtime&) (declared in durin/runtime.hpp; the type in
// actors/node.hpp) gives the node's services. Not for embedding
// applications: these types are internal and may change.
#pragma once

#include <functional>

#include "durin/run.hpp"
#include "persistence/store.hpp"

namespace durin::detail {

// Set in start_options::admission. `add` is called once per admission
// attempt, with the run as the start answers it (status pending, input and
// createdAt as the caller will see them), while the admission batch is
// built: on the caller's thread, or on the token actor's thread for a start
// with a hook. A start without a hook that sets `settle` writes no
// admission of its own: `add` is called on the run's actor, for the run's
// first write, which carries the admission (and the run's first events,
// its end too for a flow that ends at once). It must not block or write;
// it only adds to `batch`. When the start is refused before writing
// (flow-not-found, hook-conflict, bad input) it is not called, or its
// records are dropped with the batch.
struct admission_records {
  std::function<void(const run_info& run, persistence::write_batch& batch)> add;
  // Optional, for a caller that answers once the run waits or ends: called
  // once, on the run's actor, while it builds the batch that first records
  // the run waiting or ended (the run as that batch writes it), so those
  // records are durable exactly when that status is. Then `settled(true)`
  // once that batch is durable, `settled(false)` if it failed (indefinite).
  // A run whose actor was reactivated from storage calls neither: the
  // caller must not count on them.
  std::function<void(const run_info& run, persistence::write_batch& batch)>
      settle;
  std::function<void(bool durable)> settled;
};

}  // namespace durin::detail

namespace durin::actors {

// What a run's admission writes, for add_admission.
struct admission {
  const persistence::run_record& run;
  const run_info& info;  // the run as the start answers it
  // The token record that keys the start (a start hook, an instance id, a
  // command id), written with the run: one owner or none, both or neither.
  const persistence::token_record* token = nullptr;
  // Records a node component adds (a request key's record), or null.
  const detail::admission_records* extra = nullptr;
  // The batch writes a newer record of the run itself (the run's first
  // events and status): the admission then adds only the rest.
  bool run_in_batch = false;
};

// Adds a run's admission to `batch`: the run record, its active marker, the
// token that keys it and the records `extra` adds. Every admission site (a
// plain start, a run admitted in its first write, a start with a token)
// builds its batch here, so a run is admitted the same way on every path.
void add_admission(persistence::write_batch& batch, const admission& what);

}  // namespace durin::actors
