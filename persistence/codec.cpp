// Framed value encoding; the layouts are in persistence/README.md.
#include "persistence/codec.hpp"

#include <array>
#include <bit>
#include <cstring>

#include "durin/limits.hpp"
#include "persistence/keys.hpp"

namespace durin::persistence::codec {

namespace {

constexpr std::size_t crc_bytes = 4;
constexpr std::size_t frame_overhead_bytes = 1 + crc_bytes;

// The 256-entry table of the reflected Castagnoli polynomial, built at compile
// time so there is no initialisation order to get wrong.
constexpr std::array<std::uint32_t, 256> make_crc_table() {
  constexpr std::uint32_t polynomial = 0x82F63B78u;
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t index = 0; index < 256; ++index) {
    std::uint32_t crc = index;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 1u) != 0 ? (crc >> 1) ^ polynomial : crc >> 1;
    }
    table[index] = crc;
  }
  return table;
}

constexpr std::array<std::uint32_t, 256> crc_table = make_crc_table();

// ---- encoding -------------------------------------------------------------

void put_string(std::string& out, std::string_view text) {
  keys::put_u32(out, static_cast<std::uint32_t>(text.size()));
  out.append(text);
}

void put_i64(std::string& out, std::int64_t value) {
  // Two's complement, so negative values round-trip exactly.
  keys::put_u64(out, static_cast<std::uint64_t>(value));
}

// Starts a frame: the version byte; `body_bytes` reserves room.
std::string begin_frame(std::size_t body_bytes) {
  std::string out;
  out.reserve(frame_overhead_bytes + body_bytes);
  out.push_back(static_cast<char>(format_version));
  return out;
}

// Ends a frame: the checksum covers the version byte and the body.
std::string end_frame(std::string out) {
  keys::put_u32(out, crc32c(out));
  return out;
}

// ---- decoding -------------------------------------------------------------

// Reads fields front to back out of a frame's body. The first problem is
// kept in `problem_` and every later read is a no-op returning a zero value,
// so a decoder reads all fields and checks once at the end.
class reader {
 public:
  explicit reader(std::string_view body) : rest_(body) {}

  std::uint8_t u8(const char* field) {
    if (!have(1, field)) {
      return 0;
    }
    const auto value = static_cast<std::uint8_t>(rest_[0]);
    rest_.remove_prefix(1);
    return value;
  }

  std::uint32_t u32(const char* field) {
    if (!have(4, field)) {
      return 0;
    }
    const std::uint32_t value = keys::get_u32(rest_.data());
    rest_.remove_prefix(4);
    return value;
  }

  std::uint64_t u64(const char* field) {
    if (!have(8, field)) {
      return 0;
    }
    const std::uint64_t value = keys::get_u64(rest_.data());
    rest_.remove_prefix(8);
    return value;
  }

  std::int64_t i64(const char* field) {
    return static_cast<std::int64_t>(u64(field));
  }

  std::string string(const char* field) {
    const std::uint32_t length = u32(field);
    if (!problem_.empty()) {
      return {};
    }
    // Checked before allocating: a flipped length must not reserve 4 GiB.
    if (length > field_bytes_max) {
      fail(std::string("field '") + field + "' claims " +
           std::to_string(length) + " bytes, above the limit of " +
           std::to_string(field_bytes_max));
      return {};
    }
    if (!have(length, field)) {
      return {};
    }
    std::string value(rest_.substr(0, length));
    rest_.remove_prefix(length);
    return value;
  }

  // Passes over a string field without copying it.
  void skip_string(const char* field) {
    const std::uint32_t length = u32(field);
    if (have(length, field)) {
      rest_.remove_prefix(length);
    }
  }

  void fail(std::string problem) {
    if (problem_.empty()) {
      problem_ = std::move(problem);
    }
  }

  // True when the body is read to its end (a later field is absent).
  bool at_end() const { return rest_.empty() && problem_.empty(); }

