// Messages let the outside world send named data into a running flow,
// addressed by the run's id or its instance id (POST /v1/runs/{id}/messages/
// {name}); updates are messages a caller waits on, which the flow validates
// before anything is recorded and completes with a result; queries read the
// flow's current state and record nothing.
//
//   auto note = co_await ctx.message<json>("note");   // the next "note"
//   auto notes = ctx.messages<json>("note");          // a stream of them
//   while (true) { auto n = co_await notes.next(); ... }
//
//   ctx.on_update("add", [](const json& args) { return std::string(); });
//   ctx.on_query("value", [&value](const json&) { return json(value); });
//   auto in = co_await ctx.receive({"add", "stop"});  // either, in order
//   if (in.is_update()) ctx.complete_update(in, json{{"value", value}});
//
// Messages are recorded in the run's history as they arrive, in order, and
// kept until the flow reads them; a read takes the oldest unread message
// of the names asked for. A sender's idempotency key (an update's id) is
// recorded once per run and name: a repeat records nothing and is answered
// as the first was. All of this runs on the run's actor thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "durin/detail/driver.hpp"
#include "durin/json.hpp"

namespace durin {

// A message or update as the flow reads it.
struct inbound {
  std::string name;
  json payload;                // an update's args
  std::uint64_t sequence = 0;  // its place in the run's history
  std::string update_id;       // non-empty for an update
  bool is_update() const { return !update_id.empty(); }
};

namespace detail {

inline inbound to_inbound(const json& value) {
  inbound in;
  in.name = value.value("name", std::string());
  in.payload = value.contains("payload") ? value.at("payload") : json();
  in.sequence = value.value("sequence", std::uint64_t{0});
  in.update_id = value.value("update", std::string());
  return in;
}

// Awaits the oldest unread message of any of `names`.
class receive_awaitable {
 public:
  receive_awaitable(driver& d, std::vector<std::string> names)
      : driver_(&d), names_(std::move(names)) {}
  bool await_ready() { return driver_->message_read(names_, &outcome_); }
  void await_suspend(std::coroutine_handle<> h) { driver_->park(h); }
  inbound await_resume() const { return to_inbound(outcome_.value); }

 private:
  driver* driver_;
  std::vector<std::string> names_;
  call_outcome outcome_;
};

// Awaits the next message of one name, converted to T.
template <class T>
class message_awaitable : public receive_awaitable {
 public:
  message_awaitable(driver& d, std::string name)
      : receive_awaitable(d, {std::move(name)}) {}
  T await_resume() const {
    return convert_result<T>(receive_awaitable::await_resume().payload);
  }
};

}  // namespace detail

// The messages of one name, in the order recorded. Cheap to copy; valid
// only inside the flow that made it.
template <class T = json>
class message_stream {
 public:
  message_stream(detail::driver& d, std::string name)
      : driver_(&d), name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  detail::message_awaitable<T> next() { return {*driver_, name_}; }

 private:
  detail::driver* driver_;
  std::string name_;
};

}  // namespace durin
