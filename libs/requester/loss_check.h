// The job's loss tried on the model's output before anything is shipped: a [loss] that does not
// take what the model returns against the data's labels ([N, T, V] logits against labels of
// another shape, a script loss that throws) is one line at the requester, not a failure of the
// leaf at its first batch after the data travelled.
//
// Runs the stages of the plan's first cluster here, in eval mode and without autograd, on the
// first sample of the training data (StageChain, the check behind clusterize --verify), so it
// holds one cluster's weights in this process for a moment; skipped (logged) when those stage
// files are more than a quarter of this machine's memory. Calling thread; blocks for one
// forward.
#pragma once

#include <functional>
#include <string>

#include "libs/config/job/job_spec.h"
#include "libs/data/dataset.h"
#include "libs/requester/requester.h"

namespace ravnest::requester {

// Throws std::runtime_error "<job file>: [loss] ... (output [..], labels [..])" when the loss
// refuses. Where the model itself cannot run here (a stage only a daemon's device runs, a hybrid
// plan whose tables live on servers), logs why the check was skipped and returns: the nodes
// will tell.
void check_loss_on_first_sample(const Plan& plan, const config::JobSpec& job,
                                const data::Dataset& train, const std::string& job_path,
                                const std::function<void(const std::string&)>& log);

}  // namespace ravnest::requester
