// What an embedding CAF application needs to run durin on its own actor
// system: the message types it receives from durin, how they serialise, and
// the one call that registers every durin message type.
//
// An application that passes its own caf::actor_system to runtime::open must
// register durin's types in the system's config before it builds the system:
//
//   caf::actor_system_config config;
//   durin::add_message_types(config);  // caf::id_block::durin and the node's
//   caf::actor_system system{config};
//
// runtime::open refuses (invalid-argument) a system built without them: a
// type that is not registered cannot be serialised, so the node's messages
// could not go to another node. runtime::open without a system registers
// them itself.
#pragma once

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>
#include <caf/type_id.hpp>
#include <string>

#include "durin/error.hpp"
#include "durin/run.hpp"

namespace durin {

// (run_finished_atom, run_info): a run ended; run_info holds its final state.
using run_finished_atom = caf::atom_constant<caf::atom("runfinish")>;

// Registers caf::id_block::durin (below) and the block of the node's own
// messages (caf::id_block::durin_node, internal) in `config`.
void add_message_types(caf::actor_system_config& config);

namespace detail {

// A JSON value travels as its text. Loading text that does not parse is an
// error of the deserialiser, never an exception.
inline caf::error parse_json_into(json& target, const std::string& text) {
  auto parsed = json::parse(text, nullptr, false);
  if (parsed.is_discarded()) {
    return caf::make_error(caf::sec::invalid_argument, "a JSON value");
  }
  target = std::move(parsed);
  return caf::none;
}

}  // namespace detail

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_error& x) {
  return f(caf::meta::type_name("durin::run_error"), x.code, x.message);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, error& x) {
  return f(caf::meta::type_name("durin::error"), x.code, x.message, x.run_id);
}

// result<void> has no setters: it travels as (failed, error).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, status& x) {
  bool failed = !x.ok();
  error cause = failed ? x.error() : error{};
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x = failed ? status(std::move(cause)) : status();
    return caf::none;
  });
  return f(caf::meta::type_name("durin::status"), failed, cause, load);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, search_value& x) {
  return f(caf::meta::type_name("durin::search_value"), x.type, x.text,
           x.integer, x.number, x.boolean);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_info& x) {
  auto input = x.input.dump();
  auto output = x.output.dump();
  auto memo = x.memo.dump();
  bool has_error = x.error.has_value();
  run_error cause = has_error ? *x.error : run_error{};
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (auto bad = detail::parse_json_into(x.input, input)) {
      return bad;
    }
    if (auto bad = detail::parse_json_into(x.output, output)) {
      return bad;
    }
    if (auto bad = detail::parse_json_into(x.memo, memo)) {
      return bad;
    }
    x.error =
        has_error ? std::optional<run_error>(std::move(cause)) : std::nullopt;
    return caf::none;
  });
  return f(caf::meta::type_name("durin::run_info"), x.id, x.instance_id, x.flow,
           x.status, input, output, has_error, cause, x.created_at_ms,
           x.started_at_ms, x.completed_at_ms, x.blocked_reason, x.start_token,
           x.parent_run_id, x.continued_from, memo, x.search_attributes, load);
}

}  // namespace durin

// The public message types; the node's internal block follows it
// (actors/type_ids.hpp).
CAF_BEGIN_TYPE_ID_BLOCK(durin, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(durin, (durin::run_info))
CAF_ADD_TYPE_ID(durin, (durin::run_error))
CAF_ADD_TYPE_ID(durin, (durin::error))
CAF_ADD_TYPE_ID(durin, (durin::status))
CAF_END_TYPE_ID_BLOCK(durin)
