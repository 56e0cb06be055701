#include "services/shard_map.hpp"

#include "actors/identity.hpp"
#include "base/fnv1a.hpp"
#include "persistence/keys.hpp"

namespace durin::services {

namespace {

constexpr char digits[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

constexpr std::size_t run_id_digits = 26;

int digit_value(char c) {
  for (int i = 0; i < 32; ++i) {
    if (digits[i] == c) {
      return i;
    }
  }
  return 0;
}

std::uint64_t fnv1a(std::uint64_t hash, std::string_view bytes) {
  return base::fnv1a(bytes, hash);
}

constexpr std::uint64_t fnv_offset = 14695981039346656037ULL;

}  // namespace

std::uint32_t shard_map::of_run(std::string_view run_id) const {
  if (count_ == 1 || run_id.size() < 2) {
    return 0;
  }
  auto high = digit_value(run_id[run_id.size() - 2]);
  auto low = digit_value(run_id[run_id.size() - 1]);
  return static_cast<std::uint32_t>(high * 32 + low) % count_;
}

std::uint32_t shard_map::of_token(std::string_view address) const {
  if (count_ == 1) {
    return 0;
  }
  return static_cast<std::uint32_t>(fnv1a(fnv_offset, address) % count_);
}

std::uint32_t shard_map::of_schedule(std::string_view tenant,
                                     std::string_view schedule_id) const {
  return of_token(
      persistence::keys::token(tenant, actors::schedule_token(schedule_id)));
}

std::uint32_t shard_map::of_key(const persistence::request_address& key) const {
  if (count_ == 1) {
    return 0;
  }
  // Length-prefixed parts, so ("ab", "c") and ("a", "bc") differ.
  auto hash = fnv_offset;
  for (const auto* part : {&key.tenant, &key.caller, &key.key}) {
    const auto size = static_cast<std::uint32_t>(part->size());
    const char length[4] = {
        static_cast<char>(size >> 24), static_cast<char>(size >> 16),
        static_cast<char>(size >> 8), static_cast<char>(size)};
    hash = fnv1a(hash, std::string_view(length, 4));
    hash = fnv1a(hash, *part);
  }
  return static_cast<std::uint32_t>(hash % count_);
}

std::string shard_map::run_id_suffix(std::uint32_t shard) {
  return {digits[(shard >> 5) & 31], digits[shard & 31]};
}

bool shard_map::is_run_id(std::string_view text) {
  constexpr std::string_view prefix = "run_";
  if (text.size() != prefix.size() + run_id_digits ||
      text.substr(0, prefix.size()) != prefix) {
    return false;
  }
  return text.find_first_not_of(digits, prefix.size()) ==
         std::string_view::npos;
}

}  // namespace durin::services
