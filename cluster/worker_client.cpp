// durin::worker (include/durin/worker.hpp): the poll loop over the worker
// routes of cluster/worker_api.hpp, one HTTP connection per thread.
#include "durin/worker.hpp"

#include <unistd.h>

#include <mutex>
#include <thread>
#include <vector>

#include "actors/step_executor.hpp"
#include "cluster/http_client.hpp"

namespace durin {

class worker_impl {
 public:
  worker_impl(worker_options options, registry steps)
      : options_(std::move(options)), steps_(std::move(steps)) {
    if (options_.worker_id.empty()) {
      char host[256] = {};
      ::gethostname(host, sizeof(host) - 1);
      options_.worker_id = std::string(host) + "-" + std::to_string(::getpid());
    }
    options_.concurrency =
        std::clamp<std::size_t>(options_.concurrency, 1, 256);
  }

  void run() {
    auto address = cluster::parse_server_url(options_.server_url);
    if (!address) {
      ++errors_;
      return;
    }
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < options_.concurrency; ++i) {
      threads.emplace_back([this, address = *address, i] { loop(address, i); });
    }
    for (auto& thread : threads) {
      thread.join();
    }
  }

  void stop() { stopping_ = true; }

  worker_stats stats() const {
    return {tasks_.load(), recorded_.load(), refused_.load(), errors_.load()};
  }

  const std::string& id() const { return options_.worker_id; }

 private:
  using headers = std::vector<std::pair<std::string, std::string>>;

  headers request_headers() const {
    return {{"authorization", "Bearer " + options_.api_key},
            {"content-type", "application/json"}};
  }

  // One POST; the parsed answer, or nullopt after counting an error.
  std::optional<std::pair<unsigned, json>> post(
      cluster::http_connection& connection, const std::string& target,
      const json& body) {
    auto response =
        connection.send("POST", target, request_headers(), body.dump());
    if (!response) {
      ++errors_;
      return std::nullopt;
    }
    try {
      return std::make_pair(response->status, json::parse(response->body));
    } catch (const json::exception&) {
      ++errors_;
      return std::nullopt;
    }
  }

  void loop(const cluster::server_address& address, std::size_t slot) {
    cluster::http_connection connection(address,
                                        options_.poll_wait.count() + 30'000);
    std::uint64_t polls = 0;
    while (!stopping_) {
      // A fresh poll id per task: a retried poll (lost answer) gets the
      // same task back instead of leasing a second one.
      auto poll_id = "p" + std::to_string(slot) + "-" + std::to_string(polls);
      auto answer =
          post(connection, "/v1/task-queues/" + options_.task_queue + "/poll",
               {{"workerId", options_.worker_id},
                {"pollRequestId", poll_id},
                {"waitMs", options_.poll_wait.count()}});
      if (!answer || answer->first != 200) {
        if (answer) {
          ++errors_;
        }
        std::this_thread::sleep_for(options_.retry_delay);
        continue;
      }
      const auto& task = answer->second["task"];
      if (task.is_null()) {
        continue;
      }
      ++polls;
      ++tasks_;
      run_task(connection, task);
    }
  }

  void run_task(cluster::http_connection& connection, const json& task) {
    step_info info;
    info.run_id = task.value("runId", "");
    info.instance_id = task.value("instanceId", info.run_id);
    info.step_name = task.value("stepName", "");
    info.step_id = task.value("stepId", "");
    info.attempt_id = task.value("attemptId", "");
    info.attempt = task.value("attempt", 1u);
    auto base = "/v1/tasks/" + info.attempt_id;
    auto beat = [this, &connection, base](const step_progress& progress) {
      json body = {{"workerId", options_.worker_id}};
      if (!progress.message.empty()) {
        body["message"] = progress.message;
      }
      if (progress.current >= 0) {
        body["current"] = progress.current;
      }
      if (progress.total >= 0) {
        body["total"] = progress.total;
      }
      auto answer = post(connection, base + "/heartbeat", body);
      // Unreachable node: go on; the lease decides.
      return !answer || answer->second.value("continue", true);
    };
    const auto* entry = steps_.find_step(info.step_name);
    actors::step_outcome outcome;
    if (entry == nullptr) {
      outcome.result = actors::step_outcome::kind::fatal;
      outcome.message = "worker " + options_.worker_id +
                        " has no step registered as '" + info.step_name + "'";
    } else {
      auto args = task.value("args", json::array());
      std::function<json()> body = [entry, args] {
        return entry->invoke(args);
      };
      outcome = actors::run_step_body(info, body, beat);
    }
    json report = {{"workerId", options_.worker_id}};
    std::string target = base;
    if (outcome.result == actors::step_outcome::kind::succeeded) {
      report["result"] = outcome.value;
      target += "/complete";
    } else {
      report["message"] = outcome.message.substr(0, 4096);
      report["retryable"] =
          outcome.result == actors::step_outcome::kind::retryable;
      if (outcome.retry_after_ms >= 0) {
        report["retryAfterMs"] = outcome.retry_after_ms;
      }
      target += "/fail";
    }
    // A lost answer is retried: the node answers a repeat as stale.
    for (int tries = 0; tries < 5; ++tries) {
      auto answer = post(connection, target, report);
      if (answer && answer->first == 200) {
        if (answer->second.value("recorded", false)) {
          ++recorded_;
        } else {
          ++refused_;
        }
        return;
      }
      if (answer && answer->first == 409) {
        ++refused_;
        return;
      }
      std::this_thread::sleep_for(options_.retry_delay);
    }
  }

  worker_options options_;
  registry steps_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> tasks_{0};
  std::atomic<std::uint64_t> recorded_{0};
  std::atomic<std::uint64_t> refused_{0};
  std::atomic<std::uint64_t> errors_{0};
};

worker::worker(worker_options options, registry steps)
    : impl_(std::make_unique<worker_impl>(std::move(options),
                                          std::move(steps))) {}

worker::~worker() {
  impl_->stop();
}

void worker::run() {
  impl_->run();
}

void worker::stop() {
  impl_->stop();
}

worker_stats worker::stats() const {
  return impl_->stats();
}

const std::string& worker::worker_id() const {
  return impl_->id();
}

}  // namespace durin
