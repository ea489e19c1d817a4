#include "libs/requester/metrics_csv.h"

#include <cmath>
#include <filesystem>
#include <sstream>
#include <stdexcept>

namespace ravnest::requester {
namespace {

void cell(std::ostringstream& out, const std::optional<double>& value) {
  out << ',';
  if (value && std::isfinite(*value)) out << *value;
}

}  // namespace

const char* MetricsCsv::header() { return "wall_time,step,epoch,loss,lr,val_loss,val_accuracy"; }

std::string MetricsCsv::line(const MetricsRow& row) {
  std::ostringstream out;
  out.precision(17);
  out << row.wall_time << ',' << row.step << ',' << row.epoch;
  cell(out, row.loss);
  cell(out, row.lr);
  cell(out, row.val_loss);
  cell(out, row.val_accuracy);
  out << '\n';
  return out.str();
}

MetricsCsv::MetricsCsv(const std::string& path) : path_(path) {
  std::error_code ec;
  const bool fresh = !std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0;
  out_.open(path, std::ios::binary | std::ios::app);
  if (!out_) throw std::runtime_error(path + ": cannot create the metrics file");
  if (fresh) {
    out_ << header() << '\n';
    out_.flush();
  }
}

void MetricsCsv::append(const MetricsRow& row) {
  out_ << line(row);
  out_.flush();
  if (!out_) throw std::runtime_error(path_ + ": cannot write the metrics file");
}

}  // namespace ravnest::requester
