#include "libs/config/job/prediction_job.h"

#include <sstream>

#include <toml++/toml.h>

#include "libs/base/config_error.h"
#include "libs/config/job/job_spec.h"
#include "libs/base/toml_error.h"

namespace ravnest::config {

std::string prediction_job_text(const std::string& job_toml, const std::string& origin,
                                const std::string& data_path, std::optional<int64_t> batch_size) {
  parse_job(job_toml, origin);  // its errors, as for training
  if (batch_size && *batch_size < 1) {
    throw base::ConfigError("--batch-size: must be at least 1, got " + std::to_string(*batch_size));
  }
  toml::table root = toml::parse(job_toml, origin);
  auto* data = root.get_as<toml::table>("data");
  data->insert_or_assign("train", data_path);
  data->erase("validation");
  data->erase("order");  // the training epochs' order: the data to predict on is read in order
  auto* train = root.get_as<toml::table>("train");
  if (!train) {
    root.insert_or_assign("train", toml::table{});
    train = root.get_as<toml::table>("train");
  }
  for (const char* key : {"max_steps", "val_freq", "save_every", "reduce_factor", "reduce",
                          "average_optim", "max_in_flight", "update_frequency"}) {
    train->erase(key);
  }
  train->insert_or_assign("epochs", 1);
  train->insert_or_assign("shuffle", false);
  if (batch_size) {
    train->insert_or_assign("batch_size", *batch_size);
    // Micro-batches cannot outnumber the samples of a batch.
    if (const auto micro = (*train)["micro_batches"].value<int64_t>(); micro && *micro > *batch_size) {
      train->insert_or_assign("micro_batches", *batch_size);
    }
  }
  for (const char* table : {"scheduler", "ps", "sparse_optimizer"}) root.erase(table);
  root.insert_or_assign("predict", toml::table{});
  std::ostringstream out;
  out << "# ravnest predict: " << origin << " predicting on " << data_path << "\n" << root << "\n";
  parse_job(out.str(), origin);  // what the nodes will read
  return out.str();
}

}  // namespace ravnest::config
