// The watchdog on its own (no MPI): an overdue call is reported with its own description, a wait
// watched inside a watched call (a device wait inside an NCCL barrier) hands the watch back to
// the outer call, and the abort hooks (ncclCommAbort on GPUs) run in order of registration.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <dax/comm/collective_checks.hpp>

namespace {

std::mutex reported_mutex;
std::vector<std::string> reported;

void record(const std::string& report) {
  std::lock_guard<std::mutex> lock(reported_mutex);
  reported.push_back(report);
}

std::vector<std::string> reports() {
  std::lock_guard<std::mutex> lock(reported_mutex);
  return reported;
}

void clear_reports() {
  std::lock_guard<std::mutex> lock(reported_mutex);
  reported.clear();
}

std::string describe_text(const void* call) { return *static_cast<const std::string*>(call); }

void wait_for_report(std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (reports().empty() && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace

TEST_CASE("an overdue call is reported with its description; a finished one is not", "[reliability][watchdog]") {
  clear_reports();
  dax::detail::Watchdog dog(0.2, &record);
  const std::string quick = "quick call", slow = "slow call";
  {
    const dax::detail::Watched watched(&dog, &quick, &describe_text);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  CHECK(reports().empty());
  const dax::detail::Watched watched(&dog, &slow, &describe_text);
  wait_for_report(std::chrono::seconds(5));
  CHECK(reports() == std::vector<std::string>{slow});
}

TEST_CASE("a nested watch hands the watch back to the call around it", "[reliability][watchdog]") {
  clear_reports();
  dax::detail::Watchdog dog(0.3, &record);
  const std::string outer = "barrier (waiting for the device)", inner = "stream wait";
  const dax::detail::Watched outer_watch(&dog, &outer, &describe_text);
  { const dax::detail::Watched inner_watch(&dog, &inner, &describe_text); }
  // The inner wait ended at once; the outer call is still watched, with its own deadline.
  wait_for_report(std::chrono::seconds(5));
  CHECK(reports() == std::vector<std::string>{outer});
}

TEST_CASE("abort hooks run once each, in order, and removed ones do not", "[reliability][watchdog]") {
  auto& hooks = dax::detail::abort_hooks();
  std::vector<int> ran;
  int a = 0, b = 0, c = 0;
  hooks.add(&a, [&] { ran.push_back(1); });
  hooks.add(&b, [&] { ran.push_back(2); });
  hooks.add(&c, [&] { ran.push_back(3); });
  hooks.remove(&b);
  hooks.run(std::chrono::seconds(5));
  CHECK(ran == std::vector<int>{1, 3});
  hooks.remove(&a);
  hooks.remove(&c);
  ran.clear();
  hooks.run(std::chrono::seconds(5));
  CHECK(ran.empty());
}

TEST_CASE("a hook that never returns does not keep the job from ending", "[reliability][watchdog]") {
  auto& hooks = dax::detail::abort_hooks();
  std::atomic<bool> release{false};
  int key = 0;
  hooks.add(&key, [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(hooks.run(std::chrono::milliseconds(200)));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  hooks.remove(&key);
  release = true;  // the stuck hook's thread may now finish and use `release` no more
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
}
