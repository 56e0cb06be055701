// The seam between flow code (templates in the public headers) and the run
// engine that drives it. A flow's awaitables call these methods on the engine
// of the run they belong to; all calls happen on that run's actor thread.
// Not for users: the public face of this is durin::context.
#pragma once

#include <coroutine>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "durin/json.hpp"
#include "durin/search.hpp"
#include "durin/step.hpp"

namespace durin::detail {

// What a durable call delivers to the flow that awaited it.
struct call_outcome {
  bool failed = false;
  json value;              // the result, when !failed
  std::string error_code;  // when failed, e.g. "step-failed"
  std::string error_message;
  std::uint32_t attempts = 0;
};

// A step call as the flow makes it. `body` is empty for a step registered by
// name, whose JSON `args` the engine passes to the registered function.
struct step_call {
  step_options options;
  std::function<json()> body;
  json args;
  // The worker session it runs in (driver::open_session); 0: none.
  std::uint32_t session = 0;
};

enum class value_kind : std::uint8_t { now = 1, random = 2, side_effect = 3 };

// A hook as the flow asks for it (see durin/hook.hpp).
struct hook_request {
  std::string token;  // empty: a webhook with a random token
  json metadata;
  json min_retention;
  bool force = false;
  bool webhook = false;
};

// A child run as the flow asks for it (durin::context::start_child).
// `parent_close`: 1 terminate, 2 cancel, 3 abandon (parent_close_policy).
struct child_request {
  std::string flow;
  json input;
  std::string instance_id;
  std::uint8_t parent_close = 1;
  json memo;
  search_attributes search;
};

// Thrown by context::continue_as_new and caught by the engine as the flow
// ends; deliberately not a std::exception, so that flow code catching
// std::exception does not swallow it.
struct continue_as_new_request {
  json input;
};

// Converts a recorded JSON value to what the flow asked for.
template <class R>
R convert_result(const json& value) {
  if constexpr (std::is_void_v<R>) {
    return;
  } else if constexpr (std::is_same_v<R, json>) {
    return value;
  } else {
    return value.get<R>();
  }
}

class driver {
 public:
  virtual ~driver() = default;

  // Starts a step, or replays it. True when `out` holds the outcome already
  // (recorded in history); false when the flow must park until it is durable.
  virtual bool begin_step(step_call call, call_outcome* out) = 0;

  // Opens a worker session of remote steps on `task_queue` and returns its
  // number (from 1). Not recorded: the same code opens the same sessions
  // in the same order on replay, and the history of their steps says which
  // worker each is bound to and whether it failed.
  virtual std::uint32_t open_session(std::string task_queue,
                                     std::int64_t worker_timeout_ms) = 0;

  // Starts a durable timer due `duration_ms` after the recorded current time,
  // or at `absolute_ms` when that is >= 0. Same return as begin_step.
  virtual bool begin_sleep(std::int64_t duration_ms, std::int64_t absolute_ms,
                           call_outcome* out) = 0;

  // Parks the innermost coroutine of the flow until the outcome of the call
  // begun last is durable.
  virtual void park(std::coroutine_handle<> handle) = 0;

  // Returns the recorded value on replay; live, the value of `produce()`,
  // which is recorded before anything that depends on it becomes visible.
  virtual json record_value(value_kind kind, std::string_view name,
                            const std::function<json()>& produce) = 0;

  // Creates a hook (a durable call; the claim goes on in the background)
  // and returns its handle, an index private to this run. Throws
  // std::invalid_argument for options that are not allowed.
  virtual std::size_t hook_create(hook_request request) = 0;
  virtual const std::string& hook_token(std::size_t hook) const = 0;

  // Waits for the hook's claim. out->value: the owner's run id when another
  // run owns the token, null when this run does.
  virtual bool hook_conflict(std::size_t hook, call_outcome* out) = 0;

  // The hook's next payload (a durable call). out->value: {"payload": ...}
  // or null once disposed; failed with "hook-conflict" or
  // "hook-force-claimed" (error_message: the owner's run id).
  virtual bool hook_next(std::size_t hook, call_outcome* out) = 0;

  // Disposes the hook (a durable call): the token is released at once.
  virtual void hook_dispose(std::size_t hook) = 0;

  // Another run of the same tenant, recorded: with `until_end`, once it has
  // ended. out->value: {"id","status","output","error"}; status "not-found"
  // for a run that does not exist.
  virtual bool begin_watch(const std::string& run_id, bool until_end,
                           call_outcome* out) = 0;

  // The oldest unread message of any of `names` (a durable call).
  // out->value: {"name","payload","sequence","update"?}. Throws
  // invalid_argument_error for a name that is not allowed.
  virtual bool message_read(const std::vector<std::string>& names,
                            call_outcome* out) = 0;

  // Handlers the flow installs (not recorded; a replay installs them at the
  // same place): an update's validation, which answers a rejection's reason
  // or "" to accept, and a query's answer. Both run on the run's thread and
  // must not change the flow's state.
  virtual void update_validator(
      std::string name, std::function<std::string(const json&)> validate) = 0;
  virtual void query_handler(std::string name,
                             std::function<json(const json&)> answer) = 0;

  // Records the result of the update read at history `sequence`; its
  // callers waiting for completion are answered once that is durable.
  virtual void update_complete(std::uint64_t sequence, json result) = 0;
  // Starts a child run (a durable call): out->value is {"runId"} once its
  // admission is durable; failed with the start's error code otherwise
  // (error_message; value {"ownerRunId"} for hook-conflict).
  virtual bool begin_child(child_request request, call_outcome* out) = 0;

  // The version of change `change_id` this run follows, recorded once
  // (see durin::context::version).
  virtual int version(std::string_view change_id, int min_supported,
                      int max_supported) = 0;

  // Replaces the run's memo, recorded (a durable call the flow does not
  // wait for: it is written at once, with the run's record). Throws
  // invalid_argument_error beyond limits::memo_bytes_max.
  virtual void set_memo(json memo) = 0;
  // Adds or replaces search attributes, recorded as set_memo is. Throws
  // invalid_argument_error for a bad name or value, or a type other than
  // the one the tenant's attribute has.
  virtual void upsert_search_attributes(search_attributes attributes) = 0;
  // Removes search attributes by name (a name the run lacks is no error),
  // recorded as set_memo is. Throws invalid_argument_error for a bad name.
  virtual void remove_search_attributes(std::vector<std::string> names) = 0;

  virtual const std::string& run_id() const = 0;
};

}  // namespace durin::detail