  // The first problem, or "trailing bytes" when the body has bytes left.
  std::optional<std::string> problem() const {
    if (!problem_.empty()) {
      return problem_;
    }
    if (!rest_.empty()) {
      return std::to_string(rest_.size()) + " trailing bytes after the body";
    }
    return std::nullopt;
  }

 private:
  bool have(std::size_t bytes, const char* field) {
    if (!problem_.empty()) {
      return false;
    }
    if (rest_.size() < bytes) {
      fail(std::string("truncated at field '") + field + "': needs " +
           std::to_string(bytes) + " bytes, " + std::to_string(rest_.size()) +
           " remain");
      return false;
    }
    return true;
  }

  std::string_view rest_;
  std::string problem_;
};

error corrupt(std::string_view what, std::string_view problem) {
  return make_error(errc::corrupt_record,
                    std::string(what) + ": " + std::string(problem));
}

// Checks length, version and checksum; the body on success.
result<std::string_view> open_frame(std::string_view bytes,
                                    std::string_view what) {
  if (bytes.size() < frame_overhead_bytes) {
    return corrupt(what, "frame of " + std::to_string(bytes.size()) +
                             " bytes is shorter than version and checksum");
  }
  const auto version = static_cast<std::uint8_t>(bytes[0]);
  if (version != format_version) {
    return corrupt(what, "unknown format version " + std::to_string(version));
  }
  const std::string_view covered = bytes.substr(0, bytes.size() - crc_bytes);
  const std::uint32_t stored = keys::get_u32(bytes.data() + covered.size());
  if (stored != crc32c(covered)) {
    return corrupt(what, "checksum mismatch");
  }
  return covered.substr(1);
}

bool valid_run_status(std::uint8_t value) {
  // `blocked` (7) is never stored.
  return (value >= static_cast<std::uint8_t>(run_status::pending) &&
          value <= static_cast<std::uint8_t>(run_status::cancelled)) ||
         value == static_cast<std::uint8_t>(run_status::terminated);
}

bool valid_event_kind(std::uint8_t value) {
  return value >= 1 && value <= event_kind_max;
}

status check_field(std::string_view field, const std::string& value) {
  if (value.size() > field_bytes_max) {
    return make_error(errc::invalid_argument,
                      "field '" + std::string(field) + "' has " +
                          std::to_string(value.size()) +
                          " bytes, above the limit of " +
                          std::to_string(field_bytes_max));
  }
  return {};
}

void put_search(std::string& out, const search_attributes& attributes) {
  keys::put_u32(out, static_cast<std::uint32_t>(attributes.size()));
  for (const auto& [name, value] : attributes) {
    put_string(out, name);
    out.push_back(static_cast<char>(value.type));
    switch (value.type) {
      case search_attribute_type::keyword:
        put_string(out, value.text);
        break;
      case search_attribute_type::integer:
      case search_attribute_type::time:
        put_i64(out, value.integer);
        break;
      case search_attribute_type::number:
        keys::put_u64(out, std::bit_cast<std::uint64_t>(value.number));
        break;
      case search_attribute_type::boolean:
        out.push_back(value.boolean ? 1 : 0);
        break;
    }
  }
}

search_attributes read_search(reader& in) {
  search_attributes out;
  const std::uint32_t count = in.u32("search_count");
  // Checked before reading on: a flipped count must not loop 4 billion
  // times.
  if (count > limits::search_attributes_max) {
    in.fail("search_count " + std::to_string(count) +
            " is above the limit of " +
            std::to_string(limits::search_attributes_max));
    return out;
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    auto name = in.string("search_name");
    const std::uint8_t type = in.u8("search_type");
    search_value value;
    value.type = static_cast<search_attribute_type>(type);
    switch (value.type) {
      case search_attribute_type::keyword:
        value.text = in.string("search_keyword");
        break;
      case search_attribute_type::integer:
      case search_attribute_type::time:
        value.integer = in.i64("search_int");
        break;
      case search_attribute_type::number:
        value.number = std::bit_cast<double>(in.u64("search_double"));
        break;
      case search_attribute_type::boolean:
        value.boolean = in.u8("search_bool") != 0;
        break;
      default:
        in.fail("invalid search attribute type " + std::to_string(type));
        return out;
    }
    if (!out.emplace(std::move(name), std::move(value)).second) {
      in.fail("a search attribute is named twice");
      return out;
    }
  }
  return out;
}

