#include "libs/data/epoch_orders.h"

#include <stdexcept>

#include <ATen/ATen.h>

#include "libs/data/reader_internal.h"

namespace ravnest::data {

namespace {

[[noreturn]] void order_error(const std::string& path, const std::string& message) {
  throw std::runtime_error("data.order: " + path + ": " + message);
}

}  // namespace

std::vector<std::vector<int64_t>> read_epoch_orders(const std::string& path, int64_t dataset_size,
                                                    int64_t epochs) {
  std::vector<at::Tensor> rows;
  try {
    const std::vector<at::Tensor> saved = detail::read_saved_tensors(path);
    if (saved.size() == 1 && saved[0].dim() == 2) {
      for (int64_t e = 0; e < saved[0].size(0); ++e) rows.push_back(saved[0][e]);
    } else if (saved.size() == 1 && saved[0].dim() != 1) {
      order_error(path, "holds a tensor " + detail::shape_text(saved[0].sizes().vec()) +
                            ", expected [epochs, n] (or a list of 1-D tensors, one per epoch)");
    } else {
      rows = saved;
    }
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).rfind("data.order: ", 0) == 0) throw;  // ours
    throw std::runtime_error(std::string("data.order: ") + e.what());
  }
  std::vector<std::vector<int64_t>> orders;
  for (size_t e = 0; e < rows.size(); ++e) {
    const at::Tensor& row = rows[e];
    const std::string epoch = "epoch " + std::to_string(e);
    if (!at::isIntegralType(row.scalar_type(), /*includeBool=*/false)) {
      order_error(path, epoch + ": indices of dtype " + std::string(c10::toString(row.scalar_type())) +
                     ", expected an integer tensor (int64)");
    }
    if (row.dim() != 1) {
      order_error(path, epoch + ": a tensor of " + std::to_string(row.dim()) +
                     " dimensions, expected one row of sample indices (a tensor [epochs, n] or "
                     "a list of 1-D tensors)");
    }
    if (row.size(0) != dataset_size) {
      order_error(path, epoch + " orders " + std::to_string(row.size(0)) +
                     " samples, the training data has " + std::to_string(dataset_size) +
                     " (each epoch must order every sample once)");
    }
    const at::Tensor values = row.to(at::kLong).contiguous();
    const int64_t* p = values.data_ptr<int64_t>();
    std::vector<int64_t> order(p, p + dataset_size);
    std::vector<bool> seen(static_cast<size_t>(dataset_size), false);
    for (size_t i = 0; i < order.size(); ++i) {
      const int64_t index = order[i];
      if (index < 0 || index >= dataset_size) {
        order_error(path, epoch + ", position " + std::to_string(i) + ": index " +
                       std::to_string(index) + " is out of range [0, " +
                       std::to_string(dataset_size) + ")");
      }
      if (seen[static_cast<size_t>(index)]) {
        order_error(path, epoch + ", position " + std::to_string(i) + ": index " +
                       std::to_string(index) + " is repeated (each epoch orders every sample once)");
      }
      seen[static_cast<size_t>(index)] = true;
    }
    orders.push_back(std::move(order));
  }
  if (static_cast<int64_t>(orders.size()) < epochs) {
    order_error(path, "holds " + std::to_string(orders.size()) + " epoch orders, the job trains " +
                   std::to_string(epochs) + " epochs");
  }
  return orders;
}

std::vector<std::vector<int64_t>> cluster_part(const std::vector<std::vector<int64_t>>& orders,
                                               int shards, int shard) {
  if (shards < 1 || shard < 0 || shard >= shards) {
    throw std::invalid_argument("cluster_part: shard " + std::to_string(shard) + " of " +
                                std::to_string(shards));
  }
  std::vector<std::vector<int64_t>> out;
  for (const auto& order : orders) {
    const size_t per = order.size() / static_cast<size_t>(shards);
    if (per == 0) {
      throw std::invalid_argument("the dataset has " + std::to_string(order.size()) +
                                  " samples, fewer than the " + std::to_string(shards) +
                                  " clusters");
    }
    const auto begin = order.begin() + static_cast<std::ptrdiff_t>(per * shard);
    out.emplace_back(begin, begin + static_cast<std::ptrdiff_t>(per));
  }
  return out;
}

}  // namespace ravnest::data
