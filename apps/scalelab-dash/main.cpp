// scalelab-dash: the dashboard. Live: a launch panel starts a run on a background thread and every
// panel shows it as it trains. Replay: a trace written by `scalelab train --trace FILE`.
//
//   scalelab-dash                                               launch panel, press Start
//   scalelab-dash --strategy pipeline --devices 4 --micro-batches 8 --start
//   scalelab-dash --strategy ddp --steps 40 --screenshot ddp.png     run, then a PNG (headless: xvfb-run -a)
//   scalelab-dash --replay out/ddp.trace.json                   scrub through a trace
//   scalelab-dash --replay t.json --panel pipeline --screenshot p.png --size 1200x500   one panel (slides)
//   scalelab-dash --replay t.json --panel timeline --only-lanes compute,comm --font-size 20 --screenshot t.png
//   scalelab-dash --replay big.trace.json --bench-frames 300     median frame CPU time
//   scalelab-dash --replay out/ddp.trace.json --describe         counts, no window
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <imgui.h>

#include "core/device/sim/profile.h"
#include "apps/cli_numbers.h"
#include "core/error.h"
#include "core/io/atomic_file.h"
#include "core/io/file_check.h"
#include "core/limits.h"
#include "run/train.h"
#include "strategies/strategy.h"
#include "viz/dashboard.h"
#include "viz/launch_panel.h"
#include "viz/model/png_writer.h"
#include "viz/window_glfw.h"

using namespace scalelab;
using namespace scalelab::viz;