std::size_t search_bytes(const search_attributes& attributes) {
  std::size_t bytes = 4;
  for (const auto& [name, value] : attributes) {
    bytes += 4 + name.size() + 1 + 4 + value.text.size() + 8;
  }
  return bytes;
}

}  // namespace

// ---- run_record -----------------------------------------------------------

status validate(const run_record& record) {
  const std::pair<const char*, const std::string*> fields[] = {
      {"id", &record.id},
      {"flow", &record.flow},
      {"input", &record.input},
      {"output", &record.output},
      {"error_code", &record.error_code},
      {"error_message", &record.error_message},
      {"tenant", &record.tenant},
      {"start_token", &record.start_token},
      {"schedule_id", &record.schedule_id},
      {"parent_run_id", &record.parent_run_id},
      {"continued_from", &record.continued_from},
      {"memo", &record.memo}};
  for (const auto& [name, value] : fields) {
    if (auto checked = check_field(name, *value); !checked) {
      return checked;
    }
  }
  if (auto problem =
          search_attributes_problem("search attributes", record.search);
      !problem.empty()) {
    return make_error(errc::invalid_argument, problem);
  }
  if (!valid_run_status(static_cast<std::uint8_t>(record.status))) {
    return make_error(errc::invalid_argument,
                      "run status " +
                          std::to_string(static_cast<int>(record.status)) +
                          " is never stored");
  }
  return {};
}

std::string encode(const run_record& record) {
  std::string out = begin_frame(
      record.id.size() + record.flow.size() + record.input.size() +
      record.output.size() + record.error_code.size() +
      record.error_message.size() + record.tenant.size() +
      record.start_token.size() + record.schedule_id.size() +
      record.parent_run_id.size() + record.continued_from.size() +
      record.memo.size() + search_bytes(record.search) + 8 * 5 + 1 + 4 * 9 + 4);
  put_string(out, record.id);
  put_string(out, record.flow);
  out.push_back(static_cast<char>(record.status));
  put_string(out, record.input);
  put_string(out, record.output);
  put_string(out, record.error_code);
  put_string(out, record.error_message);
  put_i64(out, record.created_at_ms);
  put_i64(out, record.started_at_ms);
  put_i64(out, record.completed_at_ms);
  keys::put_u32(out, record.spec_version);
  put_string(out, record.tenant);
  put_string(out, record.start_token);
  // Optional trailing groups, so that a record without them keeps its
  // earlier layout byte for byte and older records still decode: the
  // schedule's (schedule_id, occurrence), then the lineage's (parent,
  // parent_close, predecessor), then the search group's (memo, search
  // attributes). Each group needs the groups before it, written empty for a
  // run that has none of theirs.
  const bool search = !record.memo.empty() || !record.search.empty();
  const bool lineage =
      !record.parent_run_id.empty() || !record.continued_from.empty() || search;
  if (!record.schedule_id.empty() || lineage) {
    put_string(out, record.schedule_id);
    put_i64(out, record.occurrence_ms);
  }
  if (lineage) {
    put_string(out, record.parent_run_id);
    out.push_back(static_cast<char>(record.parent_close));
    put_string(out, record.continued_from);
  }
  if (search) {
    put_string(out, record.memo);
    put_search(out, record.search);
  }
  return end_frame(std::move(out));
}

