#include "services/node.hpp"

namespace durin::services {

std::string node::new_run_id() {
  static constexpr char digits[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  auto ms = static_cast<std::uint64_t>(clock->now_ms());
  std::uint64_t high;
  std::uint64_t low;
  {
    std::lock_guard<std::mutex> lock(ids_mutex_);
    high = ids_();
    low = ids_();
  }
  std::string id = "run_";
  for (int i = 9; i >= 0; --i) {
    id += digits[(ms >> (i * 5)) & 31];
  }
  for (int i = 0; i < 12; ++i) {
    id += digits[(high >> (i * 5)) & 31];
  }
  for (int i = 0; i < 4; ++i) {
    id += digits[(low >> (i * 5)) & 31];
  }
  return id;
}

}  // namespace durin::services
