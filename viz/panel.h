#pragma once
// A panel is one window of the dashboard. Each lives in its own file (viz/<name>_panel.cpp), reads
// only the model and the shared view state, and says whether it applies to the run at hand: the
// Pipeline panel needs micro-batches, the Buckets panel gradient buckets, and so on. Panels that
// do not apply are not shown.
#include <memory>
#include <vector>

#include "viz/model/dashboard_model.h"

namespace scalelab::viz {

class Panel {
 public:
  virtual ~Panel() = default;
  // The window title: also what --list-panels prints and tests look for.
  virtual const char* title() const = 0;
  virtual bool applies(const DashboardModel& model) const = 0;
  // A panel that spans the window's width above the grid of the others (the timeline).
  virtual bool full_width() const { return false; }
  // Draws the inside of the panel's window (the dashboard has called ImGui::Begin already).
  virtual void draw(const DashboardModel& model, ViewState& view) = 0;
};

std::unique_ptr<Panel> make_timeline_panel();
std::unique_ptr<Panel> make_memory_panel();
std::unique_ptr<Panel> make_training_panel();
std::unique_ptr<Panel> make_pipeline_panel();
std::unique_ptr<Panel> make_buckets_panel();
std::unique_ptr<Panel> make_data_parallel_panel();
std::unique_ptr<Panel> make_topology_panel();
std::unique_ptr<Panel> make_layout_panel();

// Every panel, in the order the dashboard lays them out.
std::vector<std::unique_ptr<Panel>> make_all_panels();

}  // namespace scalelab::viz
