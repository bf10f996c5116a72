#pragma once
// The window backend: GLFW + OpenGL 3 + ImGui's GLFW and OpenGL3 backends, kept apart from the
// panels (which only make ImGui calls). It can also draw a frame into an offscreen framebuffer
// and read it back, for --screenshot: that works the same on a desktop and under Xvfb, whatever
// the size of the virtual screen.
#include <cstdint>
#include <string>
#include <vector>

struct GLFWwindow;

namespace scalelab::viz {

struct WindowOptions {
  int width = 1600;
  int height = 1000;
  std::string title = "scalelab-dash";
  bool vsync = true;      // off for --bench-frames: measure our frame, not the display's
  float font_px = 15.0f;
};

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // top row first
};

class GlfwWindow {
 public:
  // Opens the window and sets ImGui up; throws Error("dash", ...) saying what to do when there is
  // no display or no OpenGL 3.
  explicit GlfwWindow(const WindowOptions& options);
  ~GlfwWindow();  // never throws
  GlfwWindow(const GlfwWindow&) = delete;
  GlfwWindow& operator=(const GlfwWindow&) = delete;

  bool should_close() const;
  // Polls input and starts an ImGui frame. For screenshots the pointer is placed (at `mouse_x`,
  // `mouse_y`, e.g. to show a tooltip) or taken away (negative), so wherever the real pointer
  // happens to be leaves no trace in the picture.
  void begin_frame();
  void begin_frame(float mouse_x, float mouse_y);
  // Sleeps until input arrives or `timeout_s` passes: an idle dashboard then costs no CPU (a
  // display's vsync would cap the frame rate, but Xvfb and some drivers have none).
  void wait_events(double timeout_s);
  // Ends the ImGui frame and draws it: into the window, or (capture) into an offscreen buffer
  // whose pixels are then returned by capture().
  void render(bool capture = false);
  void present();
  // The pixels of the last frame rendered with capture = true.
  Image capture() const;
  int width() const;
  int height() const;

 private:
  GLFWwindow* window_ = nullptr;
  bool glfw_up_ = false, imgui_glfw_ = false, imgui_gl_ = false;
  unsigned fbo_ = 0, color_rb_ = 0;
  int fbo_w_ = 0, fbo_h_ = 0;
  void ensure_offscreen(int w, int h);
  void release_offscreen() noexcept;
  void teardown() noexcept;
};

}  // namespace scalelab::viz