result<run_search> decode_run_search(std::string_view bytes) {
  auto body = open_frame(bytes, "run record");
  if (!body) {
    return body.error();
  }
  reader in(*body);
  for (const char* field : {"id", "flow"}) {
    in.skip_string(field);
  }
  (void)in.u8("status");
  for (const char* field : {"input", "output", "error_code", "error_message"}) {
    in.skip_string(field);
  }
  for (const char* field :
       {"created_at_ms", "started_at_ms", "completed_at_ms"}) {
    (void)in.u64(field);
  }
  (void)in.u32("spec_version");
  run_search out;
  out.tenant = in.string("tenant");
  in.skip_string("start_token");
  if (!in.at_end()) {
    in.skip_string("schedule_id");
    (void)in.u64("occurrence_ms");
    if (!in.at_end()) {
      in.skip_string("parent_run_id");
      (void)in.u8("parent_close");
      in.skip_string("continued_from");
      if (!in.at_end()) {
        in.skip_string("memo");
        out.search = read_search(in);
      }
    }
  }
  if (auto problem = in.problem()) {
    return corrupt("run record", *problem);
  }
  return out;
}

result<run_record> decode_run(std::string_view bytes) {
  auto body = open_frame(bytes, "run record");
  if (!body) {
    return body.error();
  }
  reader in(*body);
  run_record record;
  record.id = in.string("id");
  record.flow = in.string("flow");
  const std::uint8_t status = in.u8("status");
  record.input = in.string("input");
  record.output = in.string("output");
  record.error_code = in.string("error_code");
  record.error_message = in.string("error_message");
  record.created_at_ms = in.i64("created_at_ms");
  record.started_at_ms = in.i64("started_at_ms");
  record.completed_at_ms = in.i64("completed_at_ms");
  record.spec_version = in.u32("spec_version");
  record.tenant = in.string("tenant");
  record.start_token = in.string("start_token");
  const bool scheduled = !in.at_end();
  if (scheduled) {
    record.schedule_id = in.string("schedule_id");
    record.occurrence_ms = in.i64("occurrence_ms");
  }
  const bool lineage = scheduled && !in.at_end();
  if (lineage) {
    record.parent_run_id = in.string("parent_run_id");
    record.parent_close = in.u8("parent_close");
    record.continued_from = in.string("continued_from");
  }
  const bool search = lineage && !in.at_end();
  if (search) {
    record.memo = in.string("memo");
    record.search = read_search(in);
  }
  if (auto problem = in.problem()) {
    return corrupt("run record", *problem);
  }
  if (scheduled && !lineage && record.schedule_id.empty()) {
    // The encoder writes the schedule group alone only for a schedule's run.
    return corrupt("run record", "schedule_id present but empty");
  }
  if (lineage && !search && record.parent_run_id.empty() &&
      record.continued_from.empty()) {
    return corrupt("run record", "lineage present but empty");
  }
  if (search && record.memo.empty() && record.search.empty()) {
    return corrupt("run record",
                   "memo and search attributes present but empty");
  }
  if (record.parent_close > 3) {
    return corrupt("run record", "invalid parent_close " +
                                     std::to_string(record.parent_close));
  }
  if (!valid_run_status(status)) {
    return corrupt("run record",
                   "invalid run status " + std::to_string(status));
  }
  record.status = static_cast<run_status>(status);
  return record;
}

// ---- event_record ---------------------------------------------------------

status validate(const event_record& event) {
  const std::pair<const char*, const std::string*> fields[] = {
      {"name", &event.name},
      {"attempt_id", &event.attempt_id},
      {"data", &event.data},
      {"error_code", &event.error_code},
      {"error_message", &event.error_message}};
  for (const auto& [name, value] : fields) {
    if (auto checked = check_field(name, *value); !checked) {
      return checked;
    }
  }
  if (!valid_event_kind(static_cast<std::uint8_t>(event.kind))) {
    return make_error(errc::invalid_argument,
                      "event kind " +
                          std::to_string(static_cast<int>(event.kind)) +
                          " does not exist");
  }
  return {};
}

