// wallfacer_gpu_kernels: the device attention kernels on 16-bit inputs, checked against the fp64
// reference and timed (run_kernel_case). Prints one JSON object per case; scripts/gpu-check runs
// it. Exit status 2 when no GPU is usable, 1 when a checked error exceeds its tolerance.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include <wallfacer/runtime/cuda/cuda_backend.hpp>
#include <wallfacer/runtime/cuda/kernel_check.hpp>

int main(int argc, char** argv) {
  using namespace wallfacer::runtime;
  CLI::App app("Check and time the GPU attention kernels on bf16/fp16 inputs");
  KernelCase c;
  std::string dtype = "bf16", mask = "causal";
  double tolerance = 0;
  app.add_option("--seq", c.seq, "Tokens (queries = keys)")->capture_default_str();
  app.add_option("--heads", c.heads, "Query heads")->capture_default_str();
  app.add_option("--kv-heads", c.kv_heads, "Key/value heads (GQA when fewer than --heads)")->capture_default_str();
  app.add_option("--head-dim", c.head_dim, "Head dimension (1..256)")->capture_default_str();
  app.add_option("--dtype", dtype, "bf16 or fp16")->check(CLI::IsMember({"bf16", "fp16"}))->capture_default_str();
  app.add_option("--mask", mask, "causal or full")->check(CLI::IsMember({"causal", "full"}))->capture_default_str();
  app.add_option("--reps", c.reps, "Timed repetitions after one warm-up")->capture_default_str();
  app.add_option("--seed", c.seed, "Seed of the inputs")->capture_default_str();
  app.add_option("--tolerance", tolerance, "Largest relative error that passes (default 1e-2 bf16, 2e-3 fp16)");
  app.add_option("--forward", c.forward,
                 "Forward kernel: tensor-cores (mma.sync, head_dim 64 or 128, else cuda-cores), wmma (the earlier "
                 "WMMA forward, same head dims) or cuda-cores")
      ->check(CLI::IsMember({"tensor-cores", "wmma", "cuda-cores"}))
      ->capture_default_str();
  app.add_option("--backward", c.backward,
                 "Backward kernel: tensor-cores (mma.sync, head_dim 64 or 128, else cuda-cores) or cuda-cores")
      ->check(CLI::IsMember({"tensor-cores", "cuda-cores"}))
      ->capture_default_str();
  bool no_reference = false;
  app.add_flag("--no-reference", no_reference, "Time only (the fp64 reference costs seq^2 per head on the CPU)");
  CLI11_PARSE(app, argc, argv);
  c.bf16 = dtype == "bf16";
  c.causal = mask == "causal";
  c.reference = !no_reference;
  if (c.heads % c.kv_heads != 0) {
    std::fprintf(stderr, "error: --heads %d is not a multiple of --kv-heads %d\n", c.heads, c.kv_heads);
    return 2;
  }
  if (tolerance <= 0) tolerance = c.bf16 ? 1e-2 : 2e-3;
  const CudaDeviceInfo info = cuda_device_info(0);
  if (!info.available) {
    std::fprintf(stderr, "error: no usable CUDA device here: %s\n", info.description.c_str());
    return 2;
  }
  try {
    const KernelReport r = run_kernel_case(c);
    nlohmann::json j{{"device", info.description},
                     {"seq", c.seq},
                     {"heads", c.heads},
                     {"kv_heads", c.kv_heads},
                     {"head_dim", c.head_dim},
                     {"dtype", dtype},
                     {"mask", mask},
                     {"forward_kernel", r.forward_kernel},
                     {"backward_kernel", r.backward_kernel},
                     {"forward_ms", r.forward_ms},
                     {"backward_ms", r.backward_ms},
                     {"forward_tflops", r.forward_tflops},
                     {"backward_tflops", r.backward_tflops}};
    bool ok = true;
    if (r.checked) {
      j["tolerance"] = tolerance;
      j["errors"] = {{"o", r.o}, {"lse", r.lse}, {"dq", r.dq}, {"dk", r.dk}, {"dv", r.dv}};
      for (double e : {r.o, r.lse, r.dq, r.dk, r.dv})
        ok = ok && e <= tolerance;
      j["ok"] = ok;
    }
    std::cout << j.dump() << std::endl;
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 3;
  }
}
