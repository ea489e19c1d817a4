#include "apps/ravnest/loss_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace ravnest::cli {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

double number(const std::string& text, const std::string& where) {
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
    if (text == "nan" || text == "-nan") return std::nan("");
  }
  throw std::runtime_error(where + ": not a number: \"" + text.substr(0, 40) + "\"");
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
                          "#e377c2", "#17becf"};

}  // namespace

LossHistory parse_loss_history(int cluster, const std::string& losses,
                               const std::string& validation, const std::string& what) {
  LossHistory h;
  h.cluster = cluster;
  const auto loss_lines = lines_of(losses);
  for (size_t i = 0; i < loss_lines.size(); ++i) {
    h.losses.push_back(number(loss_lines[i], what + " losses.txt line " + std::to_string(i + 1)));
  }
  const auto rounds = lines_of(validation);
  for (size_t i = 0; i < rounds.size(); ++i) {
    const std::string where = what + " validation.txt line " + std::to_string(i + 1);
    std::istringstream in(rounds[i]);
    std::string updates, epoch, loss, accuracy, extra;
    if (!(in >> updates >> epoch >> loss >> accuracy) || (in >> extra)) {
      throw std::runtime_error(where + ": expected \"updates epoch loss accuracy\"");
    }
    LossHistory::Round r;
    r.updates = static_cast<uint64_t>(number(updates, where));
    r.epoch = static_cast<uint32_t>(number(epoch, where));
    r.loss = number(loss, where);
    // "-": no accuracy (not a classification); "nan" from leaves before 0.x wrote the same.
    r.accuracy = accuracy == "-" ? std::nan("") : number(accuracy, where);
    h.validation.push_back(r);
  }
  return h;
}

std::string loss_table(const std::vector<LossHistory>& clusters) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-8s %8s %10s %10s %10s %12s\n", "cluster", "batches", "first",
                "last", "lowest", "last-10 mean");
  out += line;
  for (const auto& h : clusters) {
    if (h.losses.empty() && !h.validation.empty()) continue;  // an evaluator: its rounds below
    if (h.losses.empty()) {
      std::snprintf(line, sizeof line, "%-8d %8d %10s %10s %10s %12s\n", h.cluster, 0, "-", "-", "-",
                    "-");
    } else {
      const size_t n = h.losses.size(), tail = std::min<size_t>(10, n);
      double mean = 0;
      for (size_t i = n - tail; i < n; ++i) mean += h.losses[i];
      std::snprintf(line, sizeof line, "%-8d %8zu %10.4f %10.4f %10.4f %12.4f\n", h.cluster, n,
                    h.losses.front(), h.losses.back(),
                    *std::min_element(h.losses.begin(), h.losses.end()), mean / tail);
    }
    out += line;
  }
  for (const auto& h : clusters) {
    for (const auto& r : h.validation) {
      if (std::isnan(r.accuracy)) {
        std::snprintf(line, sizeof line, "%s validation after %llu updates (epoch %u): loss %.4f\n",
                      h.label().c_str(), static_cast<unsigned long long>(r.updates), r.epoch + 1,
                      r.loss);
      } else {
        std::snprintf(line, sizeof line,
                      "%s validation after %llu updates (epoch %u): loss %.4f accuracy %.4f\n",
                      h.label().c_str(), static_cast<unsigned long long>(r.updates), r.epoch + 1,
                      r.loss, r.accuracy);
      }
      out += line;
    }
  }
  return out;
}

