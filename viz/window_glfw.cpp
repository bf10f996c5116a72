#include "viz/window_glfw.h"

#include <GL/gl.h>
#include <GL/glext.h>
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>

#include <cfloat>
#include <string>

#include "core/error.h"
#include "viz/style.h"

namespace scalelab::viz {

namespace {

std::string g_last_glfw_error;
void on_glfw_error(int code, const char* description) {
  g_last_glfw_error = "GLFW error " + std::to_string(code) + ": " + (description ? description : "?");
}

// Framebuffer objects are OpenGL 3.0; libGL exports only 1.x by name, so they are looked up at
// run time (ImGui's backend does the same for its own calls with its private loader).
struct FboFunctions {
  PFNGLGENFRAMEBUFFERSPROC gen_framebuffers = nullptr;
  PFNGLBINDFRAMEBUFFERPROC bind_framebuffer = nullptr;
  PFNGLDELETEFRAMEBUFFERSPROC delete_framebuffers = nullptr;
  PFNGLGENRENDERBUFFERSPROC gen_renderbuffers = nullptr;
  PFNGLBINDRENDERBUFFERPROC bind_renderbuffer = nullptr;
  PFNGLDELETERENDERBUFFERSPROC delete_renderbuffers = nullptr;
  PFNGLRENDERBUFFERSTORAGEPROC renderbuffer_storage = nullptr;
  PFNGLFRAMEBUFFERRENDERBUFFERPROC framebuffer_renderbuffer = nullptr;
  PFNGLCHECKFRAMEBUFFERSTATUSPROC check_framebuffer_status = nullptr;
  bool ok() const {
    return gen_framebuffers && bind_framebuffer && delete_framebuffers && gen_renderbuffers && bind_renderbuffer &&
           delete_renderbuffers && renderbuffer_storage && framebuffer_renderbuffer && check_framebuffer_status;
  }
};
FboFunctions g_fbo;

template <typename F>
void load(F& f, const char* name) {
  f = reinterpret_cast<F>(glfwGetProcAddress(name));
}

const char* kHeadless = "run it under a display, or headless with: xvfb-run -a scalelab-dash ...";

}  // namespace

GlfwWindow::GlfwWindow(const WindowOptions& options) {
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit())
    throw Error("dash", "cannot open a window (" + (g_last_glfw_error.empty() ? std::string("glfwInit failed") : g_last_glfw_error) +
                            ") — " + kHeadless);
  glfw_up_ = true;
  // OpenGL 3.3 core first (what ImGui's backend is written for); 3.0 if the driver has no core profile.
  struct Attempt { int major, minor; bool core; const char* glsl; };
  for (const Attempt& a : {Attempt{3, 3, true, "#version 330 core"}, Attempt{3, 0, false, "#version 130"}}) {
    glfwDefaultWindowHints();
    glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, a.major);
    glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, a.minor);
    if (a.core) {
      glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
      glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GLFW_TRUE);
    }
    window_ = glfwCreateWindow(options.width, options.height, options.title.c_str(), nullptr, nullptr);
    if (!window_) continue;
    glfwMakeContextCurrent(window_);
    glfwSwapInterval(options.vsync ? 1 : 0);

    IMGUI_CHECKVERSION();
    ImGui::CreateContext();
    apply_theme(options.font_px);
    imgui_glfw_ = ImGui_ImplGlfw_InitForOpenGL(window_, true);
    imgui_gl_ = imgui_glfw_ && ImGui_ImplOpenGL3_Init(a.glsl);
    if (!imgui_gl_) {
      const std::string why = "ImGui's OpenGL backend did not start with " + std::string(a.glsl);
      teardown();
      throw Error("dash", why + " — update the OpenGL driver (Mesa's llvmpipe is enough)");
    }
    load(g_fbo.gen_framebuffers, "glGenFramebuffers");
    load(g_fbo.bind_framebuffer, "glBindFramebuffer");
    load(g_fbo.delete_framebuffers, "glDeleteFramebuffers");
    load(g_fbo.gen_renderbuffers, "glGenRenderbuffers");
    load(g_fbo.bind_renderbuffer, "glBindRenderbuffer");
    load(g_fbo.delete_renderbuffers, "glDeleteRenderbuffers");
    load(g_fbo.renderbuffer_storage, "glRenderbufferStorage");
    load(g_fbo.framebuffer_renderbuffer, "glFramebufferRenderbuffer");
    load(g_fbo.check_framebuffer_status, "glCheckFramebufferStatus");
    return;
  }
  const std::string why = g_last_glfw_error.empty() ? "no OpenGL 3 context" : g_last_glfw_error;
  teardown();
  throw Error("dash", "cannot open a window (" + why + ") — " + kHeadless);
}

GlfwWindow::~GlfwWindow() { teardown(); }