std::string encode(const event_record& event) {
  std::string out =
      begin_frame(event.name.size() + event.attempt_id.size() +
                  event.data.size() + event.error_code.size() +
                  event.error_message.size() + 1 + 8 + 8 + 5 * 4 + 4 + 8);
  out.push_back(static_cast<char>(event.kind));
  keys::put_u64(out, event.call);
  put_i64(out, event.at_ms);
  put_string(out, event.name);
  keys::put_u32(out, event.attempt);
  put_string(out, event.attempt_id);
  put_string(out, event.data);
  put_string(out, event.error_code);
  put_string(out, event.error_message);
  put_i64(out, event.due_ms);
  return end_frame(std::move(out));
}

result<event_record> decode_event(std::string_view bytes) {
  auto body = open_frame(bytes, "event record");
  if (!body) {
    return body.error();
  }
  reader in(*body);
  event_record event;
  const std::uint8_t kind = in.u8("kind");
  event.call = in.u64("call");
  event.at_ms = in.i64("at_ms");
  event.name = in.string("name");
  event.attempt = in.u32("attempt");
  event.attempt_id = in.string("attempt_id");
  event.data = in.string("data");
  event.error_code = in.string("error_code");
  event.error_message = in.string("error_message");
  event.due_ms = in.i64("due_ms");
  if (auto problem = in.problem()) {
    return corrupt("event record", *problem);
  }
  if (!valid_event_kind(kind)) {
    return corrupt("event record",
                   "invalid event kind " + std::to_string(kind));
  }
  event.kind = static_cast<event_kind>(kind);
  return event;
}

// ---- token_record, payload_record, resume_record --------------------------

std::string encode(const token_record& record) {
  std::string out = begin_frame(
      record.tenant.size() + record.token.size() + record.owner_run.size() +
      record.metadata.size() + record.previous_owner.size() +
      record.owner_command.size() + 6 * 4 + 3 + 4 + 8 * 5);
  put_string(out, record.tenant);
  put_string(out, record.token);
  put_string(out, record.owner_run);
  out.push_back(static_cast<char>(record.state));
  out.push_back(static_cast<char>(record.start_hook ? 1 : 0));
  out.push_back(static_cast<char>(record.webhook ? 1 : 0));
  keys::put_u64(out, record.owner_call);
  put_i64(out, record.created_at_ms);
  put_i64(out, record.retain_until_ms);
  put_string(out, record.metadata);
  keys::put_u32(out, record.owner_spec_version);
  keys::put_u64(out, record.next_payload);
  put_string(out, record.previous_owner);
  keys::put_u64(out, record.previous_owner_last_payload);
  if (!record.owner_command.empty()) {
    put_string(out, record.owner_command);  // absent in older records
  }
  return end_frame(std::move(out));
}

result<token_record> decode_token(std::string_view bytes) {
  auto body = open_frame(bytes, "token record");
  if (!body) {
    return body.error();
  }
  reader in(*body);
  token_record record;
  record.tenant = in.string("tenant");
  record.token = in.string("token");
  record.owner_run = in.string("owner_run");
  const auto state = in.u8("state");
  const auto start_hook = in.u8("start_hook");
  const auto webhook = in.u8("webhook");
  record.owner_call = in.u64("owner_call");
  record.created_at_ms = in.i64("created_at_ms");
  record.retain_until_ms = in.i64("retain_until_ms");
  record.metadata = in.string("metadata");
  record.owner_spec_version = in.u32("owner_spec_version");
  record.next_payload = in.u64("next_payload");
  record.previous_owner = in.string("previous_owner");
  record.previous_owner_last_payload = in.u64("previous_owner_last_payload");
  if (!in.at_end()) {
    record.owner_command = in.string("owner_command");
  }
  if (auto problem = in.problem()) {
    return corrupt("token record", *problem);
  }
  if (state < 1 || state > 2 || start_hook > 1 || webhook > 1) {
    return corrupt("token record", "invalid state or flag");
  }
  record.state = static_cast<token_state>(state);
  record.start_hook = start_hook == 1;
  record.webhook = webhook == 1;
  return record;
}

