// Where in the user's program a collective was asked for (issue 43: "every collective with the
// user's call site"). A C++ library cannot see its caller's line unless the caller passes it, so
// the site is what the program names: a dax::NamedScope (JAX's jax.named_scope, PyTorch's
// record_function) opened in the user's code, with the line that opened it, and the explicit
// moves that take the caller's line themselves (a defaulted dax::SourceLine, std::source_location's
// counterpart): dax::reshard and the shard_map collectives (psum, all_gather, ppermute, ...).
// comm_stats().by_site(), dax::profile's collective events and dax::simulate's report carry it;
// the tape replays a forward's site around its backward, so a gradient's collectives are
// attributed to the scope whose forward they transpose.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dax {

/// The caller's file and line, as std::source_location::current() gives them, written with the
/// builtins g++, clang and nvcc share (clang 14 with libstdc++ 12 has no std::source_location):
/// as a defaulted parameter, current() is evaluated where the call is written.
struct SourceLine {
  const char* file = "";
  int line = 0;
  static constexpr SourceLine current(const char* file = __builtin_FILE(), int line = __builtin_LINE()) noexcept {
    return {file, line};
  }
};

namespace detail {

/// One open frame: the names from the outermost scope in ("attention/psum") and the innermost
/// user line ("model.cpp:42").
struct SiteFrame {
  std::string path, where;
  std::shared_ptr<const std::string> label;  // "path @ where", made once (the tape shares it per op); null: ""
};
inline std::vector<SiteFrame>& site_stack() {
  thread_local std::vector<SiteFrame> stack;
  return stack;
}
/// Pushes a frame with its label (a frame's text is built once, not per op recorded under it).
inline void push_site(std::string path, std::string where) {
  auto label = path.empty() ? nullptr : std::make_shared<const std::string>(where.empty() ? path : path + " @ " + where);
  site_stack().push_back({std::move(path), std::move(where), std::move(label)});
}

/// Whether `file` is one of dax's own headers (a collective asked for by dax itself, e.g. pmean
/// calling psum, keeps the user's line of the frame around it): ".../dax/<layer>/<name>.hpp".
inline bool is_dax_source(const char* file) {
  // A call site's file name is a string literal: the last one asked about is remembered.
  thread_local const char* last = nullptr;
  thread_local bool last_is_dax = false;
  if (file == last) return last_is_dax;
  last = file;
  last_is_dax = false;
  const std::string_view f(file);
  if (!(f.ends_with(".hpp") || f.ends_with(".cuh"))) return false;
  for (const char* layer : {"dax/array/", "dax/autodiff/", "dax/backend/", "dax/comm/", "dax/compiled/", "dax/core/",
                            "dax/debug/", "dax/fft/", "dax/io/", "dax/manual/", "dax/nn/", "dax/linalg/", "dax/ops/", "dax/optim/",
                            "dax/parallel/", "dax/reshard/", "dax/runtime/", "dax/sharding/"})
    if (f.find(layer) != std::string_view::npos) return last_is_dax = true;
  return false;
}

inline std::string line_text(const SourceLine& at) {
  std::string_view file = at.file;
  const size_t slash = file.find_last_of('/');
  if (slash != std::string_view::npos) file.remove_prefix(slash + 1);
  return std::string(file) + ":" + std::to_string(at.line);
}

/// Pushes a frame for its lifetime: a named scope, an explicit move at the user's line, or a
/// recorded forward's site replayed around its backward. A move called from inside dax adds nothing.
class SiteScope {
 public:
  SiteScope(const char* name, const SourceLine& at) {
    if (is_dax_source(at.file)) return;
    auto& stack = site_stack();
    std::string path = stack.empty() || stack.back().path.empty() ? std::string(name) : stack.back().path + "/" + name;
    push_site(std::move(path), line_text(at));
    pushed_ = true;
  }
  /// A part of what dax runs for the caller (e.g. "gradients": value_and_grad's reduction of them
  /// to the parameters' shardings), named inside the frame around it, at that frame's line.
  struct Part {};
  SiteScope(Part, const char* name) {
    auto& stack = site_stack();
    if (stack.empty() || stack.back().path.empty()) push_site(name, "");
    else push_site(stack.back().path + "/" + name, stack.back().where);
    pushed_ = true;
  }
  /// The site `label` (current_site()'s text) again, with `mark` after it: a recorded forward's
  /// site around its backward (" (backward)"), a started exchange's where it is counted (""). An
  /// empty label (recorded outside every scope) hides the frames open now: "" again.
  explicit SiteScope(const std::string& label, std::string_view mark = " (backward)") {
    push_site(label.empty() ? std::string() : label + std::string(mark), "");
    pushed_ = true;
  }
  ~SiteScope() {
    if (pushed_) site_stack().pop_back();
  }
  SiteScope(const SiteScope&) = delete;
  SiteScope& operator=(const SiteScope&) = delete;

 private:
  bool pushed_ = false;
};

/// The innermost site as text ("attention/psum @ model.cpp:42"), or "" outside every scope.
inline std::string current_site() {
  const auto& stack = site_stack();
  return stack.empty() || !stack.back().label ? std::string() : *stack.back().label;
}
/// The same, shared (null outside every scope): what the tape keeps per recorded op.
inline std::shared_ptr<const std::string> current_site_label() {
  const auto& stack = site_stack();
  return stack.empty() ? nullptr : stack.back().label;
}

}  // namespace detail

/// Names the collectives run inside it, with the line that opened it, in comm_stats().by_site(),
/// dax::profile and dax::simulate's report (and their gradients' collectives, as "<name> (backward)"):
///
///   { dax::NamedScope scope("attention"); y = attention(x); }
///
/// Scopes nest ("block/attention"). The counterpart of jax.named_scope and torch's record_function.
class NamedScope {
 public:
  explicit NamedScope(const char* name, SourceLine at = SourceLine::current())
      : scope_(name, at) {}

 private:
  detail::SiteScope scope_;
};

}  // namespace dax