void GlfwWindow::teardown() noexcept {
  // In reverse order of set-up; nothing here throws, and a half-built window tears down the same way.
  if (!window_ && !imgui_glfw_ && !imgui_gl_ && !glfw_up_) return;
  if (window_) glfwMakeContextCurrent(window_);
  release_offscreen();
  if (imgui_gl_) ImGui_ImplOpenGL3_Shutdown();
  if (imgui_glfw_) ImGui_ImplGlfw_Shutdown();
  if (ImGui::GetCurrentContext()) ImGui::DestroyContext();
  imgui_gl_ = imgui_glfw_ = false;
  if (window_) glfwDestroyWindow(window_);
  window_ = nullptr;
  if (glfw_up_) glfwTerminate();
  glfw_up_ = false;
}

bool GlfwWindow::should_close() const { return glfwWindowShouldClose(window_) != 0; }

int GlfwWindow::width() const {
  int w = 0, h = 0;
  glfwGetWindowSize(window_, &w, &h);
  return w;
}

int GlfwWindow::height() const {
  int w = 0, h = 0;
  glfwGetWindowSize(window_, &w, &h);
  return h;
}

void GlfwWindow::begin_frame() {
  glfwPollEvents();
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  ImGui::NewFrame();
}

void GlfwWindow::wait_events(double timeout_s) { glfwWaitEventsTimeout(timeout_s); }

void GlfwWindow::begin_frame(float mouse_x, float mouse_y) {
  glfwPollEvents();
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  ImGui::GetIO().MousePos = mouse_x < 0 || mouse_y < 0 ? ImVec2(-FLT_MAX, -FLT_MAX) : ImVec2(mouse_x, mouse_y);
  ImGui::NewFrame();
}

void GlfwWindow::ensure_offscreen(int w, int h) {
  if (fbo_ && fbo_w_ == w && fbo_h_ == h) return;
  release_offscreen();
  if (!g_fbo.ok()) throw Error("dash", "screenshot: this OpenGL has no framebuffer objects (needs OpenGL 3.0) — update the driver");
  g_fbo.gen_framebuffers(1, &fbo_);
  g_fbo.bind_framebuffer(GL_FRAMEBUFFER, fbo_);
  g_fbo.gen_renderbuffers(1, &color_rb_);
  g_fbo.bind_renderbuffer(GL_RENDERBUFFER, color_rb_);
  g_fbo.renderbuffer_storage(GL_RENDERBUFFER, GL_RGBA8, w, h);
  g_fbo.framebuffer_renderbuffer(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER, color_rb_);
  const GLenum status = g_fbo.check_framebuffer_status(GL_FRAMEBUFFER);
  g_fbo.bind_framebuffer(GL_FRAMEBUFFER, 0);
  fbo_w_ = w;
  fbo_h_ = h;
  if (status != GL_FRAMEBUFFER_COMPLETE)
    throw Error("dash", "screenshot: offscreen framebuffer " + std::to_string(w) + "x" + std::to_string(h) +
                            " incomplete (status " + std::to_string(status) + ") — try a smaller --size");
}

void GlfwWindow::release_offscreen() noexcept {
  if (fbo_ && g_fbo.ok()) {
    g_fbo.delete_framebuffers(1, &fbo_);
    g_fbo.delete_renderbuffers(1, &color_rb_);
  }
  fbo_ = color_rb_ = 0;
  fbo_w_ = fbo_h_ = 0;
}

void GlfwWindow::render(bool capture) {
  ImGui::Render();
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  if (capture) {
    ensure_offscreen(w, h);
    g_fbo.bind_framebuffer(GL_FRAMEBUFFER, fbo_);
  }
  glViewport(0, 0, w, h);
  glClearColor(0.06f, 0.065f, 0.075f, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  if (capture) g_fbo.bind_framebuffer(GL_FRAMEBUFFER, 0);
}

void GlfwWindow::present() { glfwSwapBuffers(window_); }

Image GlfwWindow::capture() const {
  Image img;
  if (!fbo_) return img;
  img.width = fbo_w_;
  img.height = fbo_h_;
  std::vector<uint8_t> bottom_up(static_cast<size_t>(fbo_w_) * static_cast<size_t>(fbo_h_) * 3);
  g_fbo.bind_framebuffer(GL_FRAMEBUFFER, fbo_);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, fbo_w_, fbo_h_, GL_RGB, GL_UNSIGNED_BYTE, bottom_up.data());
  g_fbo.bind_framebuffer(GL_FRAMEBUFFER, 0);
  // OpenGL's first row is the bottom one; PNG's is the top.
  img.rgb.resize(bottom_up.size());
  const size_t stride = static_cast<size_t>(fbo_w_) * 3;
  for (int y = 0; y < fbo_h_; ++y)
    std::copy_n(bottom_up.data() + stride * static_cast<size_t>(fbo_h_ - 1 - y), stride, img.rgb.data() + stride * static_cast<size_t>(y));
  return img;
}

}  // namespace scalelab::viz
