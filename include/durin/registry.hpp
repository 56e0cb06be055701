// The flows and steps a runtime can run, by name. Fill a registry before
// opening the runtime (recovery needs every flow whose runs it resumes); the
// runtime keeps its own copy, so the registry may go away afterwards.
//
//   durin::registry reg;
//   reg.flow("acme.review-order", review_order);  // flow<R>(context&, In)
//   reg.step("score-order", score_order);         // R(Args...)
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "durin/flow.hpp"
#include "durin/json.hpp"
#include "durin/step.hpp"

namespace durin {

namespace detail {

template <class T>
struct callable_traits : callable_traits<decltype(&T::operator())> {};
template <class R, class... Args>
struct callable_traits<R (*)(Args...)> {
  using result_type = R;
  using args = std::tuple<Args...>;
};
template <class R, class... Args>
struct callable_traits<R(Args...)> : callable_traits<R (*)(Args...)> {};
template <class C, class R, class... Args>
struct callable_traits<R (C::*)(Args...) const>
    : callable_traits<R (*)(Args...)> {};
template <class C, class R, class... Args>
struct callable_traits<R (C::*)(Args...)> : callable_traits<R (*)(Args...)> {};

template <class T>
struct flow_value;
template <class T>
struct flow_value<flow<T>> {
  using type = T;
};

template <class T>
using plain_t = std::remove_cvref_t<T>;

}  // namespace detail

class registry {
 public:
  struct flow_entry {
    // Starts the flow coroutine (lazily: it runs when the engine resumes it).
    std::function<flow<json>(context&, const json&)> start;
    // Throws nlohmann::json::exception when the input does not convert.
    std::function<void(const json&)> check_input;
  };

  struct step_entry {
    std::function<json(const json& args)> invoke;  // args: a JSON array
    retry_policy retry;
    std::string task_queue;  // empty: runs in the node
    step_timeouts timeouts;
  };

  // Registers `fn`, a callable `flow<R>(context&, In)` where In converts from
  // JSON and R converts to JSON. A later registration of a name replaces it.
  template <class F>
  registry& flow(std::string name, F fn) {
    using traits = detail::callable_traits<detail::plain_t<F>>;
    static_assert(std::tuple_size_v<typename traits::args> == 2,
                  "a flow takes (durin::context&, Input)");
    using input_type =
        detail::plain_t<std::tuple_element_t<1, typename traits::args>>;
    using value_type =
        typename detail::flow_value<typename traits::result_type>::type;
    flow_entry entry;
    entry.start = [fn](context& ctx, const json& input) {
      return run_erased<value_type, input_type>(fn, ctx, input);
    };
    entry.check_input = [](const json& input) {
      if constexpr (!std::is_same_v<input_type, json>) {
        (void)input.get<input_type>();
      }
    };
    flows_[std::move(name)] = std::move(entry);
    return *this;
  }

  // Registers `fn`, a callable `R(Args...)` with JSON-convertible arguments
  // and result, as a step flows can call by name: ctx.step<R>(name, args...).
  template <class F>
  registry& step(std::string name, F fn, retry_policy retry = {}) {
    return step(std::move(name), std::move(fn), step_config{.retry = retry});
  }

  // The same with a task queue (remote workers run it) and timeouts.
  // Throws invalid_argument_error when the retry policy or a timeout is out
  // of range (retry_policy::problem, step_timeouts::problem), or the task
  // queue is not an id a route can name (durin/ids.hpp: workers poll it at
  // /v1/task-queues/{queue}/poll).
  template <class F>
  registry& step(std::string name, F fn, step_config config) {
    using traits = detail::callable_traits<detail::plain_t<F>>;
    for (const auto& problem :
         {config.retry.problem(), config.timeouts.problem()}) {
      if (!problem.empty()) {
        throw invalid_argument_error("step '" + name + "': " + problem);
      }
    }
    if (!config.task_queue.empty()) {
      if (auto problem = id_problem("its task queue", config.task_queue,
                                    limits::task_queue_bytes_max);
          !problem.empty()) {
        throw invalid_argument_error("step '" + name + "': " + problem);
      }
    }
    step_entry entry;
    entry.retry = config.retry;
    entry.task_queue = std::move(config.task_queue);
    entry.timeouts = config.timeouts;
    entry.invoke = [fn](const json& args) -> json {
      return invoke_packed<typename traits::result_type>(
          fn, args, static_cast<typename traits::args*>(nullptr));
    };
    steps_[std::move(name)] = std::move(entry);
    return *this;
  }

  const flow_entry* find_flow(std::string_view name) const {
    auto it = flows_.find(name);
    return it == flows_.end() ? nullptr : &it->second;
  }
  const step_entry* find_step(std::string_view name) const {
    auto it = steps_.find(name);
    return it == steps_.end() ? nullptr : &it->second;
  }

 private:
  template <class R, class In, class F>
  static durin::flow<json> run_erased(F fn, context& ctx, json input) {
    // `fn` is copied into the frame: the registry entry may be replaced.
    if constexpr (std::is_void_v<R>) {
      co_await fn(ctx, input.get<In>());
      co_return json();
    } else if constexpr (std::is_same_v<In, json>) {
      R value = co_await fn(ctx, std::move(input));
      co_return json(std::move(value));
    } else {
      R value = co_await fn(ctx, input.get<In>());
      co_return json(std::move(value));
    }
  }

  template <class R, class F, class... Args>
  static json invoke_packed(F& fn, const json& args, std::tuple<Args...>*) {
    if (!args.is_array() || args.size() != sizeof...(Args)) {
      throw fatal_error("step expects " + std::to_string(sizeof...(Args)) +
                        " arguments, got " +
                        (args.is_array() ? std::to_string(args.size())
                                         : std::string("no array")));
    }
    return invoke_indexed<R>(fn, args, std::index_sequence_for<Args...>{},
                             static_cast<std::tuple<Args...>*>(nullptr));
  }

  template <class R, class F, std::size_t... I, class... Args>
  static json invoke_indexed(F& fn, const json& args, std::index_sequence<I...>,
                             std::tuple<Args...>*) {
    if constexpr (std::is_void_v<R>) {
      fn(args[I].get<detail::plain_t<Args>>()...);
      return json();
    } else {
      return json(fn(args[I].get<detail::plain_t<Args>>()...));
    }
  }

  std::map<std::string, flow_entry, std::less<>> flows_;
  std::map<std::string, step_entry, std::less<>> steps_;
};

}  // namespace durin