namespace {

struct Options {
  std::string replay;
  // Live: what the launch panel starts with (and what --screenshot/--describe run).
  TrainConfig run;
  ChoiceWords choice;  // --schedule, --amp as given, parsed into run
  std::string device = "sim";
  double speed = 1e-4;   // simulated seconds per wall second; 0: as fast as it can
  bool start = false;
  double live_for_s = 0;  // --screenshot of a run in progress, after this many wall seconds
  std::string screenshot;
  std::string panel;  // --panel: the picture is of this panel alone
  std::string size = "1600x1000";
  int bench_frames = 0;
  int bench_copies = 1;  // --bench-copies: the replayed run laid end to end this many times
  bool list_panels = false;
  bool describe = false;
  long long step = -1;       // a step number; -1: the middle step
  double at = 1.0;           // where in the step the cursor sits
  std::string view = "step"; // what the timeline starts showing: the cursor's step, or the whole run
  float font_px = 15.0f;
  std::string only_devices;  // the timeline's devices: "0,1" or "0-1" ("" all)
  std::string only_lanes;    // the timeline's lanes: "compute,comm" ("" all)
  std::string memory_max = "auto";  // the Memory panel's axis: bytes, or auto (the panel's choice)
  std::string mouse;         // X,Y: where the pointer is in a screenshot (to show a tooltip)
};

void parse_size(const std::string& s, int& w, int& h) {
  const size_t x = s.find('x');
  try {
    if (x == std::string::npos) throw std::invalid_argument(s);
    size_t used_w = 0, used_h = 0;
    w = std::stoi(s.substr(0, x), &used_w);
    h = std::stoi(s.substr(x + 1), &used_h);
    if (used_w != x || used_h != s.size() - x - 1) throw std::invalid_argument(s);
  } catch (const std::exception&) {
    throw UsageError("dash", "--size " + s + ": expected WIDTHxHEIGHT, e.g. --size 1600x1000");
  }
  if (w < 320 || h < 240 || w > 8192 || h > 8192)
    throw UsageError("dash", "--size " + s + ": width and height must be within 320x240 … 8192x8192");
}

// "a,b,c" → {"a", "b", "c"}; "" → {}.
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  for (size_t at = 0; !s.empty() && at <= s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// "0,2" or "0-3" or "0-1,3": device numbers for --only-devices, in decimal, below 2^20 (sscanf's
// %d would wrap 4294967296 to device 0).
std::vector<int> parse_devices(const std::string& s) {
  auto refuse = [&] { return UsageError("dash", "--only-devices " + s + ": expected device numbers from 0 to 1048575, e.g. 0,1 or 0-3"); };
  auto device = [&](const std::string& t) {
    if (t.empty() || t.size() > 7 || t.find_first_not_of("0123456789") != std::string::npos) throw refuse();
    const int d = std::stoi(t);
    if (d >= (1 << 20)) throw refuse();
    return d;
  };
  std::vector<int> out;
  for (const std::string& item : split_commas(s)) {
    const size_t dash = item.find('-');
    const int a = device(item.substr(0, dash)), b = dash == std::string::npos ? a : device(item.substr(dash + 1));
    if (b < a || b - a > 4096) throw refuse();
    for (int d = a; d <= b; ++d) out.push_back(d);
  }
  return out;
}

std::vector<Lane> parse_lanes(const std::string& s) {
  std::vector<Lane> out;
  for (const std::string& item : split_commas(s)) {
    int found = -1;
    for (int l = 0; l < kLaneCount; ++l)
      if (item == lane_name(static_cast<Lane>(l))) found = l;
    if (found < 0)
      throw UsageError("dash", "--only-lanes " + s + ": '" + item + "' is not a lane — use compute, comm, copy, host, e.g. --only-lanes compute,comm");
    out.push_back(static_cast<Lane>(found));
  }
  return out;
}

int64_t parse_memory_max(const std::string& s) {
  if (s == "auto") return 0;
  size_t used = 0;
  long long v = -1;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || v <= 0)
    throw UsageError("dash", "--memory-max " + s + ": expected the axis's maximum in bytes (e.g. 12800000) or auto");
  return v;
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

// Runs the launch panel's settings to the end with nothing to watch (for --screenshot, --describe,
// --list-panels, --bench-frames without --replay), printing progress on stderr.
void run_to_end(LaunchPanel& launch) {
  launch.start_or_throw(/*paused=*/false, /*unpaced=*/true);
  LiveRun& run = *launch.run();
  int64_t shown = -1;
  while (!run.done()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int64_t total = std::max<int64_t>(run.total_steps(), 1), done = run.steps_done();
    if (done * 10 / total != shown) {
      shown = done * 10 / total;
      std::fprintf(stderr, "run: step %lld/%lld\n", static_cast<long long>(done), static_cast<long long>(total));
    }
  }
  if (run.state() == LiveRun::State::failed) throw Error("dash", "the run failed: " + run.error());
}

// How wide the launch panel is in a window of width w.
float launch_width(int w) { return std::clamp(0.24f * static_cast<float>(w), 300.0f, 420.0f); }

// One frame of the whole window: the launch panel on the left when live, the dashboard beside it.
void frame(Dashboard& dash, LaunchPanel* launch, int width, int height, double dt) {
  float left = 0;
  if (launch) {
    left = launch_width(width);
    launch->draw(left, static_cast<float>(height));
    if (LiveRun* run = launch->run()) dash.follow(run->playback_ns());
  }
  dash.frame(static_cast<float>(width), static_cast<float>(height), dt, left);
}

// The options that shape the picture, checked before anything runs or is read.
void check_picture_options(const Options& o) {
  if (!(o.at >= 0 && o.at <= 1))
    throw UsageError("dash", "--at " + std::to_string(o.at) + ": where in the step the cursor starts must be within 0 … 1 (0: its start, 1: its end)");
  if (o.view != "step" && o.view != "run") throw UsageError("dash", "--view " + o.view + ": expected step or run");
  if (!(o.live_for_s >= 0 && o.live_for_s < 86400))
    throw UsageError("dash", "--live-for " + std::to_string(o.live_for_s) + ": wall seconds must be within 0 … 86400 — e.g. --live-for 3");
  float mx = 0, my = 0;
  char rest = 0;
  if (!o.mouse.empty() && (std::sscanf(o.mouse.c_str(), "%f,%f%c", &mx, &my, &rest) != 2 || !(mx >= 0 && my >= 0)))
    throw UsageError("dash", "--mouse " + o.mouse + ": expected X,Y in pixels, e.g. --mouse 600,180");
  parse_devices(o.only_devices);
  parse_lanes(o.only_lanes);
  parse_memory_max(o.memory_max);
  if (!o.panel.empty()) {
    if (o.screenshot.empty() && !o.list_panels)
      throw UsageError("dash", "--panel " + o.panel + " draws one panel for a picture: add --screenshot FILE.png");
    Dashboard::check_panel_name(o.panel);
  }
}

int run(const Options& o) {
  int width = 0, height = 0;
  parse_size(o.size, width, height);
  check_picture_options(o);
  const bool picture = !o.screenshot.empty();
  check_distinct_paths({{"--screenshot", o.screenshot, true},
                        {"--screenshot (its .json)", picture ? o.screenshot + ".json" : "", true},
                        {"--replay", o.replay, false},
                        {"--hw", o.run.hw.empty() ? "" : profile_file(o.run.hw), false}},
                       "dash");
  const bool batch = !o.screenshot.empty() || o.bench_frames > 0 || o.list_panels;
  const bool live = o.replay.empty();

  std::unique_ptr<DataSource> source;
  const auto open_t0 = std::chrono::steady_clock::now();
  if (!live) source = std::make_unique<ReplaySource>(o.replay, o.bench_copies);  // reads the file now: errors before a window
  Dashboard dash(std::move(source));
  // Opening: reading the trace and building the model (what the user waits for before a frame).
  const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - open_t0).count();
  std::unique_ptr<LaunchPanel> launch;
  if (live) {
    TrainConfig c = o.run;
    c.device = parse_device_kind(o.device);
    o.choice.apply(c);
    // The launch panel's devices (default 4) go to the strategies that spread; one whose count is
    // fixed (single: 1) takes its own, as the panel shows it.
    const DeviceCountRule& rule = find_strategy(c.strategy).device_count;
    if (rule.min == rule.max) c.devices = rule.min;
    if (c.device == DeviceKind::sim && c.hw.empty()) c.hw = "a100-nvlink-8";
    check_config(c);  // options the command line gave that do not fit together (--micro-batches for ddp …)
    if (!(o.speed >= 0) || !std::isfinite(o.speed))
      throw UsageError("dash", "--speed " + std::to_string(o.speed) +
                                   ": simulated seconds per wall second must be ≥ 0 (e.g. 1e-4; 0: as fast as it can)");
    launch = std::make_unique<LaunchPanel>(dash, c, o.speed);
    if (o.live_for_s > 0) {
      if (o.screenshot.empty()) throw UsageError("dash", "--live-for takes a picture of a run in progress: add --screenshot FILE.png");
      launch->start_or_throw();
    } else if (batch || o.describe) {
      run_to_end(*launch);
      dash.update();
      dash.view().follow_live = false;
    } else if (o.start) {
      launch->start_or_throw();
    }
  }
  const DashboardModel& model = dash.model();
  if (live && (o.live_for_s > 0 || (!batch && !o.describe))) {
    // Interactive live: the cursor follows the run; --step and --at are for pictures.
  } else if (o.step >= 0) {
    const auto& steps = model.steps();
    auto it = std::find_if(steps.begin(), steps.end(), [&](const StepSpan& s) { return s.step == o.step; });
    if (it == steps.end())
      throw UsageError("dash", "--step " + std::to_string(o.step) + ": the trace has steps " +
                                   (steps.empty() ? std::string("none") : std::to_string(steps.front().step) + " … " + std::to_string(steps.back().step)));
    dash.select_step(static_cast<int>(it - steps.begin()), o.at);
  } else {
    dash.select_step(static_cast<int>(model.steps().size()) / 2, o.at);
  }

  if (o.view == "run") dash.fit_run();

  if (!o.panel.empty()) dash.show_only(o.panel);  // the model is filled: is the panel in this run?
  dash.view().only_devices = parse_devices(o.only_devices);
  dash.view().only_lanes = parse_lanes(o.only_lanes);
  dash.view().memory_axis_bytes = parse_memory_max(o.memory_max);

  if (o.describe) std::cout << describe(model) << std::flush;
  if (o.describe && !batch) return 0;

  WindowOptions wo;
  wo.width = width;
  wo.height = height;
  wo.title = "scalelab-dash — " + (live ? std::string("live") : o.replay);
  wo.vsync = o.bench_frames <= 0;
  wo.font_px = o.font_px;
  GlfwWindow window(wo);

  if (!batch) {
    auto last = std::chrono::steady_clock::now();
    while (!window.should_close()) {
      const auto now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(now - last).count();
      last = now;
      // Replaying or running, the picture changes every frame; otherwise a frame is needed only
      // after input (the timeout keeps hover highlights and the like responsive).
      LiveRun* run = launch ? launch->run() : nullptr;
      const bool moving = dash.view().playing || (run && !run->done()) || (run && run->playback_ns() > dash.view().cursor_ns);
      if (!moving) window.wait_events(0.1);
      window.begin_frame();
      frame(dash, launch.get(), window.width(), window.height(), dt);
      window.render();
      window.present();
    }
    return 0;
  }

  // Batch: a few frames so windows settle (ImGui sizes some things from the previous frame),
  // then the screenshot and the window list from the last one.
  if (!o.screenshot.empty() || o.list_panels) {
    float mx = -1, my = -1;
    if (!o.mouse.empty() && std::sscanf(o.mouse.c_str(), "%f,%f", &mx, &my) != 2)
      throw UsageError("dash", "--mouse " + o.mouse + ": expected X,Y in pixels, e.g. --mouse 600,180");
    // --live-for: the run goes on while frames are drawn as on a display, for that long.
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    const int min_frames = 4;
    int64_t steps_when_drawn = 0;
    for (int f = 0;; ++f) {
      const bool last = f + 1 >= min_frames && elapsed_s() >= o.live_for_s;
      // What the run had done when the picture was drawn (it goes on while the PNG is written).
      if (last && launch && launch->run()) steps_when_drawn = launch->run()->steps_done();
      window.begin_frame(mx, my);
      frame(dash, o.panel.empty() ? launch.get() : nullptr, width, height, 1.0 / 60);
      window.render(/*capture=*/last && !o.screenshot.empty());
      window.present();
      if (last) break;
      if (o.live_for_s > 0) std::this_thread::sleep_for(std::chrono::milliseconds(15));
    }
    if (!o.screenshot.empty()) {
      const Image img = window.capture();
      write_png(o.screenshot, img.width, img.height, img.rgb);
      PictureInfo info;
      info.panel = o.panel;
      info.width = img.width;
      info.height = img.height;
      info.font_px = o.font_px;
      info.simulated = model.info().simulated;
      info.trace = o.replay;
      const int si = shown_step_index(model, dash.view());
      if (si >= 0) info.step = model.steps()[static_cast<size_t>(si)].step;
      write_picture_info(o.screenshot, info);
      std::cout << "screenshot: " << o.screenshot << " (" << img.width << "x" << img.height << ")\n";
    }
    if (o.live_for_s > 0 && launch && launch->run()) {
      const LiveRun& r = *launch->run();
      const int si = shown_step_index(model, dash.view());
      std::cout << "live: " << LiveRun::state_name(r.state()) << ", " << steps_when_drawn << " of " << r.total_steps()
                << " steps done when drawn, cursor " << (dash.view().follow_live ? "following" : "still") << " in step "
                << (si >= 0 ? model.steps()[static_cast<size_t>(si)].step : -1) << "\n";
    }
    if (o.list_panels) {
      if (launch && o.panel.empty()) std::cout << "panel: " << LaunchPanel::kTitle << "\n";
      for (const std::string& title : dash.shown_windows()) std::cout << "panel: " << title << "\n";
    }
  }

  if (o.bench_frames > 0) {
    // The worst case for the timeline: the whole run in view, so every event is a candidate, and
    // the cursor sweeping the run, so the panels that depend on it recompute each frame.
    dash.fit_run();
    std::vector<double> cpu_ms, wall_ms, with_swap_ms, vertices;
    for (int f = 0; f < o.bench_frames; ++f) {
      ViewState& v = dash.view();
      v.cursor_ns = model.t_begin_ns() + (model.t_end_ns() - model.t_begin_ns()) * f / std::max(o.bench_frames - 1, 1);
      const double c0 = thread_cpu_ms();
      const auto w0 = std::chrono::steady_clock::now();
      window.begin_frame(-1, -1);
      frame(dash, launch.get(), width, height, 0.0);
      window.render();
      const double c1 = thread_cpu_ms();
      if (const ImDrawData* dd = ImGui::GetDrawData()) vertices.push_back(dd->TotalVtxCount);
      const auto w1 = std::chrono::steady_clock::now();
      window.present();
      const auto w2 = std::chrono::steady_clock::now();
      cpu_ms.push_back(c1 - c0);
      wall_ms.push_back(std::chrono::duration<double, std::milli>(w1 - w0).count());
      with_swap_ms.push_back(std::chrono::duration<double, std::milli>(w2 - w0).count());
    }
    // The budgets of issue 12: a frame costs what is on screen, so it stays within 8 ms up to 1M
    // events and 16 ms up to 10M; a 1M-event trace opens in under 3 s.
    const size_t n = model.events().size();
    const bool big = n > 1'100'000;  // past the 1M budget's run, the 10M one applies
    std::printf("bench-frames: %d frames of %zu events at %dx%d (whole run in view, cursor sweeping)\n", o.bench_frames,
                n, width, height);
    std::printf("  median frame CPU %.2f ms (budget %d ms at %s events; p90 %.2f ms) — building the frame and submitting it to OpenGL\n",
                percentile(cpu_ms, 0.5), big ? 16 : 8, big ? "10M" : "1M", percentile(cpu_ms, 0.9));
    // The first frame analyses the trace for the panels (links, buckets, pipeline): part of opening.
    const double first_frame_s = wall_ms.empty() ? 0 : wall_ms.front() * 1e-3;
    if (!live)
      std::printf("  open %.2f s to the first frame (budget 3 s at 1M events%s): reading the trace and building the model "
                  "%.2f s, the first frame %.2f s\n",
                  open_s + first_frame_s, o.bench_copies > 1 ? "; the run tiled in memory, not read" : "", open_s, first_frame_s);
    std::printf("  median %.0f vertices a frame\n", percentile(vertices, 0.5));
    std::printf("  median wall time %.2f ms; with the swap (software rasterizer under Xvfb) %.2f ms\n",
                percentile(wall_ms, 0.5), percentile(with_swap_ms, 0.5));
    std::printf("median_frame_cpu_ms: %.3f\n", percentile(cpu_ms, 0.5));
  }
  return 0;
}

}  // namespace