std::string loss_svg(const std::vector<LossHistory>& clusters, const std::string& title) {
  const double width = 800, height = 480, left = 70, right = 20, top = 40, bottom = 50;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  size_t batches = 1;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  auto take = [&](double v) {
    if (std::isfinite(v)) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  };
  for (const auto& h : clusters) {
    batches = std::max(batches, h.losses.size());
    for (double v : h.losses) take(v);
    for (const auto& r : h.validation) take(r.loss);
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi - lo < 1e-12) hi = lo + 1;
  const double pad = (hi - lo) * 0.05;
  lo -= pad;
  hi += pad;
  auto x_of = [&](double batch) { return left + plot_w * batch / std::max<double>(1, batches - 1); };
  auto y_of = [&](double v) { return top + plot_h * (hi - v) / (hi - lo); };
  auto fmt = [](double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", v);
    return std::string(text);
  };
  auto at = [](double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", v);
    return std::string(text);
  };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << ' ' << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << width / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
      << escape(title) << "</text>\n";
  // Axes, five ticks each.
  svg << "<g stroke=\"#888\" fill=\"none\"><rect x=\"" << left << "\" y=\"" << top << "\" width=\""
      << plot_w << "\" height=\"" << plot_h << "\"/></g>\n<g fill=\"#333\">\n";
  for (int i = 0; i <= 4; ++i) {
    const double v = lo + (hi - lo) * i / 4, y = y_of(v);
    svg << "<text x=\"" << left - 6 << "\" y=\"" << at(y + 4) << "\" text-anchor=\"end\">" << fmt(v)
        << "</text>\n";
    const double b = (batches - 1) * i / 4.0;
    svg << "<text x=\"" << at(x_of(b)) << "\" y=\"" << height - bottom + 18
        << "\" text-anchor=\"middle\">" << fmt(std::round(b) + 1) << "</text>\n";
  }
  svg << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 12
      << "\" text-anchor=\"middle\">batch</text>\n"
      << "<text x=\"16\" y=\"" << top + plot_h / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 16 "
      << top + plot_h / 2 << ")\">loss</text>\n</g>\n";
  for (size_t c = 0; c < clusters.size(); ++c) {
    const auto& h = clusters[c];
    const char* colour = kColours[c % (sizeof kColours / sizeof kColours[0])];
    if (!h.losses.empty()) {
      svg << "<polyline class=\"training\" data-cluster=\"" << h.cluster << "\" fill=\"none\" stroke=\""
          << colour << "\" stroke-width=\"1.5\" points=\"";
      for (size_t i = 0; i < h.losses.size(); ++i) {
        if (!std::isfinite(h.losses[i])) continue;
        svg << at(x_of(static_cast<double>(i))) << ',' << at(y_of(h.losses[i])) << ' ';
      }
      svg << "\"/>\n";
    }
    // A round after u updates ran after the batch that made the u-th update; with gradient
    // accumulation that is an estimate along the same axis (batches per update from the totals).
    const double per_update =
        // (An evaluator has no batches of its own: an update stands for a batch.)
        h.validation.empty() || h.validation.back().updates == 0 || h.losses.empty()
            ? 1.0
            : static_cast<double>(h.losses.size()) / static_cast<double>(h.validation.back().updates);
    for (const auto& r : h.validation) {
      if (!std::isfinite(r.loss)) continue;
      const double batch = std::max(0.0, r.updates * per_update - 1);
      svg << "<circle class=\"validation\" data-cluster=\"" << h.cluster << "\" cx=\"" << at(x_of(batch))
          << "\" cy=\"" << at(y_of(r.loss)) << "\" r=\"4\" fill=\"white\" stroke=\"" << colour
          << "\" stroke-width=\"2\"><title>" << escape(h.label()) << ", validation after "
          << r.updates << " updates: loss " << fmt(r.loss);
      if (!std::isnan(r.accuracy)) svg << ", accuracy " << fmt(r.accuracy);
      svg << "</title></circle>\n";
    }
    const double ly = top + 16 + 18 * c;
    svg << "<line x1=\"" << left + plot_w - 170 << "\" y1=\"" << ly << "\" x2=\"" << left + plot_w - 145
        << "\" y2=\"" << ly << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n"
        << "<text x=\"" << left + plot_w - 140 << "\" y=\"" << ly + 4 << "\">" << escape(h.label())
        << " (o validation)</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace ravnest::cli
