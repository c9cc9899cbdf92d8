#include "fairseq_cpp/core/logging.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::log {
namespace {

struct State {
  std::mutex mutex;
  LogOptions options;
  std::FILE* file = nullptr;
  bool live_line = false;
};

State& state() {
  static State s;
  return s;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::debug:
      return "DEBUG";
    case Level::info:
      return "INFO";
    case Level::warning:
      return "WARNING";
    case Level::error:
      return "ERROR";
  }
  return "?";
}

std::string timestamp() {
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// Appends a finished line to the log file, if there is one; the caller holds s.mutex.
void append_to_file(State& s, const std::string& line) {
  if (s.file == nullptr) return;
  std::fwrite(line.data(), 1, line.size(), s.file);
  std::fflush(s.file);
}

}  // namespace

void configure(const LogOptions& options) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.file != nullptr) {
    std::fclose(s.file);
    s.file = nullptr;
  }
  if (!options.file.empty()) {
    s.file = std::fopen(options.file.c_str(), "a");
    if (s.file == nullptr)
      raise<UserError>("cannot open log file `{}` for appending: {}", options.file, std::strerror(errno));
  }
  s.options = options;
}

void set_live_line(bool active) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.live_line = active;
}

const LogOptions& options() { return state().options; }

bool enabled(Level level) {
  const LogOptions& o = state().options;
  if (level < o.level) return false;
  return level >= Level::warning || o.rank == 0 || o.all_ranks;
}

std::string format_line(Level level, std::string_view tag, std::string_view message) {
  const LogOptions& o = state().options;
  std::string rank = o.world_size > 1 && (o.rank != 0 || o.all_ranks) ? fmt::format("rank {} | ", o.rank) : "";
  std::string subsystem = tag.empty() ? "" : fmt::format("[{}] ", tag);
  return fmt::format("{} | {} | {}{}{}", timestamp(), level_name(level), rank, subsystem, message);
}

void write(Level level, std::string_view tag, std::string_view message) {
  std::string line = format_line(level, tag, message);
  line += '\n';
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.live_line) std::fputs("\r\033[K", stderr);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  append_to_file(s, line);
}

void write_file_only(Level level, std::string_view tag, std::string_view message) {
  if (!enabled(level)) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.file == nullptr) return;
  append_to_file(s, format_line(level, tag, message) + '\n');
}

}  // namespace fairseq_cpp::log
