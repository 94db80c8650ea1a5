// Analytic cost of a plan on a topology, read off its schedule: compute time from each block's
// FLOPs and the calibrated kernel throughput; communication as latency + bytes / bandwidth along
// the route, where flows of one flow set that share a link (NIC, NVLink, fabric) divide its
// bandwidth; overlap from the dependencies (the critical path through the four streams).
// Memory per GPU from the schedule's buffers plus activations, weights and optimizer state.
// Formulas in docs/cost-model.md; the paper's closed forms in algorithms.md §10-11.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/calibration.hpp"
#include "planner/plan.hpp"
#include "planner/schedule.hpp"

namespace wallfacer {

class Topology;

struct CommVolume {
  int64_t p2p_forward = 0, p2p_backward = 0;                // bytes sent per GPU (max over ranks)
  int64_t collective_forward = 0, collective_backward = 0;  // bytes sent per GPU (max over ranks)
  int64_t messages_forward = 0, messages_backward = 0;      // P2P messages sent (max over ranks)
};

struct MemoryEstimate {
  double model_state_GiB = 0;   // weights, gradients, optimizer state (ZeRO-sharded)
  double activations_GiB = 0;   // checkpoints of all layers (WallFacer Eq. 8-10 model)
  double attention_GiB = 0;     // the schedule's buffers at their capacity (replicas, double buffers)
  double total_GiB = 0;
};

struct CostOptions {
  // Representative ranks whose programs are timed; 0 = all ranks. Symmetric strategies give
  // every rank the same critical path, so large clusters time a sample.
  int max_timed_ranks = 64;
};

struct CostBreakdown {
  double forward_ms = 0, backward_ms = 0, step_ms = 0;
  double compute_ms = 0;         // busiest rank's compute stream, forward + backward
  double exposed_comm_ms = 0;    // step minus compute on the critical rank
  CommVolume volume;
  MemoryEstimate memory;
  double attention_flops = 0;  // whole layer, all ranks (algorithms.md §1.3)
  double mfu = 0;              // attention_flops / (step time * ranks * peak)
  Prediction to_prediction() const;
};

class CostModel {
 public:
  CostModel(const Topology& topology, Calibration calibration, CostOptions options = {});
  ~CostModel();
  // Builds (the needed part of) the schedule of `plan` and prices it.
  CostBreakdown evaluate(const Plan& plan) const;
  // Prices an already-built schedule (all ranks present or a representative subset).
  CostBreakdown evaluate(const Plan& plan, const Schedule& schedule) const;
  MemoryEstimate memory(const Plan& plan, const Schedule& schedule) const;
  const Topology& topology() const { return topology_; }
  const Calibration& calibration() const { return calibration_; }

 private:
  const Topology& topology_;
  Calibration calibration_;
  CostOptions options_;
};

// Communication volume of a full or partial schedule (sent bytes per rank, max over ranks).
CommVolume comm_volume(const Schedule& schedule);

}  // namespace wallfacer