std::string encode(const payload_record& record) {
  std::string out =
      begin_frame(record.owner_run.size() + record.payload.size() +
                  record.resume_id.size() + 3 * 4 + 2 * 8);
  keys::put_u64(out, record.sequence);
  put_string(out, record.owner_run);
  put_string(out, record.payload);
  put_string(out, record.resume_id);
  put_i64(out, record.at_ms);
  return end_frame(std::move(out));
}

result<payload_record> decode_payload_record(std::string_view bytes) {
  auto body = open_frame(bytes, "payload record");
  if (!body) {
    return body.error();
  }
  reader in(*body);
  payload_record record;
  record.sequence = in.u64("sequence");
  record.owner_run = in.string("owner_run");
  record.payload = in.string("payload");
  record.resume_id = in.string("resume_id");
  record.at_ms = in.i64("at_ms");
  if (auto problem = in.problem()) {
    return corrupt("payload record", *problem);
  }
  return record;
}

std::string encode(const resume_record& record) {
  std::string out = begin_frame(record.owner_run.size() + 4 + 8);
  keys::put_u64(out, record.sequence);
  put_string(out, record.owner_run);
  return end_frame(std::move(out));
}

result<resume_record> decode_resume(std::string_view bytes) {
  auto body = open_frame(bytes, "resume record");
  if (!body) {
    return body.error();
  }
  reader in(*body);
  resume_record record;
  record.sequence = in.u64("sequence");
  record.owner_run = in.string("owner_run");
  if (auto problem = in.problem()) {
    return corrupt("resume record", *problem);
  }
  return record;
}

// ---- markers and opaque bytes ---------------------------------------------

std::string encode_marker() {
  return end_frame(begin_frame(0));
}

status decode_marker(std::string_view bytes) {
  auto body = open_frame(bytes, "marker");
  if (!body) {
    return body.error();
  }
  if (!body->empty()) {
    return corrupt("marker", std::to_string(body->size()) +
                                 " bytes in a body that must be empty");
  }
  return {};
}

std::string encode_bytes(std::string_view bytes) {
  std::string out = begin_frame(4 + bytes.size());
  put_string(out, bytes);
  return end_frame(std::move(out));
}

result<std::string> decode_bytes(std::string_view bytes) {
  auto body = open_frame(bytes, "bytes value");
  if (!body) {
    return body.error();
  }
  reader in(*body);
  std::string value = in.string("bytes");
  if (auto problem = in.problem()) {
    return corrupt("bytes value", *problem);
  }
  return value;
}

namespace {

std::uint32_t crc32c_by_table(std::uint32_t crc, std::string_view bytes) {
  for (const char byte : bytes) {
    crc =
        crc_table[(crc ^ static_cast<std::uint8_t>(byte)) & 0xFFu] ^ (crc >> 8);
  }
  return crc;
}

#if defined(__x86_64__)
// The same polynomial in hardware, eight bytes at a time: every record
// written and read is checksummed, so this is on the hot path.
__attribute__((target("sse4.2"))) std::uint32_t crc32c_by_instruction(
    std::uint32_t crc, std::string_view bytes) {
  const char* p = bytes.data();
  std::size_t n = bytes.size();
  std::uint64_t wide = crc;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    wide = __builtin_ia32_crc32di(wide, word);
  }
  crc = static_cast<std::uint32_t>(wide);
  for (; n > 0; --n, ++p) {
    crc = __builtin_ia32_crc32qi(crc, static_cast<unsigned char>(*p));
  }
  return crc;
}

const bool has_crc_instruction = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

std::uint32_t crc32c_portable(std::string_view bytes) {
  return crc32c_by_table(0xFFFFFFFFu, bytes) ^ 0xFFFFFFFFu;
}

std::uint32_t crc32c(std::string_view bytes) {
#if defined(__x86_64__)
  if (has_crc_instruction) {
    return crc32c_by_instruction(0xFFFFFFFFu, bytes) ^ 0xFFFFFFFFu;
  }
#endif
  return crc32c_portable(bytes);
}

}  // namespace durin::persistence::codec
