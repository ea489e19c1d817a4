// read_csv(): comma-separated numbers, plain or gzipped (dataset.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <string_view>

#include <ATen/ATen.h>

#include "libs/data/dataset.h"
#include "libs/data/reader_internal.h"

namespace ravnest::data {
namespace {

using detail::fail;
using detail::shape_text;

std::string shorten(const std::string& text, size_t limit = 40) {
  return text.size() <= limit ? text : text.substr(0, limit) + "...";
}

std::string trim(std::string_view text) {
  size_t begin = 0, end = text.size();
  while (begin < end && (text[begin] == ' ' || text[begin] == '\t')) ++begin;
  while (end > begin && (text[end - 1] == ' ' || text[end - 1] == '\t')) --end;
  std::string out(text.substr(begin, end - begin));
  if (out.size() >= 2 && out.front() == '"' && out.back() == '"') out = out.substr(1, out.size() - 2);
  return out;
}

void split_fields(std::string_view line, std::vector<std::string_view>* fields) {
  fields->clear();
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      fields->push_back(line.substr(start));
      return;
    }
    fields->push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
}

bool parse_double(std::string_view text, double* value) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return false;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), *value);
  return result.ec == std::errc() && result.ptr == text.data() + text.size() && std::isfinite(*value);
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

Dataset read_csv(const std::string& path, const CsvOptions& options) {
  const std::string text = read_maybe_gzip(path);
  std::vector<std::string_view> fields;
  std::vector<std::string> names;
  size_t columns = 0;
  int64_t label_col = -1;
  std::vector<float> features;
  std::vector<double> labels;
  std::vector<int64_t> label_lines;
  bool integral_labels = true;
  int64_t line_no = 0;

  auto resolve_label = [&](size_t ncols) {
    if (!options.label_column.empty()) {
      auto it = std::find(names.begin(), names.end(), options.label_column);
      if (it == names.end()) {
        std::string list;
        for (size_t i = 0; i < names.size(); ++i) {
          if (i == 3 && names.size() > 6) {
            list += ", ...";
            i = names.size() - 3;
          }
          list += (list.empty() ? "" : ", ") + shorten(names[i], 20);
        }
        fail(path, "no column named '" + options.label_column + "' in the header (" + list + ")");
      }
      label_col = it - names.begin();
    } else {
      int64_t index = options.label_index < 0 ? static_cast<int64_t>(ncols) + options.label_index
                                              : options.label_index;
      if (index < 0 || index >= static_cast<int64_t>(ncols)) {
        fail(path, "label column index " + std::to_string(options.label_index) +
                       " is out of range: the file has " + std::to_string(ncols) + " columns");
      }
      label_col = index;
    }
    if (ncols < 2) fail(path, "needs a label column and at least one feature column, got " +
                                  std::to_string(ncols) + " column");
  };

  size_t pos = 0;
  bool seen_header = !options.header;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    split_fields(line, &fields);
    if (!seen_header) {
      seen_header = true;
      for (auto f : fields) names.push_back(trim(f));
      columns = fields.size();
      resolve_label(columns);
      continue;
    }
    if (columns == 0) {
      columns = fields.size();
      resolve_label(columns);
    }
    if (fields.size() != columns) {
      fail(path, "line " + std::to_string(line_no) + ": expected " + std::to_string(columns) +
                     " columns, got " + std::to_string(fields.size()));
    }
    for (size_t c = 0; c < columns; ++c) {
      double value;
      if (!parse_double(fields[c], &value)) {
        std::string column = "column " + std::to_string(c + 1);
        if (!names.empty()) column += " ('" + shorten(names[c], 20) + "')";
        fail(path, "line " + std::to_string(line_no) + ", " + column + ": non-numeric value '" +
                       shorten(trim(fields[c])) + "'");
      }
      if (static_cast<int64_t>(c) == label_col) {
        labels.push_back(value);
        label_lines.push_back(line_no);
        if (value != std::floor(value) || std::fabs(value) > 9e15) integral_labels = false;
      } else {
        features.push_back(static_cast<float>(value));
      }
    }
  }
  if (labels.empty()) fail(path, "empty dataset (no data rows)");

  const int64_t rows = static_cast<int64_t>(labels.size());
  const int64_t per_row = static_cast<int64_t>(columns) - 1;
  if (options.num_classes > 0) {
    for (int64_t r = 0; r < rows; ++r) {
      const double v = labels[r];
      if (v != std::floor(v) || v < 0 || v >= static_cast<double>(options.num_classes)) {
        std::ostringstream value;
        value << v;
        fail(path, "row " + std::to_string(r + 1) + " (line " + std::to_string(label_lines[r]) +
                       "): label " + value.str() + " is out of range [0, " +
                       std::to_string(options.num_classes) + ")");
      }
    }
  }
  std::vector<int64_t> shape = options.input_shape.empty() ? std::vector<int64_t>{per_row} : options.input_shape;
  if (product(shape) != per_row) {
    fail(path, "input_shape " + shape_text(shape) + " holds " + std::to_string(product(shape)) +
                   " values but each row has " + std::to_string(per_row) + " features");
  }
  std::vector<int64_t> full{rows};
  full.insert(full.end(), shape.begin(), shape.end());
  at::Tensor x = at::from_blob(features.data(), full, at::TensorOptions().dtype(at::kFloat)).clone();
  if (options.scale != 1.0) x = x.mul(options.scale);
  at::Tensor y;
  if (integral_labels) {
    y = at::empty({rows}, at::TensorOptions().dtype(at::kLong));
    int64_t* out = y.data_ptr<int64_t>();
    for (int64_t r = 0; r < rows; ++r) out[r] = static_cast<int64_t>(labels[r]);
  } else {
    y = at::from_blob(labels.data(), {rows}, at::TensorOptions().dtype(at::kDouble)).to(at::kFloat);
  }
  return Dataset({x}, y, path);
}

}  // namespace ravnest::data
