// read_csv(): comma-separated numbers, plain or gzipped (dataset.h). Three phases: the rows
// are parsed (header, label column, every field a number), then checked as a whole (not empty,
// labels within num_classes), then become tensors shaped by input_shape.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>
#include <string_view>

#include <ATen/ATen.h>

#include "libs/base/printable.h"
#include "libs/data/dataset.h"
#include "libs/data/reader_internal.h"

namespace ravnest::data {
namespace {

using detail::fail;
using detail::shape_text;

// Text of the file as messages show it: at most `limit` bytes, one line (base::printable).
std::string shorten(const std::string& text, size_t limit = 40) {
  return base::printable(text, limit);
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

// -1 when it does not fit in 63 bits (an input_shape like [2^32, 2^32]).
int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

// What the parse keeps of a CSV file: the features row after row, and each row's label.
struct CsvRows {
  std::vector<std::string> names;  // from the header, when there is one
  size_t columns = 0;
  int64_t label_col = -1;
  std::vector<float> features;
  std::vector<double> labels;
  std::vector<int64_t> label_lines;  // the line each label came from, for messages
  bool integral_labels = true;
  int64_t count = 0;  // rows (with or without a label)
};

// The label column among `ncols`, by name (in the header) or by index.
int64_t resolve_label_column(const std::string& path, const std::vector<std::string>& names,
                             size_t ncols, const CsvOptions& options) {
  int64_t label_col = -1;
  if (options.labels_optional) {
    // A file to predict on may lack the label column: its name is not in the header, or every
    // column is a feature of input_shape.
    if (!options.label_column.empty() &&
        std::find(names.begin(), names.end(), options.label_column) == names.end()) {
      return -1;
    }
    if (options.label_column.empty() && !options.input_shape.empty() &&
        product(options.input_shape) == static_cast<int64_t>(ncols)) {
      return -1;
    }
  }
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
      fail(path, "no column named '" + shorten(options.label_column, 80) + "' in the header (" +
                     list + ")");
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
  return label_col;
}

// Every non-blank line: the header (when expected) names the columns, every other line is a row
// of as many numbers as the first row has.
CsvRows parse_rows(const std::string& path, const std::string& text, const CsvOptions& options) {
  CsvRows rows;
  std::vector<std::string_view> fields;
  int64_t line_no = 0;
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
      for (auto f : fields) rows.names.push_back(trim(f));
      rows.columns = fields.size();
      rows.label_col = resolve_label_column(path, rows.names, rows.columns, options);
      continue;
    }
    if (rows.columns == 0) {
      rows.columns = fields.size();
      rows.label_col = resolve_label_column(path, rows.names, rows.columns, options);
    }
    if (fields.size() != rows.columns) {
      fail(path, "line " + std::to_string(line_no) + ": expected " + std::to_string(rows.columns) +
                     " columns, got " + std::to_string(fields.size()));
    }
    for (size_t c = 0; c < rows.columns; ++c) {
      double value;
      if (!parse_double(fields[c], &value)) {
        std::string column = "column " + std::to_string(c + 1);
        if (!rows.names.empty()) column += " ('" + shorten(rows.names[c], 20) + "')";
        fail(path, "line " + std::to_string(line_no) + ", " + column + ": non-numeric value '" +
                       shorten(trim(fields[c])) + "'");
      }
      // A feature becomes float32, and so does a label beyond int64's exact integers: 1e39
      // would become inf there, and NaN weights after it.
      if (std::fabs(value) > std::numeric_limits<float>::max()) {
        std::string column = "column " + std::to_string(c + 1);
        if (!rows.names.empty()) column += " ('" + shorten(rows.names[c], 20) + "')";
        fail(path, "line " + std::to_string(line_no) + ", " + column + ": " +
                       shorten(trim(fields[c])) + " does not fit in float32 (at most " +
                       "3.4e38 in magnitude)");
      }
      if (static_cast<int64_t>(c) == rows.label_col) {
        rows.labels.push_back(value);
        rows.label_lines.push_back(line_no);
        if (value != std::floor(value) || std::fabs(value) > 9e15) rows.integral_labels = false;
      } else {
        rows.features.push_back(static_cast<float>(value));
      }
    }
    ++rows.count;
  }
  return rows;
}

void check_label_classes(const std::string& path, const CsvRows& rows, int64_t num_classes) {
  if (num_classes <= 0) return;
  for (size_t r = 0; r < rows.labels.size(); ++r) {
    const double v = rows.labels[r];
    if (v != std::floor(v) || v < 0 || v >= static_cast<double>(num_classes)) {
      std::ostringstream value;
      value << v;
      fail(path, "row " + std::to_string(r + 1) + " (line " + std::to_string(rows.label_lines[r]) +
                     "): label " + value.str() + " is out of range [0, " +
                     std::to_string(num_classes) + ")");
    }
  }
}

// [rows, input_shape...] float32, scaled.
at::Tensor feature_tensor(const std::string& path, CsvRows& rows, const CsvOptions& options) {
  const auto count = rows.count;
  const int64_t per_row = static_cast<int64_t>(rows.columns) - (rows.label_col >= 0 ? 1 : 0);
  std::vector<int64_t> shape =
      options.input_shape.empty() ? std::vector<int64_t>{per_row} : options.input_shape;
  const int64_t values = product(shape);
  if (values != per_row) {
    fail(path, "input_shape " + shape_text(shape) + " holds " +
                   (values < 0 ? std::string("more than 2^63") : std::to_string(values)) +
                   " values but each row has " + std::to_string(per_row) + " features");
  }
  std::vector<int64_t> full{count};
  full.insert(full.end(), shape.begin(), shape.end());
  at::Tensor x =
      at::from_blob(rows.features.data(), full, at::TensorOptions().dtype(at::kFloat)).clone();
  if (options.scale != 1.0) {
    x = x.mul(options.scale);
    // Each value fits float32 (parse_rows), its product with the scale may not.
    if (!x.isfinite().all().item<bool>()) {
      std::ostringstream scale;
      scale << options.scale;
      fail(path, "scale " + scale.str() + " makes a value overflow float32 (at most 3.4e38 in "
                 "magnitude)");
    }
  }
  return x;
}

// int64 when every label is an integer, else float32.
at::Tensor label_tensor(CsvRows& rows) {
  const auto count = static_cast<int64_t>(rows.labels.size());
  if (rows.label_col < 0) return at::zeros({rows.count}, at::kLong);  // none: read and ignored
  if (rows.integral_labels) {
    at::Tensor y = at::empty({count}, at::TensorOptions().dtype(at::kLong));
    int64_t* out = y.data_ptr<int64_t>();
    for (int64_t r = 0; r < count; ++r) out[r] = static_cast<int64_t>(rows.labels[r]);
    return y;
  }
  return at::from_blob(rows.labels.data(), {count}, at::TensorOptions().dtype(at::kDouble))
      .to(at::kFloat);
}

}  // namespace

Dataset read_csv(const std::string& path, const CsvOptions& options) {
  CsvRows rows = parse_rows(path, read_maybe_gzip(path), options);
  if (rows.count == 0) fail(path, "empty dataset (no data rows)");
  check_label_classes(path, rows, options.num_classes);
  at::Tensor x = feature_tensor(path, rows, options);
  return Dataset({x}, label_tensor(rows), path);
}

}  // namespace ravnest::data
