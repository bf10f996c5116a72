// The dashboard's live run (viz/model/live_run.h) without a window: training on a background thread,
// read through the event bus by the same model a replay fills; Pause / Step / Resume / Stop at
// step boundaries; the playback clock paced at a given simulated speed; errors named.
#include <gtest/gtest.h>

#ifndef SCALELAB_HAVE_DASH

TEST(LiveRun, NotBuilt) {
  GTEST_SKIP() << "scalelab-dash is not built (configure found no ImGui + GLFW + OpenGL) — nothing to test";
}

#else

#include <chrono>
#include <thread>

#include "core/error.h"
#include "viz/launch_panel.h"
#include "viz/model/dashboard_model.h"
#include "viz/model/data_source.h"
#include "viz/model/live_run.h"

using namespace scalelab;
using namespace scalelab::viz;
using namespace std::chrono_literals;

namespace {

TrainConfig small_sim_run(const std::string& strategy, int64_t steps) {
  TrainConfig c;
  c.strategy = strategy;
  c.device = DeviceKind::sim;
  c.hw = "a100-nvlink-8";
  c.devices = 2;
  c.model = "mlp:784-64-10";
  c.dataset = "synthetic";
  c.synthetic_train = 1024;
  c.synthetic_test = 256;
  c.batch = 64;
  c.steps = steps;
  return c;
}

// Polls until `done` holds or `limit` passes; returns whether it held.
template <typename F>
bool wait_until(F done, std::chrono::milliseconds limit = 20s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

}  // namespace

TEST(LiveRun, RunsToTheEndAndTheBusFillsTheModel) {
  LiveRun run(small_sim_run("ddp", 6), /*speed=*/0);
  ASSERT_TRUE(wait_until([&] { return run.done(); })) << LiveRun::state_name(run.state());
  ASSERT_EQ(run.state(), LiveRun::State::finished) << run.error();
  ASSERT_TRUE(run.result());
  EXPECT_EQ(run.result()->steps, 6);
  EXPECT_FALSE(run.result()->stopped);
  EXPECT_EQ(run.steps_done(), 6);

  // What the dashboard does each frame.
  DashboardModel model;
  BusSource source(run.bus(), run.info());
  ASSERT_TRUE(source.update(model));
  EXPECT_EQ(model.steps().size(), 6u);
  ASSERT_EQ(model.device_count(), 2);
  EXPECT_EQ(model.devices()[1].name, "sim:1 (a100-nvlink-8)");
  EXPECT_GT(model.devices()[1].capacity_bytes, 0);  // from the profile the device put on the bus
  EXPECT_EQ(model.metric_series("loss").size(), 6u);
  EXPECT_EQ(model.metric_series("samples_per_s").size(), 6u);
  EXPECT_FALSE(source.update(model));  // nothing new
  // Not paced: the playback clock is the latest event.
  EXPECT_EQ(run.playback_ns(), run.bus().latest_end_ns());
}

TEST(LiveRun, PausedItWaitsAtAStepBoundaryAndStepRunsOneMore) {
  LiveRun run(small_sim_run("ddp", 50), /*speed=*/0, /*start_paused=*/true);
  // Paused from the start: the first step runs, then the run waits.
  ASSERT_TRUE(wait_until([&] { return run.steps_done() == 1; }));
  std::this_thread::sleep_for(150ms);
  EXPECT_EQ(run.steps_done(), 1);
  EXPECT_EQ(run.state(), LiveRun::State::paused);

  run.step();
  ASSERT_TRUE(wait_until([&] { return run.steps_done() == 2 && run.state() == LiveRun::State::paused; }));
  std::this_thread::sleep_for(150ms);
  EXPECT_EQ(run.steps_done(), 2);

  run.resume();
  ASSERT_TRUE(wait_until([&] { return run.done(); }));
  EXPECT_EQ(run.state(), LiveRun::State::finished) << run.error();
  EXPECT_EQ(run.result()->steps, 50);
}

TEST(LiveRun, StopEndsTheRunAtAStepBoundaryWithASummary) {
  LiveRun run(small_sim_run("ddp", 100000), /*speed=*/0);
  ASSERT_TRUE(wait_until([&] { return run.steps_done() >= 3; }));
  run.stop();
  ASSERT_TRUE(wait_until([&] { return run.done(); }));
  ASSERT_EQ(run.state(), LiveRun::State::stopped) << run.error();
  const TrainResult r = *run.result();
  EXPECT_TRUE(r.stopped);
  EXPECT_GE(r.steps, 3);
  EXPECT_LT(r.steps, 100000);
  EXPECT_EQ(static_cast<int64_t>(r.losses.size()), r.steps);
  EXPECT_GT(r.test_accuracy, 0.0);  // evaluated on the weights it stopped with
}

TEST(LiveRun, StopWakesAPausedRun) {
  LiveRun run(small_sim_run("pipeline", 1000), /*speed=*/0, /*start_paused=*/true);
  ASSERT_TRUE(wait_until([&] { return run.steps_done() == 1; }));
  run.stop();
  ASSERT_TRUE(wait_until([&] { return run.done(); }, 10s));
  EXPECT_EQ(run.state(), LiveRun::State::stopped) << run.error();
  EXPECT_EQ(run.result()->steps, 1);
}

TEST(LiveRun, PacedThePlaybackClockRunsAtTheChosenSpeed) {
  // 1 µs of simulated time per wall millisecond. Each step waits until the playback clock has
  // reached its end, so the wall time of the run is at least its simulated span / speed, and the
  // playback clock never runs past what the bus holds.
  const double speed = 1e-3;
  LiveRun run(small_sim_run("ddp", 8), speed);
  int64_t worst_lead = INT64_MIN;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(wait_until([&] {
    worst_lead = std::max(worst_lead, run.playback_ns() - run.bus().latest_end_ns());
    return run.done();
  }, 60s));
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(run.state(), LiveRun::State::finished) << run.error();
  EXPECT_LE(worst_lead, 0);

  DashboardModel model;
  BusSource source(run.bus(), run.info());
  source.update(model);
  ASSERT_EQ(model.steps().size(), 8u);
  // From the first step's begin to the last step's end: all of it was played.
  const double sim_span_s = static_cast<double>(model.steps().back().end_ns - model.steps().front().begin_ns) * 1e-9;
  EXPECT_GE(wall_s, 0.95 * sim_span_s / speed) << "simulated " << sim_span_s << " s in " << wall_s << " s of wall time";
  EXPECT_GT(sim_span_s / speed, 0.05);  // the test means something: pacing takes measurable time
}

TEST(LiveRun, BadSettingsAreNamedBeforeAThreadStarts) {
  TrainConfig c = small_sim_run("ddp", 5);
  c.launch = Launch::procs;
  try {
    LiveRun run(c, 0);
    FAIL() << "a procs launch was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--launch threads"), std::string::npos) << e.what();
  }
  c = small_sim_run("no-such-strategy", 5);
  EXPECT_THROW(LiveRun(c, 0), UsageError);
  c = small_sim_run("ddp", 5);
  EXPECT_THROW(LiveRun(c, -1), UsageError);
}

