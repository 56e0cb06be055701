#include "actors/admission.hpp"

namespace durin::actors {

void add_admission(persistence::write_batch& batch, const admission& what) {
  if (!what.run_in_batch) {
    batch.put_run(what.run);
  }
  batch.put_active(what.run.id);
  if (what.token != nullptr) {
    batch.put_token(*what.token);
  }
  if (what.extra != nullptr && what.extra->add) {
    what.extra->add(what.info, batch);  // in the same atomic write
  }
}

}  // namespace durin::actors
