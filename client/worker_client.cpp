// durin::worker (include/durin/worker.hpp) over the worker routes of
// gateway/worker_api.hpp: one thread polls for as many tasks as runners are
// free, `concurrency` runners run them, one thread reports finished
// outcomes in batches; one HTTP connection per thread.
#include "durin/worker.hpp"

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "client/http_client.hpp"
#include "durin/limits.hpp"
#include "services/step_executor.hpp"

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
    auto address = client::parse_server_url(options_.server_url);
    if (!address) {
      ++errors_;
      return;
    }
    std::vector<std::thread> runners;
    for (std::size_t i = 0; i < options_.concurrency; ++i) {
      runners.emplace_back([this, address = *address] { run_tasks(address); });
    }
    std::thread reporter([this, address = *address] { report(address); });
    poll(*address);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      polling_ = false;
    }
    work_.notify_all();
    for (auto& thread : runners) {
      thread.join();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_ = false;
    }
    done_.notify_all();
    reporter.join();
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    space_.notify_all();
  }

  worker_stats stats() const {
    return {tasks_.load(), recorded_.load(), refused_.load(), errors_.load()};
  }

  const std::string& id() const { return options_.worker_id; }

 private:
  using headers = std::vector<std::pair<std::string, std::string>>;

  // A finished attempt waiting to be reported.
  struct finished {
    json report;  // one item of POST /v1/tasks/report
    int tries = 0;
  };

  static constexpr std::size_t reports_per_request_max =
      limits::worker_reports_max;
  static constexpr int report_tries_max = 5;

  headers request_headers() const {
    return {{"authorization", "Bearer " + options_.api_key},
            {"content-type", "application/json"}};
  }

  void tell(const std::string& problem) const {
    if (options_.on_problem) {
      options_.on_problem(problem);
    }
  }

  // A refusal's text: "401 unauthorized: unknown or revoked API key".
  static std::string refusal(unsigned status, const json& body) {
    auto text = std::to_string(status);
    if (body.is_object()) {
      text += " " + body.value("code", std::string()) + ": " +
              body.value("message", std::string());
    }
    return text;
  }

  // One POST; the parsed answer, or nullopt after counting an error.
  std::optional<std::pair<unsigned, json>> post(
      client::http_connection& connection, const std::string& target,
      const json& body) {
    auto response =
        connection.send("POST", target, request_headers(), body.dump());
    if (!response) {
      ++errors_;
      tell(target + ": " + response.error().to_string());
      return std::nullopt;
    }
    try {
      return std::make_pair(response->status, json::parse(response->body));
    } catch (const json::exception&) {
      ++errors_;
      tell(target + ": " + std::to_string(response->status) +
           " with a body that is not JSON");
      return std::nullopt;
    }
  }

  // Claims as many tasks as there are free runners, one request for all.
  void poll(const client::server_address& address) {
    client::http_connection connection(address,
                                       options_.poll_wait.count() + 30'000);
    const auto target = "/v1/task-queues/" + options_.task_queue + "/poll";
    std::uint64_t polls = 0;
    for (;;) {
      std::size_t free = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        space_.wait(lock, [this] {
          return stopping_ || in_hand_ < options_.concurrency;
        });
        if (stopping_) {
          return;
        }
        free = options_.concurrency - in_hand_;
      }
      // A fresh poll id per request: a retried poll (lost answer) gets the
      // same tasks back instead of leasing more.
      auto poll_id = "p" + std::to_string(polls);
      auto answer = post(connection, target,
                         {{"workerId", options_.worker_id},
                          {"pollRequestId", poll_id},
                          {"waitMs", options_.poll_wait.count()},
                          {"maxTasks", free}});
      if (!answer || answer->first != 200 ||
          !answer->second["tasks"].is_array()) {
        if (answer) {
          ++errors_;
          tell(target + ": " + refusal(answer->first, answer->second));
          if (answer->first == 401 || answer->first == 403) {
            return;  // the key is refused: no poll will be answered
          }
        }
        pause();
        continue;
      }
      auto& tasks = answer->second["tasks"];
      if (tasks.empty()) {
        continue;
      }
      ++polls;
      tasks_ += tasks.size();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        in_hand_ += tasks.size();
        for (auto& task : tasks) {
          ready_.push_back(std::move(task));
        }
      }
      // One wake per task: waking every runner for a few tasks costs more
      // than the tasks.
      for (std::size_t i = 0; i < tasks.size(); ++i) {
        work_.notify_one();
      }
    }
  }

  // Waits retry_delay, or less when stopped.
  void pause() {
    std::unique_lock<std::mutex> lock(mutex_);
    space_.wait_for(lock, options_.retry_delay, [this] { return stopping_; });
  }

  // A runner: runs claimed tasks until polling ended and none is left.
  void run_tasks(const client::server_address& address) {
    // Only heartbeats use it: connected on the first.
    client::http_connection connection(address, 30'000);
    for (;;) {
      json task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_.wait(lock, [this] { return !ready_.empty() || !polling_; });
        if (ready_.empty()) {
          return;
        }
        task = std::move(ready_.front());
        ready_.pop_front();
      }
      auto report = run_task(connection, task);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        finished_.push_back(finished{std::move(report)});
        --in_hand_;
      }
      space_.notify_one();
      done_.notify_one();
    }
  }

  // Runs one task's step; its report item.
  json run_task(client::http_connection& connection, const json& task) {
    step_info info;
    info.run_id = task.value("runId", "");
    info.instance_id = task.value("instanceId", info.run_id);
    info.step_name = task.value("stepName", "");
    info.step_id = task.value("stepId", "");
    info.attempt_id = task.value("attemptId", "");
    info.attempt = task.value("attempt", 1u);
    auto target = "/v1/tasks/" + info.attempt_id + "/heartbeat";
    auto beat = [this, &connection, target](const step_progress& progress) {
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
      auto answer = post(connection, target, body);
      // Unreachable node: go on; the lease decides.
      return !answer || answer->second.value("continue", true);
    };
    const auto* entry = steps_.find_step(info.step_name);
    services::step_outcome outcome;
    if (entry == nullptr) {
      outcome.result = services::step_outcome::kind::fatal;
      outcome.message = "worker " + options_.worker_id +
                        " has no step registered as '" + info.step_name + "'";
    } else {
      auto args = task.value("args", json::array());
      std::function<json()> body = [entry, args] {
        return entry->invoke(args);
      };
      outcome = services::run_step_body(info, body, beat);
    }
    json report = {{"attemptId", info.attempt_id}};
    if (outcome.result == services::step_outcome::kind::succeeded) {
      report["outcome"] = "complete";
      report["result"] = std::move(outcome.value);
    } else {
      report["outcome"] = "fail";
      report["message"] = outcome.message.substr(0, 4096);
      report["retryable"] =
          outcome.result == services::step_outcome::kind::retryable;
      if (outcome.retry_after_ms >= 0) {
        report["retryAfterMs"] = outcome.retry_after_ms;
      }
    }
    return report;
  }

  // Sends finished outcomes in batches: whatever finished while the
  // previous report was on its way goes in the next, so batches grow with
  // the load and a lone outcome waits for nothing. Ends once the runners
  // ended and everything was sent.
  void report(const client::server_address& address) {
    client::http_connection connection(address, 60'000);
    for (;;) {
      std::vector<finished> batch;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [this] { return !finished_.empty() || !running_; });
        if (finished_.empty()) {
          return;
        }
        while (!finished_.empty() && batch.size() < reports_per_request_max) {
          batch.push_back(std::move(finished_.front()));
          finished_.pop_front();
        }
      }
      json reports = json::array();
      for (const auto& item : batch) {
        reports.push_back(item.report);
      }
      auto answer = post(
          connection, "/v1/tasks/report",
          {{"workerId", options_.worker_id}, {"reports", std::move(reports)}});
      std::vector<finished> again;
      if (answer && answer->first == 200 &&
          answer->second["results"].is_array() &&
          answer->second["results"].size() == batch.size()) {
        const auto& results = answer->second["results"];
        for (std::size_t i = 0; i < batch.size(); ++i) {
          const auto& result = results[i];
          if (result.contains("recorded")) {
            ++(result["recorded"] == json(true) ? recorded_ : refused_);
          } else {
            // Indefinite: a repeat is answered stale if it was recorded.
            again.push_back(std::move(batch[i]));
          }
        }
      } else {
        // A lost answer: the node answers repeats of recorded ones as
        // stale. A refused request (4xx) is this worker's bug: not retried.
        if (answer) {
          ++errors_;
          tell("/v1/tasks/report: " + refusal(answer->first, answer->second));
        }
        if (!answer || answer->first >= 500) {
          again = std::move(batch);
        }
      }
      if (again.empty()) {
        continue;
      }
      std::size_t kept = 0;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& item : again) {
          // Given up: the lease expires and the node delivers it again.
          if (++item.tries < report_tries_max) {
            finished_.push_front(std::move(item));
            ++kept;
          }
        }
      }
      if (kept > 0) {
        std::this_thread::sleep_for(options_.retry_delay);
      }
    }
  }

  worker_options options_;
  registry steps_;
  std::mutex mutex_;
  std::condition_variable space_;  // the poller: a runner is free, or stop
  std::condition_variable work_;   // runners: a task is ready
  std::condition_variable done_;   // the reporter: an outcome is ready
  bool stopping_ = false;
  bool polling_ = true;            // the poll loop has not ended
  bool running_ = true;            // some runner has not ended
  std::size_t in_hand_ = 0;        // claimed, not finished running
  std::deque<json> ready_;         // claimed, not started
  std::deque<finished> finished_;  // not reported yet
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