// The program: main() below runs it through main_within_limits.
static int run_main(int argc, char** argv) {
  remove_temporaries_on_signals();  // a live run's ranks write too: SIGTERM of the dashboard removes theirs
  CLI::App app{"scalelab-dash: watch a training run — timeline, memory, pipeline bubbles, gradient buckets, links"};
  Options o;
  app.add_option("--replay", o.replay, "a trace written by `scalelab train --trace FILE`");
  app.add_option("--screenshot", o.screenshot, "render (headless: under xvfb-run -a), write the window as a PNG and what it shows as PNG.json, exit");
  app.add_option("--size", o.size, "window size WIDTHxHEIGHT")->capture_default_str();
  app.add_option("--panel", o.panel,
                 "with --screenshot: draw this panel alone, filling the window (timeline, pipeline, buckets, "
                 "data-parallel, topology, layout, memory, training)");
  app.add_option("--bench-frames", o.bench_frames, "render N frames and print the median frame CPU time (ms)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--bench-copies", o.bench_copies,
                 "with --replay: lay the run end to end N times in memory (a 10M-event benchmark from a 1M-event trace)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--list-panels", o.list_panels, "render, then print the windows drawn (panel: NAME), exit");
  app.add_flag("--describe", o.describe, "print the trace's counts (events, steps, buckets, bubbles …); no window");
  app.add_option("--step,--cursor-step", o.step, "pictures: the cursor at this training step (default: the middle one)")
      ->check(at_least(0));
  app.add_option("--at", o.at, "where in the step the cursor starts: 0 = its start, 1 = its end")->capture_default_str();
  app.add_option("--view", o.view, "the timeline starts on the cursor's step, or the whole run: step | run")->capture_default_str();
  app.add_option("--mouse", o.mouse, "with --screenshot: the pointer at X,Y (shows the tooltip there)");
  app.add_option("--font-size", o.font_px, "font size in pixels")->capture_default_str()->check(CLI::Range(6, 96));
  app.add_option("--only-devices", o.only_devices, "the timeline shows these devices only, e.g. 0,1 or 0-1 (slides: fewer rows, larger text)");
  app.add_option("--only-lanes", o.only_lanes, "the timeline shows these lanes only: compute, comm, copy, host, e.g. compute,comm");
  app.add_option("--memory-max", o.memory_max, "the Memory panel's axis maximum in bytes, or auto (pictures side by side on one scale)")
      ->capture_default_str();
  // A live run: what the launch panel starts with. Without --replay, --screenshot, --describe,
  // --list-panels and --bench-frames first run it to the end.
  TrainConfig& c = o.run;
  ChoiceWords& choice = o.choice;
  c.devices = 4;
  c.steps = 200;
  app.add_flag("--start", o.start, "live: start the run at once (otherwise press Start)");
  app.add_option("--live-for", o.live_for_s, "with --screenshot: start the run paced, draw it for this many seconds, then take the picture");
  app.add_option("--speed", o.speed, "live, sim: simulated seconds per wall second (0: as fast as it can)")->capture_default_str();
  app.add_option("--strategy", c.strategy, "live: the strategy (see `scalelab strategies`)")->capture_default_str();
  app.add_option("--device", o.device, "live: sim | cpu | cuda")->capture_default_str();
  app.add_option("--hw", c.hw, "live, sim: hardware profile (default a100-nvlink-8)");
  app.add_option("--devices", c.devices, "live: number of devices")->capture_default_str();
  app.add_flag("--dry-run", c.dry_run, "live, sim: shapes and times, no numerics");
  app.add_option("--model", c.model, "live: mlp:IN-HIDDEN...-CLASSES | convnet | gpt:L-C-H-T-V (see `scalelab models`)")->capture_default_str();
  app.add_option("--dataset", c.dataset, "live: fashion-mnist | text | synthetic (default: text for a GPT, else fashion-mnist)");
  app.add_flag("--recompute", c.recompute, "live, gpt: recompute each block's activations in backward (activation checkpointing)");
  app.add_flag("--sequence-parallel", c.sequence_parallel,
               "live, tensor-parallel: LayerNorms, dropout and residual adds on T/N positions per rank");
  app.add_option("--dp", c.dp, "live, tensor-parallel: data-parallel replicas of a tensor-parallel group")
      ->capture_default_str();
  app.add_option("--pp", c.pp, "live, tensor-parallel: pipeline stages (3D: --devices = dp · tp · pp)")->capture_default_str();
  app.add_option("--batch", c.batch, "live: global batch size")->capture_default_str();
  app.add_option("--steps", c.steps, "live: training steps")->capture_default_str();
  app.add_option("--seed", c.seed, "live: seed for weights and data order")->check(at_least(0))->capture_default_str();
  app.add_option("--micro-batches", c.micro_batches, "live, pipeline: chunks per batch")->capture_default_str();
  app.add_option("--schedule", choice.schedule, "live, pipeline: gpipe | 1f1b | interleaved | zero-bubble")->capture_default_str();
  app.add_option("--virtual-stages", c.virtual_stages, "live, pipeline, --schedule interleaved: chunks of layers per device")
      ->capture_default_str();
  app.add_option("--bucket-mb", c.bucket_mb, "live, ddp: gradient bucket cap in MB")->capture_default_str();
  app.add_option("--first-bucket-mb", c.first_bucket_mb, "live, ddp: cap of the first bucket in MB")->capture_default_str();
  app.add_option("--zero-stage", c.zero_stage, "live, zero: 1 shards optimizer state, 2 gradients too, 3 weights too; tensor-parallel: 1 with --dp");
  app.add_option("--amp", choice.amp, "live: off | fp16 | bf16")->capture_default_str();
  app.add_flag("--check-equivalence", c.check_equivalence, "live: also train single on the same batches and compare");
  strict_numbers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ConversionError& e) {
    std::cerr << "[cli] " << e.what() << ": not a number of the option's kind, or out of its range (counts are whole "
              << "numbers up to 2147483647) — see `scalelab-dash --help`\n";
    return 2;
  } catch (const CLI::ParseError& e) {
    std::cerr << "[cli] " << e.what() << " — see `scalelab-dash --help`\n";
    return 2;
  }
  try {
    // Options that name a file: one given as '' names none, and is refused rather than taken as left out.
    for (const char* name : {"--replay", "--screenshot", "--hw"})
      for (const std::string& value : app.get_option(name)->results()) check_path_not_empty(name, value);
    // A replay shows a run already made: the live run's options would be ignored, and --bench-copies
    // without a replay.
    if (!o.replay.empty())
      for (const char* flag : {"--start", "--live-for", "--speed", "--strategy", "--device", "--hw", "--devices", "--dry-run",
                               "--model", "--dataset", "--recompute", "--sequence-parallel", "--dp", "--pp", "--batch", "--steps", "--seed", "--micro-batches",
                               "--schedule", "--virtual-stages", "--bucket-mb", "--first-bucket-mb", "--zero-stage", "--amp", "--check-equivalence"})
        if (app.count(flag))
          throw UsageError("dash", std::string(flag) + " sets the live run, and --replay shows a trace already made (it would "
                                   "be ignored) — drop " + flag + ", or --replay");
    if (o.replay.empty() && app.count("--bench-copies"))
      throw UsageError("dash", "--bench-copies lays a replayed run end to end, and there is no --replay (it would be "
                               "ignored) — add --replay TRACE, or drop --bench-copies");
    // The launch panel would quietly start 200 steps for 0 (its own default), and dash has no --epochs.
    if (c.steps < 1)
      throw UsageError("dash", "--steps " + std::to_string(c.steps) + ": a live run trains at least one step — pass "
                                   "--steps N ≥ 1 (default 200)");
    if (!app.count("--dataset")) c.dataset = default_dataset(c.model);  // as `scalelab train`
    resolve_strategy_alias(c.strategy, c.zero_stage);
    return run(o);
  } catch (const UsageError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << kOutOfHostMemory << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}

int main(int argc, char** argv) { return scalelab::main_within_limits(argc, argv, run_main); }
