#include "apps/ravnest/live_lines.h"

#include <unistd.h>

#include <iostream>

#include "apps/ravnest/commands/console.h"

namespace ravnest::cli {

LiveLines::LiveLines() : tty_(::isatty(STDOUT_FILENO)) {}

void LiveLines::draw(const std::vector<std::string>& lines, bool force) {
  if (!tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && drawn_ && now - last_drawn_ < std::chrono::milliseconds(100)) return;
  last_drawn_ = now;
  // Up over what was drawn, then each line cleared and written over it.
  if (drawn_) std::cout << "\033[" << drawn_ << "A";
  for (const auto& line : lines) std::cout << "\033[2K" << line << '\n';
  // Fewer lines than before: clear what is left below.
  if (lines.size() < drawn_) std::cout << "\033[J";
  drawn_ = lines.size();
  shown_ = lines;
  std::cout << std::flush;
}

void LiveLines::clear() {
  shown_.clear();
  if (tty_ && drawn_) std::cout << "\033[" << drawn_ << "A\033[J" << std::flush;
  drawn_ = 0;
}

void LiveLines::say(const std::string& line) {
  const std::vector<std::string> shown = drawn_ ? shown_ : std::vector<std::string>{};
  clear();
  cli::say(line);
  // The live lines stay below the log, as they were, until the next draw.
  if (!shown.empty()) draw(shown, true);
}

}  // namespace ravnest::cli
