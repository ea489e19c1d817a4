// GradScaler: the dynamic loss scale of fp16 autocast, as torch.amp.GradScaler keeps it (by
// default init_scale 2^16, growth_factor 2, backoff_factor 0.5, growth_interval 2000; the job's
// [train] scaler_* keys set them). The loss is
// multiplied by scale() before its backward; unscale() multiplies the gradients by
// 1/scale (as a float, exactly as _amp_foreach_non_finite_check_and_unscale_) and says whether
// any was inf or nan; after the update, update(found_inf) backs the scale off (found: the step
// was skipped) or, after growth_interval steps in a row without, grows it.
//
// In a pipeline every stage keeps one, and they stay equal: found_inf is the one every stage
// agreed on (any stage's). Not thread-safe; the compute thread's. Throws what LibTorch throws.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ravnest::training {

class GradScaler {
 public:
  struct Options {
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
  };
  GradScaler() : GradScaler(Options{}) {}
  // The scale starts at init_scale rounded to a float, as PyTorch's float32 tensor holds it.
  explicit GradScaler(Options options)
      : options_(options), scale_(static_cast<float>(options.init_scale)) {}

  // The scale, a float32 value as PyTorch keeps it.
  double scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  // Multiplies every defined gradient by 1/scale; true when any of them holds an inf or a nan.
  bool unscale(const std::vector<at::Tensor>& grads) const;
  // After the step (taken or skipped): _amp_update_scale_'s rule.
  void update(bool found_inf);
  // Where a checkpoint left them (as GradScaler.load_state_dict): a resumed job goes on with the
  // same scale and the same count towards its next growth.
  void restore(double scale, int64_t growth_tracker) {
    scale_ = static_cast<float>(scale);
    growth_tracker_ = growth_tracker;
  }

 private:
  Options options_;
  double scale_;
  int64_t growth_tracker_ = 0;
};

}  // namespace ravnest::training