TEST(LiveRun, AFailureOnTheThreadIsReported) {
  TrainConfig c = small_sim_run("ddp", 5);
  c.dataset = "fashion-mnist";
  c.data_dir = "/nonexistent/fashion";
  LiveRun run(c, 0);
  ASSERT_TRUE(wait_until([&] { return run.done(); }));
  EXPECT_EQ(run.state(), LiveRun::State::failed);
  EXPECT_NE(run.error().find("/nonexistent/fashion"), std::string::npos) << run.error();
}

// What the launch panel's Start does, without drawing it: a second Start while a run is going ends
// that run and gives the dashboard the new one's bus; bad settings are shown, not thrown.
TEST(LaunchPanel, StartAgainReplacesTheRunAndBadSettingsAreShown) {
  Dashboard dash(nullptr);
  TrainConfig c = small_sim_run("ddp", 100000);
  c.micro_batches = 4;  // a pipeline option: the panel passes it to pipeline only
  LaunchPanel launch(dash, c, /*speed=*/0);
  EXPECT_EQ(launch.config().micro_batches, 1);
  // Chunks per device go with the interleaved schedule alone, and it gets two at least.
  TrainConfig interleaved = small_sim_run("pipeline", 5);
  interleaved.schedule = Schedule::interleaved;
  EXPECT_EQ(LaunchPanel(dash, interleaved, 0).config().virtual_stages, 2);
  interleaved.schedule = Schedule::one_f_one_b;
  interleaved.virtual_stages = 3;
  EXPECT_EQ(LaunchPanel(dash, interleaved, 0).config().virtual_stages, 1);
  ASSERT_TRUE(launch.start()) << launch.error();
  LiveRun* first = launch.run();
  ASSERT_TRUE(wait_until([&] { return first->steps_done() >= 2; }));
  ASSERT_TRUE(launch.start()) << launch.error();  // the first run is stopped and joined here
  LiveRun* second = launch.run();
  ASSERT_TRUE(wait_until([&] { return second->steps_done() >= 2; }));
  second->stop();
  ASSERT_TRUE(wait_until([&] { return second->done(); }));
  dash.update();
  EXPECT_TRUE(dash.live());
  EXPECT_EQ(static_cast<int64_t>(dash.model().steps().size()), second->result()->steps);
  EXPECT_EQ(dash.model().device_count(), 2);

  TrainConfig bad = small_sim_run("model-parallel", 5);
  bad.devices = 8;  // more devices than mlp:784-64-10 has layers
  LaunchPanel refused(dash, bad, 0);
  EXPECT_TRUE(refused.start());  // the strategy checks this on the run's thread …
  ASSERT_TRUE(wait_until([&] { return refused.run()->done(); }));
  EXPECT_EQ(refused.run()->state(), LiveRun::State::failed);
  EXPECT_NE(refused.run()->error().find("--devices 8"), std::string::npos) << refused.run()->error();
  bad = small_sim_run("ddp", 5);
  bad.batch = 0;
  LaunchPanel invalid(dash, bad, 0);
  EXPECT_FALSE(invalid.start());  // … the config before any thread starts
  EXPECT_NE(invalid.error().find("--batch must be"), std::string::npos) << invalid.error();
  EXPECT_EQ(invalid.run(), nullptr);
}

#endif  // SCALELAB_HAVE_DASH
