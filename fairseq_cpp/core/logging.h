#pragma once
// Rank-aware logging on fmt. One line per message:
//   2026-11-22 17:03:11 | INFO | [trainer] epoch 001 | loss 4.21 | ...
// Only rank 0 logs DEBUG/INFO unless `all_ranks`; warnings and errors come from every rank and,
// in a multi-process run, carry "rank N" so they can be told apart.
//
//   log::info("data", "loaded {} sentences from {}", n, path);

#include <string>
#include <string_view>
#include <utility>

#include <fmt/core.h>

namespace fairseq_cpp::log {

enum class Level { debug = 0, info = 1, warning = 2, error = 3 };

struct LogOptions {
  Level level = Level::info;  // lowest level written
  int rank = 0;               // this process's rank
  int world_size = 1;         // processes in the job; > 1 adds "rank N" to lines from other ranks
  bool all_ranks = false;     // every rank writes INFO, not only rank 0
  std::string file;           // also append every line here; empty = stderr only
};

// Replaces the process-wide options (thread-safe; opens `file` for appending, throws on failure).
void configure(const LogOptions& options);
const LogOptions& options();
bool enabled(Level level);
// Writes one formatted line; `tag` is the subsystem ("trainer", "data", ...), may be empty.
void write(Level level, std::string_view tag, std::string_view message);
// "2026-11-22 17:03:11 | INFO | [trainer] message": the line `write` would produce, without newline.
std::string format_line(Level level, std::string_view tag, std::string_view message);
// Appends one line to `LogOptions::file` only, not to stderr (no-op without a file or when
// `level` is not enabled): a live progress bar's periodic lines, kept for tools/plot-log.
void write_file_only(Level level, std::string_view tag, std::string_view message);
// While a live progress bar owns the terminal's last line, log lines first erase it.
void set_live_line(bool active);

template <typename... Args>
void debug(std::string_view tag, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::debug)) write(Level::debug, tag, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(std::string_view tag, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::info)) write(Level::info, tag, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warning(std::string_view tag, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::warning)) write(Level::warning, tag, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(std::string_view tag, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::error)) write(Level::error, tag, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace fairseq_cpp::log
